"""efficientdet-bench: speed figures, printed as medians over repeated runs.

Benchmarks:
  postprocess  network forward vs. post-processing (decode, top-k, NMS) for one batch.
"""

import os
import statistics
import sys
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

from absl import app, flags  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_enum("what", "postprocess", ["postprocess"], "Which benchmark to run.")
flags.DEFINE_string("model_name", "efficientdet-d0", "Model from the EfficientDet family.")
flags.DEFINE_string("hparams", "", "Config overrides: 'k=v,k2=v2' or a YAML file path.")
flags.DEFINE_integer("batch_size", 8, "Images per batch.")
flags.DEFINE_integer("image_size", 512, "Square input size in pixels.")
flags.DEFINE_integer("repeats", 10, "Timed runs per stage (after one warm-up run).")


def median_seconds(fn, repeats: int) -> float:
    """Runs fn once to warm up (tracing), then `repeats` times; returns the median time."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_postprocess(config) -> None:
    import tensorflow as tf

    from efficientdet_keras import EfficientDetNet
    from efficientdet_keras.postprocess import postprocess_detections

    model = EfficientDetNet(config=config)
    height, width = config.image_size
    images = tf.random.uniform([FLAGS.batch_size, height, width, 3], -2.0, 2.0, seed=1)
    forward = tf.function(lambda x: model(x, training=False))
    outputs = forward(images)
    scales = tf.ones([FLAGS.batch_size])
    methods = ("gaussian", "hard", "combined")
    post = {m: tf.function(lambda c, b, m=m: postprocess_detections(
        config, c, b, scales, nms_overrides={"method": m})) for m in methods}

    forward_time = median_seconds(lambda: [o.numpy() for o in forward(images)[0]], FLAGS.repeats)
    print("%s %dx%d batch %d, max_nms_inputs %d, score_thresh %g"
          % (config.name, height, width, FLAGS.batch_size, config.nms_configs.max_nms_inputs,
             config.nms_configs.score_thresh))
    print("%-32s %9.1f ms" % ("network forward (median)", forward_time * 1e3))
    for method in methods:
        seconds = median_seconds(lambda: post[method](*outputs).boxes.numpy(), FLAGS.repeats)
        print("%-32s %9.1f ms  (%.2f of forward)" % ("post-process %s (median)" % method,
                                                     seconds * 1e3, seconds / forward_time))


def main(argv):
    del argv
    from efficientdet_keras import get_efficientdet_config
    try:
        config = get_efficientdet_config(FLAGS.model_name)
        config.override(FLAGS.hparams)
        config.override({"image_size": FLAGS.image_size})
    except ValueError as e:
        sys.exit("efficientdet-bench: %s" % e)
    {"postprocess": bench_postprocess}[FLAGS.what](config)


def run():
    app.run(main)


if __name__ == "__main__":
    run()
