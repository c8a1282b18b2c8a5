"""bench.py --what=speed: one table of D0's speed on today's float32 path against the best path
the package offers (SPEED_PATHS), measured in the same run.

Every measurement runs in a fresh child process (`python -m benchmarks.speed --measure=...
--path=...`), so the two paths share no memory, traces or oneDNN caches, and the time to the
first step and the peak memory are those of a process that does nothing else. Each child
prints one JSON line; the parent prints the table. With several rounds, every child runs that
many times, the two paths back to back and their order swapped each round, and the table
gives the medians and the range of the rounds' ratios: on a shared machine, slow spells last
minutes, and alternating puts them on both columns.
"""

import dataclasses
import functools
import json
import os
import resource
import statistics
import subprocess
import sys
from typing import Tuple

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

from benchmarks.common import (DATA_DIR, TFLITE_THREADS, demo_validation_data,  # noqa: E402
                               has_demo_run, keras_metrics, median_seconds, one_cached_batch,
                               scratch_dir, step_seconds, tflite_metrics_and_latency,
                               timed_fit, training_run)

# The two columns. train_hparams: config overrides for training; memory_hparams: what the
# memory row adds to them (gradient checkpointing lowers the peak memory of a step but costs
# time, so the best path uses it for that row alone). Training stays float32 on the best path
# too: oneDNN's bfloat16 depthwise backward and Eigen's bfloat16 sigmoid are slower on a CPU
# than their float32 versions (docs/benchmarks.md). XLA stays off: on a CPU it compiles for long
# and then trains slower (docs/benchmarks.md, Training with XLA).
# Inference: infer_runtime "tensorflow" runs the Keras network (BatchNorm folded into the convs
# when fold, at infer_precision, None for float32); "tflite" runs the float32 .tflite with raw
# outputs through XNNPACK (one thread per core) and decodes it with the package's own
# post-processing, so its detections and AP are the Keras model's (docs/guides/on-device.md).
SPEED_PATHS = {
    "float32": {"train_hparams": "", "memory_hparams": "", "infer_runtime": "tensorflow",
                "infer_precision": None, "fold": False},
    "best": {"train_hparams": "", "memory_hparams": "grad_checkpoint=true",
             "infer_runtime": "tflite", "infer_precision": None, "fold": False},
}
# The row groups, in table order (--speed_rows).
SPEED_ROWS = ("train_256_4", "train_256_8", "train_512_4", "train_512_8", "network", "end_to_end",
              "first_step", "memory", "ap")
# The training rows' (size, batch); --speed_scale divides the sizes.
TRAIN_SHAPES = ((256, 4), (256, 8), (512, 4), (512, 8))
FIRST_STEP_SHAPE = (256, 4)
MEMORY_SHAPE = (512, 8)
INFERENCE_SIZE = 512
JPEG_SIZE = (480, 640)  # The end-to-end row's input: one 640x480 JPEG (height, width).
WARMUP_STEPS = 2  # Training steps left out of the median (tracing, first oneDNN calls).
# Latency rows: runs before the timed ones, and timed runs per --repeats. The first runs of
# either runtime are slower than the rest, and more runs steady medians that vary from run
# to run.
LATENCY_WARMUP = 10
LATENCY_RUNS_PER_REPEAT = 3
MEMORY_STEPS = 3  # Steps of the memory child when the training rows are not asked for.
# The AP of a trained model does not vary from run to run: its children run in round 1 only.
ONCE_ONLY = ("ap",)


@dataclasses.dataclass(frozen=True)
class SpeedSettings:
    """What the table measures: bench.py fills it from its flags, each child from its own.

    Attributes:
      model_name, hparams: the model and its config overrides (both paths).
      repeats: timed training steps; latency rows time LATENCY_RUNS_PER_REPEAT times more.
      data_dir: where the synthetic training images are written (and reused).
      model_dir: a demo run, for the AP rows (without one they read n/a).
      rows: the row groups to measure, of SPEED_ROWS.
      rounds: rounds of fresh processes, the two paths alternating within each.
      scale: multiplies every input size (0.25: 512 -> 128 px, 256 -> 64 px).
    """
    model_name: str = "efficientdet-d0"
    hparams: str = ""
    repeats: int = 10
    data_dir: str = DATA_DIR
    model_dir: str = os.path.join("runs", "demo")
    rows: Tuple[str, ...] = SPEED_ROWS
    rounds: int = 1
    scale: float = 1.0

    def scaled(self, size: int) -> int:
        """An input size of the table after the scale (1: as is)."""
        return int(round(size * self.scale))


def check_speed_settings(settings: SpeedSettings) -> None:
    """Raises ValueError naming the flag when --speed_rows or --speed_scale is unusable."""
    unknown = [row for row in settings.rows if row not in SPEED_ROWS]
    if unknown or not settings.rows:
        raise ValueError("--speed_rows: unknown row(s) %s; choose from %s"
                         % (", ".join(map(repr, unknown)) or "(none given)",
                            ", ".join(SPEED_ROWS)))
    if not 0 < settings.scale <= 1:
        raise ValueError("--speed_scale: must be in (0, 1]; got %g" % settings.scale)
    for size in (256, 512):
        if settings.scaled(size) % 64:  # D0's levels 3-7 need the input to halve cleanly.
            raise ValueError("--speed_scale: %g makes %d px into %d px, not a multiple of 64"
                             % (settings.scale, size, settings.scaled(size)))


def train_row(shape) -> str:
    """The --speed_rows name of a training row: train_<size>_<batch> (sizes before scaling)."""
    return "train_%d_%d" % shape


# --- the children: one measurement each, printed as one JSON line --------------------------

def path_config(settings: SpeedSettings, path: str, image_size: int, batch_size: int,
                training: bool, memory: bool = False):
    """The config of the model (plus its hparams) at a size and batch, with the path's
    training overrides when `training` (and its memory-row ones when `memory`)."""
    from efficientdet_keras import get_efficientdet_config
    config = get_efficientdet_config(settings.model_name)
    config.override(settings.hparams)
    config.override({"image_size": image_size, "batch_size": batch_size, "num_classes": 4})
    if training:
        config.override(SPEED_PATHS[path]["train_hparams"])
    if memory:
        config.override(SPEED_PATHS[path]["memory_hparams"])
    return config


def training_data(settings: SpeedSettings, image_size: int):
    """The synthetic training images of one size (written once in data_dir, then reused)."""
    from efficientdet_keras.data.synthetic import write_synthetic_dataset
    return write_synthetic_dataset(os.path.join(settings.data_dir, "speed-%d" % image_size),
                                   num_train=16, num_val=1, image_size=image_size, seed=2)


def measure_train(settings: SpeedSettings, path: str, image_size: int, batch_size: int,
                  steps: int, memory: bool = False) -> dict:
    """The trainer's fit for `steps` steps on one cached batch: images/s (median of the
    steps after the first WARMUP_STEPS), seconds from building the model to the end of the
    first step, and this process's peak resident memory. `memory`: with the path's
    memory_hparams."""
    config = path_config(settings, path, image_size, batch_size, training=True, memory=memory)
    run = training_run(config, training_data(settings, image_size), steps_per_epoch=steps)
    first_step, ends = timed_fit(run, one_cached_batch(run), steps)
    step_times = step_seconds(ends, WARMUP_STEPS)
    result = {"first_step_s": first_step, "max_rss_mb": max_rss_megabytes()}
    if step_times:
        result["images_per_s"] = batch_size / statistics.median(step_times)
    return result


def max_rss_megabytes() -> float:
    """Peak resident memory of this process in MB (10^6 bytes; Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6


def inference_model(settings: SpeedSettings, path: str, image_size: int):
    """An untrained network at image_size, and what the path serves: itself (float32 path)
    or its BatchNorm-folded copy at the path's precision."""
    from efficientdet_keras import EfficientDetNet
    from efficientdet_keras.inference.serving_graph import inference_network

    model = EfficientDetNet(config=path_config(settings, path, image_size, 1, training=False))
    model.build_variables()
    spec = SPEED_PATHS[path]
    return model, inference_network(model, spec["fold"], spec["infer_precision"])


def latency_ms(settings: SpeedSettings, fn) -> float:
    """Median milliseconds of fn after LATENCY_WARMUP runs."""
    return 1e3 * median_seconds(fn, LATENCY_RUNS_PER_REPEAT * settings.repeats,
                                warmup=LATENCY_WARMUP)


def uses_tflite(path: str) -> bool:
    return SPEED_PATHS[path]["infer_runtime"] == "tflite"


def tflite_detector(model):
    """A TFLiteRunner of `model` exported as a float32 .tflite with raw outputs (XNNPACK,
    one interpreter thread per core)."""
    from efficientdet_keras.exporters.tflite import export_tflite
    from efficientdet_keras.inference.tflite_runner import TFLiteRunner

    path = os.path.join(scratch_dir("speed_"), "raw.tflite")
    return TFLiteRunner(export_tflite(model, path, outputs="raw"), num_threads=os.cpu_count())


def measure_network(settings: SpeedSettings, path: str, image_size: int) -> dict:
    """Median ms of the network alone (a tf.function of it, or the .tflite interpreter's run
    on a letterboxed uint8 image) on one image."""
    import numpy as np
    import tensorflow as tf

    model, network = inference_model(settings, path, image_size)
    if uses_tflite(path):
        detector = tflite_detector(model)
        image = np.random.default_rng(1).integers(0, 256, detector.image_size + (3,), np.uint8)
        return {"network_ms": latency_ms(settings, lambda: detector.run(image))}
    images = tf.random.uniform([1, image_size, image_size, 3], -2.0, 2.0, seed=1)
    forward = tf.function(lambda x: network(x, training=False))
    return {"network_ms": latency_ms(settings,
                                     lambda: [o.numpy() for o in forward(images)[0]])}


def measure_end_to_end(settings: SpeedSettings, path: str, image_size: int) -> dict:
    """Median ms from one 640x480 JPEG to its detections: decode, preprocess, network, NMS.
    TensorFlow paths: the detection SavedModel (the path's folding and precision) through its
    image_bytes signature; the TFLite path: tf.io.decode_jpeg and TFLiteRunner.detect."""
    import numpy as np
    import tensorflow as tf

    from efficientdet_keras.exporters.saved_model import export_detector

    model, _ = inference_model(settings, path, image_size)
    spec = SPEED_PATHS[path]
    pixels = np.random.default_rng(0).integers(0, 256, JPEG_SIZE + (3,), dtype=np.uint8)
    jpeg = tf.io.encode_jpeg(pixels).numpy()
    if uses_tflite(path):
        detector = tflite_detector(model)
        return {"end_to_end_ms": latency_ms(
            settings, lambda: detector.detect(tf.io.decode_jpeg(jpeg, channels=3)))}
    export_dir = os.path.join(scratch_dir("speed_"), "saved_model")
    export_detector(model, export_dir, fold_batch_norm=spec["fold"],
                    mixed_precision=spec["infer_precision"])
    detect = tf.saved_model.load(export_dir).signatures["image_bytes"]
    images = tf.constant([jpeg])
    return {"end_to_end_ms": latency_ms(
        settings, lambda: detect(images=images)["num_detections"].numpy())}


def measure_ap(settings: SpeedSettings, path: str, batch_size: int) -> dict:
    """AP and AP50 of the demo run in model_dir: the unfolded float32 model on the float32
    path; the path's inference network (folded, its precision) or its .tflite otherwise."""
    from efficientdet_keras.inference.loading import load_model_and_config
    from efficientdet_keras.inference.serving_graph import inference_network

    data = demo_validation_data(settings.model_dir)
    model, config = load_model_and_config(settings.model_dir, "", settings.model_name,
                                          settings.hparams)
    spec = SPEED_PATHS[path]
    if uses_tflite(path):
        metrics, _ = tflite_metrics_and_latency(tflite_detector(model).path, data, repeats=1,
                                                batch_size=batch_size,
                                                num_threads=TFLITE_THREADS)
    else:
        network = inference_network(model, spec["fold"], spec["infer_precision"])
        metrics = keras_metrics(network, network.config, data, batch_size)
    return {"AP": float(metrics["AP"]), "AP50": float(metrics["AP50"])}


# Each child's measurement: fn(settings, path, image size, batch size, training steps).
MEASURES = {
    "train": measure_train,
    "memory": functools.partial(measure_train, memory=True),
    "network": lambda settings, path, size, batch, steps: measure_network(settings, path, size),
    "end_to_end": lambda settings, path, size, batch, steps: measure_end_to_end(settings, path,
                                                                                size),
    "ap": lambda settings, path, size, batch, steps: measure_ap(settings, path, batch),
}


# --- the parent: run the children, print the table -----------------------------------------

def child_command(settings: SpeedSettings, measure: str, path: str, image_size: int,
                  batch_size: int, train_steps: int = 0):
    """The command line of one child; it inherits the parent's shared settings."""
    return [sys.executable, "-m", "benchmarks.speed",
            "--measure=%s" % measure, "--path=%s" % path, "--image_size=%d" % image_size,
            "--batch_size=%d" % batch_size, "--train_steps=%d" % train_steps,
            "--repeats=%d" % settings.repeats, "--model_name=%s" % settings.model_name,
            "--hparams=%s" % settings.hparams, "--data_dir=%s" % settings.data_dir,
            "--model_dir=%s" % settings.model_dir]


def child_environment() -> dict:
    """The parent's environment, with Keras 2, and the checkout on PYTHONPATH: a child finds
    this benchmarks package and the efficientdet_keras beside it from any folder."""
    checkout = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (checkout, env.get("PYTHONPATH")) if p)
    return env


def parse_child_output(stdout: str, stderr: str, command) -> dict:
    """The JSON line a child printed last; RuntimeError with its stderr's end when none."""
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError("%s printed no result:\n%s" % (" ".join(command[3:5]), stderr[-3000:]))


def run_child(settings: SpeedSettings, measure: str, path: str, image_size: int,
              batch_size: int, train_steps: int = 0) -> dict:
    """Runs one child to the end and returns its result."""
    command = child_command(settings, measure, path, image_size, batch_size, train_steps)
    result = subprocess.run(command, capture_output=True, text=True, env=child_environment())
    if result.returncode != 0:
        raise RuntimeError("%s failed:\n%s" % (" ".join(command[3:5]), result.stderr[-3000:]))
    return parse_child_output(result.stdout, result.stderr, command)


def train_runs(settings: SpeedSettings, rows):
    """{(size, batch): steps} of the training children the asked rows need: the training rows
    time `repeats` steps after the warm-up; the first-step and memory rows read the same
    children (fresh processes) or, alone, a short run of their own."""
    runs = {shape: WARMUP_STEPS + settings.repeats for shape in TRAIN_SHAPES
            if train_row(shape) in rows}
    if "first_step" in rows:
        runs.setdefault(FIRST_STEP_SHAPE, 1)
    if "memory" in rows:
        runs.setdefault(MEMORY_SHAPE, MEMORY_STEPS)
    return runs


def path_children(settings: SpeedSettings, path: str, rows):
    """The children `path` runs for `rows`: [(name, (measure, size, batch, steps), pick)],
    where pick(result) gives the table's {key: value} (train_256_4, first_step_s, memory_mb,
    network_ms, end_to_end_ms, AP, AP50) from the child's JSON."""
    own_memory_child = "memory" in rows and bool(SPEED_PATHS[path]["memory_hparams"])

    def pick_training(shape):
        def pick(trained):
            values = {}
            if "images_per_s" in trained:
                values[train_row(shape)] = trained["images_per_s"]
            if shape == FIRST_STEP_SHAPE:
                values["first_step_s"] = trained["first_step_s"]
            if shape == MEMORY_SHAPE and not own_memory_child:
                values["memory_mb"] = trained["max_rss_mb"]
            return values
        return pick

    def needed(shape):  # Not the training child that only a memory row of its own needs.
        return (train_row(shape) in rows or (shape == FIRST_STEP_SHAPE and "first_step" in rows)
                or (shape == MEMORY_SHAPE and not own_memory_child))

    children = [(train_row(shape), ("train", settings.scaled(shape[0]), shape[1], steps),
                 pick_training(shape)) for shape, steps in train_runs(settings, rows).items()
                if needed(shape)]
    if own_memory_child:
        children.append(("memory", ("memory", settings.scaled(MEMORY_SHAPE[0]), MEMORY_SHAPE[1],
                                    MEMORY_STEPS), lambda r: {"memory_mb": r["max_rss_mb"]}))
    for measure in ("network", "end_to_end"):
        if measure in rows:
            children.append((measure, (measure, settings.scaled(INFERENCE_SIZE), 1, 0), dict))
    if "ap" in rows and has_demo_run(settings.model_dir):
        children.append(("ap", ("ap", settings.scaled(INFERENCE_SIZE), 8, 0), dict))
    return children


def measure_rounds(settings: SpeedSettings, rows, rounds: int, run=None):
    """[{path: {key: value}}] for each of `rounds` rounds. Within a round each child runs for
    both paths back to back, the paths' order swapped every round, so that a slow spell of a
    shared machine falls on both columns alike. `run` (for tests): run_child's stand-in,
    without its settings argument."""
    run = run or functools.partial(run_child, settings)
    plans = {path: {name: (arguments, pick) for name, arguments, pick
                    in path_children(settings, path, rows)} for path in SPEED_PATHS}
    names = list(dict.fromkeys(name for plan in plans.values() for name in plan))
    results = []
    for index in range(rounds):
        order = list(SPEED_PATHS)[::1 if index % 2 == 0 else -1]
        values = {path: {} for path in SPEED_PATHS}
        for name in names:
            if index and name in ONCE_ONLY:
                continue
            for path in order:
                if name in plans[path]:
                    (measure, size, batch, steps), pick = plans[path][name]
                    values[path].update(pick(run(measure, path, size, batch, steps)))
        results.append(values)
    return results


def combine_rounds(rounds):
    """({path: {key: median over the rounds}}, {key: (lowest, highest) best/float32 ratio of
    one round}, for the keys measured in more than one round) of measure_rounds' results."""
    medians, ratio_ranges = {}, {}
    for path in SPEED_PATHS:
        keys = {key for values in rounds for key in values[path]}
        medians[path] = {key: statistics.median(values[path][key] for values in rounds
                                                if key in values[path]) for key in keys}
    first, second = SPEED_PATHS
    for key in medians[first]:
        ratios = [values[second][key] / values[first][key] for values in rounds
                  if key in values[first] and key in values[second] and values[first][key]]
        if len(ratios) > 1:
            ratio_ranges[key] = (min(ratios), max(ratios))
    return medians, ratio_ranges


def table_rows(settings: SpeedSettings, rows):
    """[(label, result key, value format)] of the asked rows, in table order."""
    table = [("training %d px batch %d (img/s)" % (settings.scaled(size), batch),
              train_row((size, batch)), "%.2f")
             for size, batch in TRAIN_SHAPES if train_row((size, batch)) in rows]
    size = settings.scaled(INFERENCE_SIZE)
    if "network" in rows:
        table.append(("latency %d px batch 1, network (ms)" % size, "network_ms", "%.1f"))
    if "end_to_end" in rows:
        table.append(("latency %d px batch 1, JPEG to detections (ms)" % size, "end_to_end_ms",
                      "%.1f"))
    if "first_step" in rows:
        table.append(("time to first step, %d px batch %d (s)"
                      % (settings.scaled(FIRST_STEP_SHAPE[0]), FIRST_STEP_SHAPE[1]),
                      "first_step_s", "%.1f"))
    if "memory" in rows:
        table.append(("peak memory, training %d px batch %d (MB)"
                      % (settings.scaled(MEMORY_SHAPE[0]), MEMORY_SHAPE[1]), "memory_mb",
                      "%.0f"))
    if "ap" in rows:
        table += [("demo AP", "AP", "%.4f"), ("demo AP50", "AP50", "%.4f")]
    return table


def ratio_cell(float32_text: str, best_text: str) -> str:
    """best/float32 of two printed values (so the ratio matches the table), 'n/a' for a zero."""
    base = float(float32_text)
    return "%.2f" % (float(best_text) / base) if base else "n/a"


def format_table(settings: SpeedSettings, results, rows, ratio_ranges=None) -> str:
    """The Markdown table: a row per measurement, the two paths and their ratio; with
    `ratio_ranges` (several rounds), a column of the rounds' lowest and highest ratio."""
    header = "| measurement | float32 | best | best/float32 |"
    if ratio_ranges is not None:
        header += " rounds' best/float32 |"
    lines = [header, "|---|---|---|---|" + ("---|" if ratio_ranges is not None else "")]
    for label, key, fmt in table_rows(settings, rows):
        if key not in results["float32"]:  # Only the AP rows may be missing (no demo run).
            cells = ["n/a (no demo run in %s: make demo)" % settings.model_dir, "", ""]
        else:
            cells = [fmt % results[path][key] for path in SPEED_PATHS]
            cells.append(ratio_cell(*cells))
        if ratio_ranges is not None:
            low_high = ratio_ranges.get(key)
            cells.append("%.2f-%.2f" % low_high if low_high else "")
        lines.append("| %s | %s |" % (label, " | ".join(cells)))
    return "\n".join(lines)


def machine_line() -> str:
    """CPU model (/proc/cpuinfo), core count and TensorFlow version."""
    import tensorflow as tf
    cpu = "unknown CPU"
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f
                     if line.startswith("model name")]
        cpu = names[0] if names else cpu
    return "%s, %d cores, TensorFlow %s" % (cpu, os.cpu_count(), tf.__version__)


def describe_path(name: str) -> str:
    spec = SPEED_PATHS[name]
    memory = (", memory row with %s" % spec["memory_hparams"]) if spec["memory_hparams"] else ""
    if uses_tflite(name):
        inference = ("TFLite float32 (raw outputs, XNNPACK, %d threads) with the package's "
                     "post-processing" % os.cpu_count())
    else:
        inference = "TensorFlow %s, BatchNorm %s" % (spec["infer_precision"] or "float32",
                                                     "folded" if spec["fold"] else "unfolded")
    return "%s: training %s%s; inference %s; no XLA" % (
        name, spec["train_hparams"] or "float32", memory, inference)


def bench_speed(settings: SpeedSettings) -> None:
    """The speed table of the asked rows, each figure from a fresh process, the median of
    settings.rounds of them."""
    rows = [row for row in SPEED_ROWS if row in settings.rows]
    for size, _ in train_runs(settings, rows):
        training_data(settings, settings.scaled(size))  # Written here once, not in a timed child.
    results, ratio_ranges = combine_rounds(measure_rounds(settings, rows, settings.rounds))
    print("%s on %s" % (settings.model_name, machine_line()))
    print("medians (training: %d steps after %d warm-up steps; latency: %d runs after %d "
          "warm-up runs; first step and memory: one fresh process each, memory after the "
          "training steps)" % (settings.repeats, WARMUP_STEPS,
                               LATENCY_RUNS_PER_REPEAT * settings.repeats, LATENCY_WARMUP))
    if settings.rounds > 1:
        print("each figure: the median of %d rounds of fresh processes, the paths alternating"
              % settings.rounds)
    for name in SPEED_PATHS:
        print(describe_path(name))
    print(format_table(settings, results, rows, ratio_ranges if settings.rounds > 1 else None))


# --- a child's command line ------------------------------------------------------------------

def define_child_flags() -> None:
    """The flags child_command passes."""
    from absl import flags
    flags.DEFINE_enum("measure", "train", list(MEASURES), "What this child measures.")
    flags.DEFINE_enum("path", "float32", list(SPEED_PATHS), "Which path it measures.")
    flags.DEFINE_integer("image_size", 512, "Square input size in pixels.")
    flags.DEFINE_integer("batch_size", 1, "Images per batch.")
    flags.DEFINE_integer("train_steps", 0, "train, memory: steps to run.")
    flags.DEFINE_integer("repeats", 10, "Timed training steps; latency: times "
                         "LATENCY_RUNS_PER_REPEAT runs.")
    flags.DEFINE_string("model_name", "efficientdet-d0", "Model from the EfficientDet family.")
    flags.DEFINE_string("hparams", "", "Config overrides.")
    flags.DEFINE_string("data_dir", SpeedSettings.data_dir, "Synthetic training images.")
    flags.DEFINE_string("model_dir", SpeedSettings.model_dir, "ap: a demo run.")


def child_main(argv) -> None:
    """A child's main: one measurement (--measure) of one path (--path), as a JSON line."""
    from absl import flags
    del argv
    FLAGS = flags.FLAGS
    settings = SpeedSettings(model_name=FLAGS.model_name, hparams=FLAGS.hparams,
                             repeats=FLAGS.repeats, data_dir=FLAGS.data_dir,
                             model_dir=FLAGS.model_dir)
    result = MEASURES[FLAGS.measure](settings, FLAGS.path, FLAGS.image_size, FLAGS.batch_size,
                                     FLAGS.train_steps)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    from efficientdet_keras.cli.common import run_app
    define_child_flags()
    run_app(child_main, __name__)
