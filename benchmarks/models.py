"""`bench.py --what=models`: what each released detector costs on this CPU, for choosing one.

For each model at its own input size: the trainable parameters of the built network (what
papers count), the size of its float32 weights (every variable, BatchNorm statistics too: what
a checkpoint or a float32 export holds), and the network's batch-1 latency (a `tf.function` of the Keras model in
inference mode, float32, the median of --repeats runs after one warm-up). None of these
depends on the weights, so untrained networks are measured; COCO AP is the published one.
"""

import gc
from typing import List

from benchmarks.common import median_seconds
from benchmarks.results import record
from benchmarks.speed import machine_line

RESULTS_ENTRY = "released_models_cpu"


def measure_model(model_name: str, repeats: int) -> dict:
    import numpy as np
    import tensorflow as tf

    from efficientdet_keras import EfficientDetNet, get_efficientdet_config
    from efficientdet_keras.config.overrides import parse_image_size

    config = get_efficientdet_config(model_name)
    height, width = parse_image_size(config.image_size)
    model = EfficientDetNet(config=config)
    image = tf.constant(np.random.default_rng(0).uniform(0, 1, (1, height, width, 3)),
                        tf.float32)
    forward = tf.function(lambda x: model(x, training=False))

    def run():
        classes, _ = forward(image)
        classes[0].numpy()  # Waits for the whole network.

    seconds = median_seconds(run, repeats, warmup=1)
    row = {"model": model_name, "image_size": "%dx%d" % (height, width),
           "params_m": round(sum(v.shape.num_elements() for v in model.trainable_variables)
                             / 1e6, 2),
           "float32_mb": round(sum(v.shape.num_elements() for v in model.variables) * 4 / 1e6,
                               1),
           "latency_ms": round(seconds * 1000, 1)}
    del model, forward
    tf.keras.backend.clear_session()
    gc.collect()
    return row


def bench_models(model_names: List[str], repeats: int, results_path: str) -> None:
    print("%-20s %9s %9s %11s %13s" % ("model", "input", "params M", "float32 MB",
                                       "network ms"))
    rows = []
    for name in model_names:
        row = measure_model(name, repeats)
        rows.append(row)
        print("%-20s %9s %9.2f %11.1f %13.1f" % (
            name, row["image_size"], row["params_m"], row["float32_mb"], row["latency_ms"]),
            flush=True)
    entry = record(RESULTS_ENTRY, rows, machine_line(), results_path)
    print("Recorded as %r in %s (%s, %s)" % (RESULTS_ENTRY, results_path, entry["date"],
                                             entry["commit"]))
