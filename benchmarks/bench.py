"""python benchmarks/bench.py --what=...: the project's speed figures, printed as medians over
repeated runs.

Benchmarks:
  postprocess  network forward vs. post-processing (decode, top-k, NMS) for one batch.
  pipeline     training input pipeline images/s vs. the images/s a train step consumes,
               at 512 and 256 px.
  train        the trainer's fit (training.run.TrainingRun): time to the first step and
               images/s, with and without XLA.
  serve        end-to-end latency of the detection SavedModel (decode, preprocess,
               network, NMS) on JPEG bytes, batch 1 and 8.
  export       seconds to write the detection SavedModel and the float32 .tflite of
               --model_name at --image_size: the first export in a process, then the median
               of --repeats more.
  eval         a full COCO evaluation of synthetic images: network, post-processing and
               scoring times, and faster-coco-eval against pycocotools on the same detections.
  tflite       a trained model (--model_dir, default runs/demo: what `make demo` trains)
               as Keras fp32, TFLite float32 (detections and raw outputs), float16 and int8
               and a SavedModel: AP and AP50 on its validation data, batch-1 latency
               (XNNPACK, --tflite_threads; network only for raw) and size.
  resize       a trained model's float32 .tflite (--model_dir) scored with the images
               letterboxed (the package's own resize) and stretched to the input (what
               MediaPipe and the Task Library do to a camera frame), on the demo's square
               validation images (--demo_dir) and on 640x480 shapes (--data_dir, whose
               training split fine-tunes a model for stretching).
  short_runs   D0 from scratch on the demo's shapes (256 px) and on a second synthetic dataset
               (striped glyphs, 128 px, 512 steps): AP, AP50, training and inference-mode
               validation loss by epoch (benchmarks/short_runs.py).
  short_run_spread  the short runs over --spread_seeds, and once with every box target moved by
               1e-7: final AP and AP50 per run, their mean, min, max and span per dataset,
               and the inference-mode validation loss by epoch (benchmarks/short_run_spread.py),
               recorded in --results_file.
  learning_guard  the learning guard of tests/test_short_runs.py (benchmarks/learning_guard.py)
               over --spread_seeds, and the same run learning less (half the steps, half the
               learning rate): training and validation loss, AP and AP50, recorded in
               --results_file.
  augment      training pipeline images/s with each augmentation option on (flip and scale
               jitter, AutoAugment v0-v3, RandAugment, GridMask, mosaic, mixup, all of them), at
               --image_size, next to the images/s a train step of --model_name consumes there.
  kills        a small demo training run stopped with --kill_signal (SIGKILL, or SIGTERM and
               SIGINT, which it answers by backing up its step) at --kills random moments
               (seeded by --kill_seed) and restarted each time: steps lost per stop, exit
               statuses and seconds from signal to exit, and whether the run still ends with
               the step count of an unstopped one (benchmarks/kill_harness.py).
  speed        D0 on today's float32 path against the best one (benchmarks/speed.py
               SPEED_PATHS), side by side: training images/s at 256 and 512 px, batch 4 and
               8; batch-1 latency at 512 px, network only and JPEG to detections; time to the
               first step; peak training memory; demo AP and AP50. --speed_rounds repeats the
               fresh processes, the two paths alternating.
  callbacks    the milliseconds per step the run's callbacks (get_callbacks, no validation)
               and fit's progress output add to fit, in all and on the host (between
               train_function calls), and what a step backup adds to the steps, at --image_size
               and --batch_size: the same model fitted in --repeats alternating rounds of each.
  models       each of --models at its own input size: parameters, float32 weight size and
               the network's batch-1 latency (benchmarks/models.py), recorded in
               --results_file for the docs' "Choose a model" table.
  formats      a trained demo run (--model_dir) in every serving format (SavedModel, ONNX,
               OpenVINO float32/float16/int8, TFLite float32/float16/int8): AP and AP50 on its
               validation images, latency at batch 1, images/s at batch 8 and size
               (benchmarks/formats.py), recorded in --results_file as --results_entry.
  openvino_int8  the same run's OpenVINO IR quantized to int8 with each NNCF preset, its class
               and box prediction convolutions quantized or kept in float32: AP and AP50 on the
               validation images beside float32's (benchmarks/formats.py), recorded in
               --results_file.

  class_rows   fine-tuning a checkpoint that knows two of the data's three class names: COCO
               AP after the same steps with the class rows carried by name, skipped, or taken
               by class count (benchmarks/class_rows.py), recorded in --results_file.

  large_inputs the class-rows benchmark's shape detector (D0 at 128 px) on 20- and 32-pixel
               shapes in a 3000x3000 image (recall, shapes found twice and seconds, over the
               whole image and in tiles) and on a 640x360 clip (frames/s of detect_video, with and without
               tracking) (benchmarks/large_inputs.py), recorded in --results_file.

  host         what the host spends feeding an accelerator: the training input pipeline's
               images per CPU-second at --image_size and --batch_size, this package's beside the
               reference implementation's (google/automl, built by
               ../shared/reference/automl/setup.sh; $EFFICIENTDET_REFERENCE names its folder),
               --host_rounds rounds alternating (benchmarks/host_feed.py), recorded in
               --results_file.

  open_data    a COCO folder of --open_data_images JPEGs: seconds to open it and read its
               records, and for describe() and its checks across splits
               (benchmarks/data_reading.py).

A user's own model is measured by `efficientdet-bench --model=PATH` (Detector.benchmark).
"""

import os
import signal
import statistics
import sys
import time

# Run as `python benchmarks/bench.py`: the checkout, for the benchmarks package and the
# efficientdet_keras beside it.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

from absl import flags  # noqa: E402

from benchmarks import formats, models, speed  # noqa: E402
from benchmarks.results import RESULTS_PATH  # noqa: E402
from benchmarks.common import (DATA_DIR, TFLITE_THREADS, demo_validation_data,  # noqa: E402
                               keras_metrics, median_seconds, one_cached_batch,
                               scratch_dir, step_end_recorder, step_seconds,
                               tflite_metrics_and_latency, timed_fit, training_run)
from efficientdet_keras.cli.common import HPARAMS_HELP, run_app  # noqa: E402

PROGRAM = "benchmarks/bench.py"

FLAGS = flags.FLAGS
flags.DEFINE_enum("what", "postprocess",
                  ["postprocess", "pipeline", "eval", "train", "serve", "export", "kills",
                   "tflite",
                   "short_runs", "short_run_spread", "learning_guard", "augment", "speed",
                   "resize", "callbacks", "models",
                   "formats", "openvino_int8", "open_data", "class_rows",
                   "large_inputs", "host"],
                  "Which benchmark to run.")
flags.DEFINE_list("models", ["efficientdet-d%s" % d for d in "01234567"] + [
    "efficientdet-d7x"] + ["efficientdet-lite%s" % d for d in ("0", "1", "2", "3", "3x", "4")],
    "models: the models to measure.")
flags.DEFINE_string("results_file", RESULTS_PATH,
                    "models, formats, openvino_int8, class_rows, large_inputs: the results file "
                    "the figures are recorded in.")
flags.DEFINE_string("results_entry", "format_table_demo",
                    "formats: the entry of the results file the table is recorded as.")
flags.DEFINE_integer("eval_images", 500, "eval: how many synthetic images to evaluate.")
flags.DEFINE_string("model_name", "efficientdet-d0", "Model from the EfficientDet family.")
flags.DEFINE_string("hparams", "", HPARAMS_HELP)
flags.DEFINE_integer("batch_size", 8, "Images per batch.")
flags.DEFINE_integer("image_size", 512, "Square input size in pixels.")
flags.DEFINE_integer("repeats", 10, "Timed runs per stage (after one warm-up run).")
flags.DEFINE_integer("host_rounds", 3, "host: rounds of the two pipelines, alternating.")
flags.DEFINE_integer("open_data_images", 2000, "open_data: the images of the COCO folder.")
flags.DEFINE_list("sizes", ["512", "256"], "pipeline: input sizes to measure.")
flags.DEFINE_integer("kills", 20, "kills: how many times to kill the training run.")
flags.DEFINE_integer("kill_seed", 0, "kills: seed of the random kill moments.")
flags.DEFINE_enum("kill_signal", "SIGKILL", ["SIGKILL", "SIGTERM", "SIGINT"],
                  "kills: the signal that stops the run.")
flags.DEFINE_float("kill_window", 30.0, "kills: each kill comes at a uniform random moment "
                   "this many seconds at most after the restarted run's first step.")
flags.DEFINE_string("model_dir", os.path.join("runs", "demo"),
                    "tflite, formats, openvino_int8: a trained demo run (config.yaml, checkpoints, "
                    "synthetic/).")
flags.DEFINE_integer("tflite_threads", TFLITE_THREADS, "tflite: interpreter threads.")
flags.DEFINE_list("short_runs", ["glyphs", "demo"], "short_runs, short_run_spread: which runs "
                  "(glyphs, demo).")
flags.DEFINE_list("spread_seeds", ["0", "1", "2", "3", "4"], "short_run_spread: the seeds.")
flags.DEFINE_integer("spread_perturbed_seed", 0, "short_run_spread: the seed run once more with "
                     "its box targets moved by 1e-7 (-1: none).")
flags.DEFINE_string("spread_record", "short_run_spread", "short_run_spread: the name its two "
                    "tables are recorded under (NAME and NAME_runs); another name keeps a variant "
                    "(say, --hparams=batch_norm_fixed_epochs=0) beside the presets' own.")
flags.DEFINE_integer("spread_jobs", 2, "short_run_spread: runs trained at a time, each in its "
                     "own process with the cores shared out.")
# augment: each row's --hparams, added to the config's flip and scale jitter.
AUGMENT_OPTIONS = {
    "baseline": "",
    "v0": "autoaugment_policy=v0",
    "v1": "autoaugment_policy=v1",
    "v2": "autoaugment_policy=v2",
    "v3": "autoaugment_policy=v3",
    "randaug": "autoaugment_policy=randaug",
    "grid_mask": "grid_mask=true",
    "mosaic": "mosaic=1.0",
    "mixup": "mixup=1.0",
    "all": "autoaugment_policy=v0,grid_mask=true,mosaic=1.0,mixup=1.0",
}
flags.DEFINE_list("augment_options", list(AUGMENT_OPTIONS),
                  "augment: the rows to measure, of %s." % ", ".join(AUGMENT_OPTIONS))
flags.DEFINE_bool("train_step", True, "augment: also time a train step of --model_name at the "
                  "same size and batch (the consumption and ratio columns).")
flags.DEFINE_string("data_dir", DATA_DIR,
                    "pipeline, augment: where the synthetic benchmark data is written (and "
                    "reused).")
flags.DEFINE_list("speed_rows", list(speed.SPEED_ROWS),
                  "speed: the rows to measure, of %s." % ", ".join(speed.SPEED_ROWS))
flags.DEFINE_integer("speed_rounds", 1, "speed: rounds of fresh processes, the two paths "
                     "alternating within each; the table gives each figure's median over the "
                     "rounds and the range of the rounds' ratios.", lower_bound=1)
flags.DEFINE_float("speed_scale", 1.0, "speed, for tests: multiplies every input size "
                   "(0.25: 512 -> 128 px, 256 -> 64 px).")
flags.DEFINE_string("demo_dir", os.path.join("runs", "demo"),
                    "resize: a `make demo` run, whose square validation images are scored.")
flags.DEFINE_integer("pipeline_images", 256, "pipeline, augment: how many synthetic 640x480 "
                     "training images to write to --data_dir.", lower_bound=8)


def bench_postprocess(config) -> None:
    import tensorflow as tf

    from efficientdet_keras import EfficientDetNet
    from efficientdet_keras.detection.postprocess import postprocess_detections

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


def train_step_seconds(config, batch) -> float:
    """Median seconds of one gradient step (forward, detection loss, backward, SGD)."""
    import tensorflow as tf
    import tf_keras as keras

    from efficientdet_keras import EfficientDetNet
    from efficientdet_keras.detection.losses import DetectionLoss

    model = EfficientDetNet(config=config)
    loss_fn = DetectionLoss(config)
    optimizer = keras.optimizers.SGD(0.01, momentum=0.9)
    images, labels = batch

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            class_outputs, box_outputs = model(images, training=True)
            loss = loss_fn(labels, class_outputs, box_outputs)["det_loss"]
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return median_seconds(lambda: float(step()), max(3, FLAGS.repeats // 3))


def pipeline_images_per_second(dataset, batches: int) -> float:
    """Images/s of a dataset after a warm-up of 2 batches (fills buffers, traces maps)."""
    iterator = iter(dataset)
    for _ in range(2):
        next(iterator)
    count, start = 0, time.perf_counter()
    for _ in range(batches):
        images, _ = next(iterator)
        count += int(images.shape[0])
    return count / (time.perf_counter() - start)


def pipeline_benchmark_data():
    """--pipeline_images synthetic training images in --data_dir (written once, then reused), as
    TFRecords of COCO-like 640x480 JPEGs, so decoding and resizing cost what they do in
    practice."""
    from efficientdet_keras.data.synthetic import write_synthetic_dataset
    return write_synthetic_dataset(FLAGS.data_dir, num_train=FLAGS.pipeline_images, num_val=8,
                                   image_size=(480, 640), seed=0)


# resize: 640x480 (4:3, a camera frame) shapes, as many training images as the demo preset's
# 80 steps of 8 consume in one epoch, and 100 validation images.
RESIZE_DATA = dict(num_train=640, num_val=100, image_size=(480, 640), seed=1)


def resize_benchmark_data():
    """The non-square set of the resize benchmark in --data_dir/shapes-640x480 (written once)."""
    from efficientdet_keras.data.synthetic import write_synthetic_dataset
    return write_synthetic_dataset(os.path.join(FLAGS.data_dir, "shapes-640x480"), **RESIZE_DATA)


def bench_resize(config) -> None:
    from efficientdet_keras.data.sources import TFRecordSource
    from efficientdet_keras.evaluation.tflite_evaluation import TFLiteEvaluation
    from efficientdet_keras.exporters.tflite import export_tflite
    from efficientdet_keras.inference.loading import load_model_and_config
    from efficientdet_keras.inference.tflite_runner import TFLiteRunner

    del config  # The trained model's own (model_dir/config.yaml, plus --hparams).
    datasets = {"demo 256x256": demo_validation_data(FLAGS.demo_dir),
                "shapes 640x480": resize_benchmark_data()}
    model, config = load_model_and_config(FLAGS.model_dir, "", FLAGS.model_name, FLAGS.hparams)
    path = export_tflite(model, os.path.join(scratch_dir("resize_"),
                                             "model.tflite"))
    print("%s from %s (trained with resize_mode %s), float32 .tflite, AP on 100 validation "
          "images of each set" % (config.name, FLAGS.model_dir, config.resize_mode))
    print("%-16s %-10s %7s %7s" % ("images", "resize", "AP", "AP50"))
    for name, data in datasets.items():
        for mode in ("letterbox", "stretch"):
            detector = TFLiteRunner(path, num_threads=FLAGS.tflite_threads,
                                    config_overrides={"resize_mode": mode})
            metrics = TFLiteEvaluation(detector, TFRecordSource(data.val_tfrecord), data.val_json,
                                       batch_size=FLAGS.batch_size, progress=False).run()[1]
            print("%-16s %-10s %7.4f %7.4f" % (name, mode, metrics["AP"], metrics["AP50"]))
    print("640x480 training data for a fine-tune: %s" % resize_benchmark_data().train_tfrecord)


def bench_pipeline(config) -> None:
    from efficientdet_keras.data.pipeline import InputPipeline
    from efficientdet_keras.data.sources import TFRecordSource

    data = pipeline_benchmark_data()
    print("%s, batch %d, %d-core machine; synthetic 640x480 JPEG TFRecords"
          % (config.name, FLAGS.batch_size, os.cpu_count()))
    print("%-6s %18s %20s %8s" % ("size", "pipeline (img/s)", "train step (img/s)", "ratio"))
    for size in FLAGS.sizes:
        sized = config.copy()
        sized.override({"image_size": int(size), "batch_size": FLAGS.batch_size, "num_classes": 4})
        pipeline = InputPipeline(sized, TFRecordSource(data.train_tfrecord), is_training=True,
                                 seed=0)
        dataset = pipeline()
        produced = pipeline_images_per_second(dataset, max(10, FLAGS.repeats * 2))
        consumed = FLAGS.batch_size / train_step_seconds(sized, next(iter(dataset)))
        print("%-6s %18.1f %20.2f %8.1f" % (size, produced, consumed, produced / consumed))


def check_augment_options() -> None:
    """Raises ValueError naming --augment_options when it lists an unknown row."""
    unknown = [name for name in FLAGS.augment_options if name not in AUGMENT_OPTIONS]
    if unknown or not FLAGS.augment_options:
        raise ValueError("--augment_options: unknown option(s) %s; choose from %s"
                         % (", ".join(map(repr, unknown)) or "(none given)",
                            ", ".join(AUGMENT_OPTIONS)))


def median_images_per_second(dataset, batches: int, repeats: int) -> float:
    """Images/s of a dataset: the median over `repeats` runs of `batches` batches, read on from
    one iterator after a warm-up run (fills buffers, traces the maps)."""
    iterator = iter(dataset)
    seconds = median_seconds(lambda: [next(iterator) for _ in range(batches)], repeats)
    return batches * FLAGS.batch_size / seconds


def bench_augment(config) -> None:
    """Training pipeline images/s per augmentation option (--augment_options), against the
    images/s a train step of --model_name consumes at the same size and batch."""
    from efficientdet_keras.data.pipeline import InputPipeline
    from efficientdet_keras.data.sources import TFRecordSource

    source = TFRecordSource(pipeline_benchmark_data().train_tfrecord)
    batches = max(2, 32 // FLAGS.batch_size)  # About 32 images per timed run.

    def training_data(hparams):
        option_config = config.copy()
        option_config.override({"image_size": FLAGS.image_size, "batch_size": FLAGS.batch_size,
                                "num_classes": 4})
        option_config.override(hparams)
        return option_config, InputPipeline(option_config, source, is_training=True, seed=0)()

    produced = {name: median_images_per_second(training_data(AUGMENT_OPTIONS[name])[1], batches,
                                               FLAGS.repeats)
                for name in FLAGS.augment_options}
    consumed = None
    if FLAGS.train_step:
        step_config, dataset = training_data("")
        consumed = FLAGS.batch_size / train_step_seconds(step_config, next(iter(dataset)))
    print("%s at %dx%d, batch %d, %d-core machine; %d synthetic 640x480 JPEGs (TFRecords); "
          "pipeline: median of %d runs of %d images, measured on its own"
          % (config.name, FLAGS.image_size, FLAGS.image_size, FLAGS.batch_size, os.cpu_count(),
             FLAGS.pipeline_images, FLAGS.repeats, batches * FLAGS.batch_size))
    print_augment_table(produced, consumed, config.name)


def print_augment_table(produced, consumed, model_name: str) -> None:
    """A Markdown table: a row per option of `produced` ({option: pipeline images/s}), with
    the train step's images/s (`consumed`) and the ratio unless consumed is None."""
    columns = ["option", "--hparams", "pipeline"]
    if consumed is not None:
        columns += ["%s train step" % model_name, "ratio"]
    print("| %s |\n|%s" % (" | ".join(columns), "---|" * len(columns)))
    for name, images_per_second in produced.items():
        cells = [name, AUGMENT_OPTIONS[name] or "(flip and scale jitter)",
                 "%.1f img/s" % images_per_second]
        if consumed is not None:
            cells += ["%.2f img/s" % consumed, "%.1fx" % (images_per_second / consumed)]
        print("| %s |" % " | ".join(cells))


def bench_eval(config) -> None:
    from efficientdet_keras import EfficientDetNet
    from efficientdet_keras.data.pipeline import InputPipeline
    from efficientdet_keras.data.sources import TFRecordSource
    from efficientdet_keras.data.synthetic import write_synthetic_dataset
    from efficientdet_keras.evaluation import COCOEvaluator, faster_coco_eval_available
    from efficientdet_keras.evaluation.runner import evaluate_dataset, make_detect_fns

    data = write_synthetic_dataset(os.path.join(FLAGS.data_dir, "eval"), num_train=1,
                                   num_val=FLAGS.eval_images, image_size=(480, 640), seed=1)
    config = config.copy()
    config.override({"image_size": FLAGS.image_size, "num_classes": 4,
                     "label_map": data.label_map})
    model = EfficientDetNet(config=config)
    pipeline = InputPipeline(config, TFRecordSource(data.val_tfrecord), is_training=False,
                             batch_size=FLAGS.batch_size)
    evaluator = COCOEvaluator(data.val_json, backend="pycocotools")
    # A short warm-up traces the network and NMS functions outside the timed run.
    detect_fns = make_detect_fns(model, config)
    evaluate_dataset(model, pipeline(), config, evaluator, max_images=FLAGS.batch_size,
                     progress=False, detect_fns=detect_fns)
    metrics, timing = evaluate_dataset(model, pipeline(), config, evaluator, progress=False,
                                       detect_fns=detect_fns)
    detections = len(evaluator.detection_results())
    scoring = {"pycocotools": median_seconds(evaluator.result, 3)}
    if faster_coco_eval_available():
        evaluator.backend = "faster_coco_eval"
        scoring["faster_coco_eval"] = median_seconds(evaluator.result, 3)
    print("%s at %dx%d, batch %d: %d synthetic images, %d detections (untrained weights: "
          "every image keeps %d)" % (config.name, FLAGS.image_size, FLAGS.image_size,
                                     FLAGS.batch_size, timing.images, detections,
                                     config.nms_configs.max_output_size))
    print("%-42s %8.2f s" % ("network forward", timing.network))
    print("%-42s %8.2f s" % ("post-processing (decode, top-k, NMS)", timing.postprocess))
    for backend, seconds in scoring.items():
        print("%-42s %8.2f s" % ("scoring, %s (median of 3)" % backend, seconds))
    best = min(scoring.values())
    print("post-processing + fastest scoring = %.2f of the network time"
          % ((timing.postprocess + best) / timing.network))
    if len(scoring) == 2:
        print("faster-coco-eval / pycocotools time: %.2f"
              % (scoring["faster_coco_eval"] / scoring["pycocotools"]))


def bench_train(config) -> None:
    import tf_keras as keras

    from efficientdet_keras.data.synthetic import write_synthetic_dataset

    data = write_synthetic_dataset(os.path.join(FLAGS.data_dir, "train"), num_train=64,
                                   num_val=1, image_size=FLAGS.image_size, seed=2)
    steps = max(6, FLAGS.repeats)
    print("%s at %dx%d, batch %d, EfficientDetNetTrain.fit, %d steps per run"
          % (config.name, FLAGS.image_size, FLAGS.image_size, FLAGS.batch_size, steps))
    print("%-8s %22s %22s" % ("XLA", "time to first step", "images/s (median)"))
    for use_xla in (False, True):
        run_config = config.copy()
        run_config.override({"image_size": FLAGS.image_size, "batch_size": FLAGS.batch_size,
                             "num_classes": 4, "jit_compile": use_xla})
        run = training_run(run_config, data, steps_per_epoch=steps)
        first_step, ends = timed_fit(run, one_cached_batch(run), steps)
        step_times = step_seconds(ends, warmup_steps=2)
        print("%-8s %20.1f s %22.2f" % ("on" if use_xla else "off", first_step,
                                       FLAGS.batch_size / statistics.median(step_times)))
        keras.backend.clear_session()


# bench_callbacks' rows: what each fit round runs with besides the step-end recorder.
CALLBACK_SETTINGS = {
    "no callbacks": dict(verbose=0),
    "run callbacks": dict(verbose=0, run_callbacks=True),
    "run + bar, terminal": dict(verbose=1, run_callbacks=True, output="terminal"),
    "run + bar, file": dict(verbose=1, run_callbacks=True, output="file"),
    "run + epoch lines, file": dict(verbose=2, run_callbacks=True, output="file"),
}
# bench_callbacks' backup row: the run callbacks backing up every this many steps.
BENCH_BACKUP_STEPS = 10


class TrainCallTimes:
    """Within the block, when each of the model's train_function calls started and ended: the
    time between one call's end and the next one's start is the host's work for a step
    (callbacks, Keras' loop), which a device that runs the step asynchronously waits for."""

    def __init__(self, model):
        self.model = model
        self.calls = []

    def __enter__(self):
        self._original = self.model.train_function

        def timed(iterator):
            start = time.perf_counter()
            outputs = self._original(iterator)
            self.calls.append((start, time.perf_counter()))
            return outputs

        self.model.train_function = timed
        return self

    def __exit__(self, *exc_info):
        self.model.train_function = self._original

    def host_seconds(self):
        """The host's seconds after each call but the last, until the next call."""
        return [after[0] - before[1] for before, after in zip(self.calls, self.calls[1:])]


def fit_output(output: str):
    """A context in which fit's progress output goes to a pseudo-terminal ("terminal", read and
    dropped by a thread) or to os.devnull ("file"); as it is otherwise."""
    import contextlib
    import pty
    import threading

    if output is None:
        return contextlib.nullcontext()
    if output == "file":
        return contextlib.redirect_stdout(open(os.devnull, "w"))
    reader, writer = pty.openpty()

    def drain():
        while True:
            try:
                if not os.read(reader, 65536):
                    return
            except OSError:  # The terminal was closed.
                return

    threading.Thread(target=drain, daemon=True).start()
    terminal = os.fdopen(writer, "w")

    @contextlib.contextmanager
    def to_terminal():
        with terminal, contextlib.redirect_stdout(terminal):
            yield
        os.close(reader)

    return to_terminal()


def bench_callbacks(config) -> None:
    """The per-step time the run's callbacks and fit's progress output (a bar, verbose=1, on
    a terminal or into a file; a line per epoch, verbose=2) add to fit, and the time a step
    backup takes from the steps: one trained model, fit rounds of each setting in turn, each
    with the same step-end recorder, medians over the rounds. "host ms" is the time between
    train_function calls."""
    from efficientdet_keras.data.synthetic import write_synthetic_dataset

    data = write_synthetic_dataset(os.path.join(FLAGS.data_dir, "callbacks"), num_train=8,
                                   num_val=1, image_size=FLAGS.image_size, seed=2)
    config = config.copy()
    config.override({"image_size": FLAGS.image_size, "batch_size": FLAGS.batch_size,
                     "num_classes": 4})
    steps, warmup = 40, 3
    run = training_run(config, data, steps_per_epoch=steps + warmup)
    dataset = one_cached_batch(run)
    model = run.build_model()
    model.fit(dataset, epochs=1, steps_per_epoch=warmup, verbose=0)  # Traces the step.
    print("%s at %dx%d, batch %d: median ms per step over %d steps, %d rounds alternating"
          % (config.name, FLAGS.image_size, FLAGS.image_size, FLAGS.batch_size, steps,
             FLAGS.repeats))
    backup_config = config.copy()
    backup_config.override({"backup_steps": BENCH_BACKUP_STEPS})
    rows = {name: ([], []) for name in CALLBACK_SETTINGS}
    backup_costs = []
    for _ in range(FLAGS.repeats):
        for name, setting in CALLBACK_SETTINGS.items():
            ends, host = fit_round(model, dataset, steps + warmup, setting.get("verbose", 0),
                                   config if setting.get("run_callbacks") else None,
                                   setting.get("output"))
            rows[name][0].append(statistics.median(step_seconds(ends, warmup)))
            rows[name][1].append(statistics.median(host[warmup:]))
        ends, _ = fit_round(model, dataset, steps + warmup, 0, backup_config, None)
        backup_costs.append(backup_seconds(step_seconds(ends, warmup), warmup))
    print("%-24s %10s %10s" % ("", "step ms", "host ms"))
    for name, (step_times, host_times) in rows.items():
        print("%-24s %10.2f %10.2f" % (name, statistics.median(step_times) * 1e3,
                                       statistics.median(host_times) * 1e3))
    differences = [(b - a) * 1e3 for a, b in zip(rows["no callbacks"][1],
                                                rows["run callbacks"][1])]
    print("%-24s %+10.2f ms host per step (rounds: %+.2f to %+.2f)"
          % ("overhead", statistics.median(differences), min(differences), max(differences)))
    print("%-24s %+10.1f ms per backup (rounds: %+.1f to %+.1f)"
          % ("backup every %d steps" % BENCH_BACKUP_STEPS,
             statistics.median(backup_costs) * 1e3, min(backup_costs) * 1e3,
             max(backup_costs) * 1e3))
    from benchmarks.results import record
    cells = [[name, round(statistics.median(steps_) * 1e3, 2),
              round(statistics.median(host) * 1e3, 2)] for name, (steps_, host) in rows.items()]
    cells.append(["run callbacks - no callbacks", "", round(statistics.median(differences), 2)])
    cells.append(["a backup every %d steps, per backup" % BENCH_BACKUP_STEPS,
                  round(statistics.median(backup_costs) * 1e3, 1), ""])
    record("callbacks_host", cells, speed.machine_line(), FLAGS.results_file,
           columns=["setting", "step ms", "host ms per step"])


def fit_round(model, dataset, steps: int, verbose: int, callbacks_config, output):
    """One fit of `steps` steps: (step end times, host seconds of each step). With
    `callbacks_config`, get_callbacks' list for it (in a new folder: nothing to resume)."""
    import tempfile

    from efficientdet_keras.training.callbacks import get_callbacks

    recorder = step_end_recorder(wait_for_device=False)  # Adds no sync of its own.
    with tempfile.TemporaryDirectory(prefix="efficientdet_callbacks_") as run_dir:
        callbacks = [recorder]
        if callbacks_config is not None:
            callbacks = get_callbacks(callbacks_config, run_dir,
                                      strategy=model.distribute_strategy) + callbacks
        with TrainCallTimes(model) as calls, fit_output(output):
            model.fit(dataset, epochs=1, steps_per_epoch=steps, callbacks=callbacks,
                      verbose=verbose)
    return recorder.ends, calls.host_seconds()


def backup_seconds(step_times, warmup: int) -> float:
    """The median time the step backups added: per backup, the steps it ended and the one
    after it (whose end waits for a write still in progress) less two ordinary steps."""
    backups = {step - warmup - 1 for step in range(BENCH_BACKUP_STEPS, warmup + len(step_times),
                                                   BENCH_BACKUP_STEPS) if step > warmup}
    others = [t for i, t in enumerate(step_times)
              if i not in backups and i - 1 not in backups]
    ordinary = statistics.median(others)
    return statistics.median(step_times[i] + step_times[i + 1] - 2 * ordinary
                             for i in sorted(backups) if i + 1 < len(step_times))


def bench_serve(config) -> None:
    import numpy as np
    import tensorflow as tf

    from efficientdet_keras import EfficientDetNet
    from efficientdet_keras.exporters.saved_model import export_detector

    config = config.copy()
    config.override({"image_size": FLAGS.image_size})
    export_dir = os.path.join(scratch_dir("serve_"), "saved_model")
    export_detector(EfficientDetNet(config=config), export_dir)
    detect = tf.saved_model.load(export_dir).signatures["image_bytes"]
    rng = np.random.default_rng(0)
    jpegs = [tf.io.encode_jpeg(rng.integers(0, 256, [480, 640, 3], dtype=np.uint8)).numpy()
             for _ in range(8)]
    repeats = max(20, FLAGS.repeats)
    print("%s SavedModel at %dx%d, 640x480 JPEG inputs, median of %d runs (after one warm-up)"
          % (config.name, FLAGS.image_size, FLAGS.image_size, repeats))
    for batch in (1, 8):
        images = tf.constant(jpegs[:batch])
        seconds = median_seconds(lambda: detect(images=images)["num_detections"].numpy(), repeats)
        print("batch %d: %8.1f ms per batch, %6.1f ms per image" % (batch, seconds * 1e3,
                                                                      seconds * 1e3 / batch))


def bench_export(config) -> None:
    from efficientdet_keras import EfficientDetNet
    from efficientdet_keras.exporters.saved_model import export_detector
    from efficientdet_keras.exporters.tflite import export_tflite

    config = config.copy()
    config.override({"image_size": FLAGS.image_size})
    model = EfficientDetNet(config=config)
    out_dir = scratch_dir("export_")
    exports = {"SavedModel": lambda: export_detector(model, os.path.join(out_dir, "saved")),
               "TFLite float32": lambda: export_tflite(model, os.path.join(out_dir, "m.tflite"))}
    print("%s at %dx%d: seconds per export, the first in the process and the median of %d more"
          % (config.name, FLAGS.image_size, FLAGS.image_size, FLAGS.repeats))
    for name, export in exports.items():
        start = time.perf_counter()
        export()
        first = time.perf_counter() - start
        median = median_seconds(export, FLAGS.repeats, warmup=0)
        print("%-15s first %6.1f s, then %6.1f s" % (name, first, median))


def directory_megabytes(path: str) -> float:
    """Size on disk of a file, or of all files under a folder, in MB (10^6 bytes)."""
    if os.path.isfile(path):
        return os.path.getsize(path) / 1e6
    return sum(os.path.getsize(os.path.join(root, name))
               for root, _, names in os.walk(path) for name in names) / 1e6


def bench_tflite(config) -> None:
    import tensorflow as tf

    from efficientdet_keras.exporters.saved_model import export_detector
    from efficientdet_keras.exporters.tflite import export_tflite
    from efficientdet_keras.inference.loading import load_model_and_config

    del config  # The trained model's own (model_dir/config.yaml, plus --hparams).
    data = demo_validation_data(FLAGS.model_dir)
    model, config = load_model_and_config(FLAGS.model_dir, "", FLAGS.model_name, FLAGS.hparams)
    out_dir = scratch_dir("tflite_")
    saved_model_dir = export_detector(model, os.path.join(out_dir, "saved_model"))
    # The raw float32 file runs the package's NMS (nms_configs), as the Keras row does: the
    # difference to the float32 row is then TFLite_Detection_PostProcess's own NMS.
    exports = {"TFLite float32": ("float32", "detections"),
               "TFLite float32 raw": ("float32", "raw"),
               "TFLite float16": ("float16", "detections"),
               "TFLite int8": ("int8", "detections")}
    paths = {name: export_tflite(model, os.path.join(out_dir, "%s-%s.tflite" % kind),
                                 quantization=kind[0], outputs=kind[1],
                                 representative_data=data.val_tfrecord)
             for name, kind in exports.items()}
    repeats = max(20, FLAGS.repeats)
    height, width = config.image_size
    serve = tf.saved_model.load(saved_model_dir).signatures["serving_default"]
    image = tf.zeros([1, height, width, 3], tf.uint8)
    rows = [("Keras fp32 / SavedModel", keras_metrics(model, config, data, FLAGS.batch_size),
             median_seconds(lambda: serve(images=image)["num_detections"].numpy(), repeats),
             directory_megabytes(saved_model_dir))]
    for name, path in paths.items():
        metrics, seconds = tflite_metrics_and_latency(path, data, repeats, FLAGS.batch_size,
                                                      FLAGS.tflite_threads)
        rows.append((name, metrics, seconds, directory_megabytes(path)))
    print("%s at %dx%d from %s; %d validation images; latency: batch 1, median of %d runs, "
          "%d-core CPU, TFLite with XNNPACK and %d threads"
          % (config.name, height, width, FLAGS.model_dir, data.num_val, repeats, os.cpu_count(),
             FLAGS.tflite_threads))
    print("%-24s %7s %7s %12s %10s" % ("model", "AP", "AP50", "latency ms", "size MB"))
    for name, metrics, seconds, megabytes in rows:
        print("%-24s %7.4f %7.4f %12.1f %10.1f" % (name, metrics["AP"], metrics["AP50"],
                                                    seconds * 1e3, megabytes))


# kills: the demo (D0 on synthetic shapes) at 128 px, 4 epochs of 6 steps, a backup every
# 3 steps and COCO evaluation every epoch; --hparams adds to (or overrides) these.
KILL_RUN_HPARAMS = ("image_size=128,batch_size=2,steps_per_epoch=6,num_epochs=4,backup_steps=3,"
                    "map_freq=1")


def kill_run_command(model_dir: str):
    """The efficientdet-train command the kills benchmark runs (and reruns) in model_dir."""
    hparams = KILL_RUN_HPARAMS + ("," + FLAGS.hparams if FLAGS.hparams else "")
    return [sys.executable, "-m", "efficientdet_keras.cli.train", "--demo", "--demo_images=8",
            "--model_name=%s" % FLAGS.model_name, "--model_dir=%s" % model_dir,
            "--hparams=%s" % hparams, "--tf_random_seed=1", "--verbosity=1"]


def finish_and_check(process, model_dir: str, total_steps: int) -> bool:
    """Waits for a run to end; whether it ended well with total_steps in its backup."""
    from efficientdet_keras.training.backup import latest_backup_step
    if process.wait(3600) != 0:
        print("the run in %s failed:\n%s" % (model_dir, process.output()))
        return False
    return latest_backup_step(model_dir) == total_steps


def bench_kills(config) -> None:
    import random

    from benchmarks.kill_harness import FINISHED_STEP, TrainProcess, phase_at_kill
    config = config.copy()
    config.override(KILL_RUN_HPARAMS)
    config.override(FLAGS.hparams)
    total_steps = config.steps_per_epoch * config.num_epochs
    rng = random.Random(FLAGS.kill_seed)
    signum = getattr(signal, FLAGS.kill_signal)
    runs_dir = scratch_dir("kills_")
    lost, phases, checked_runs, statuses, exit_seconds = [], [], [], [], []
    model_dir, pending = os.path.join(runs_dir, "run-1"), None  # pending: steps done at a kill.
    while True:
        process = TrainProcess(kill_run_command(model_dir))
        # No step: it failed, or a stop came after the run's last step and nothing is left.
        stepping = process.wait_for(FINISHED_STEP, 1800) is not None
        if pending is not None:
            lost.append(pending - process.resumed_step())
            pending = None
        if not stepping or len(lost) >= FLAGS.kills:
            checked_runs.append(finish_and_check(process, model_dir, total_steps))
            if not checked_runs[-1] or len(lost) >= FLAGS.kills:
                break
            model_dir = os.path.join(runs_dir, "run-%d" % (len(checked_runs) + 1))
            continue
        time.sleep(rng.uniform(0.0, FLAGS.kill_window))
        if not process.running():  # It finished first: check it, then a fresh run.
            checked_runs.append(finish_and_check(process, model_dir, total_steps))
            model_dir = os.path.join(runs_dir, "run-%d" % (len(checked_runs) + 1))
            continue
        phases.append(phase_at_kill(process, model_dir))
        sent = time.monotonic()
        process.stop(signum)
        statuses.append(process.wait(600))  # A SIGTERM or SIGINT first backs up its step.
        exit_seconds.append(time.monotonic() - sent)
        pending = process.finished_steps()
        print("%s %d: step %d (%s), exit status %d after %.1f s"
              % (FLAGS.kill_signal, len(phases), pending, phases[-1], statuses[-1],
                 exit_seconds[-1]), flush=True)
    print("%s, %d steps per run (backup_steps %d)"
          % (config.name, total_steps, config.backup_steps))
    print("%s: %d (%s)" % (FLAGS.kill_signal, len(lost), ", ".join(
        "%d during %s" % (phases.count(p), p) for p in sorted(set(phases)))))
    if lost:
        print("steps lost per stop: median %g, max %d (all: %s)"
              % (statistics.median(lost), max(lost), " ".join(map(str, lost))))
        counts = ", ".join("%d x%d" % (code, statuses.count(code))
                           for code in sorted(set(statuses)))
        print("exit statuses: %s; seconds from signal to exit: median %.1f, max %.1f"
              % (counts, statistics.median(exit_seconds), max(exit_seconds)))
    print("runs ended with the step count of an unstopped run (%d): %d of %d"
          % (total_steps, sum(checked_runs), len(checked_runs)))


def bench_short_runs(config) -> None:
    """D0 from scratch on the demo and the glyphs datasets; --hparams applies to both."""
    del config  # Each run has its own preset; --hparams is applied on top.
    from benchmarks.short_runs import bench_short_runs as run_all
    run_all(FLAGS.short_runs, os.path.join(FLAGS.data_dir, "short_runs"), FLAGS.hparams or None)


def bench_short_run_spread(config) -> None:
    """The short runs over seeds and a 1e-7 perturbation (benchmarks/short_run_spread.py)."""
    from benchmarks import short_run_spread as spread

    del config  # Each run has its own preset; --hparams is applied on top.
    perturbed = FLAGS.spread_perturbed_seed if FLAGS.spread_perturbed_seed >= 0 else None
    runs = spread.spread_runs(FLAGS.short_runs, [int(s) for s in FLAGS.spread_seeds], perturbed)
    results = spread.train_all(runs, os.path.join(FLAGS.data_dir, "short_runs"),
                               FLAGS.hparams or None, jobs=FLAGS.spread_jobs)
    print_and_record(FLAGS.spread_record, spread.SUMMARY_COLUMNS,
                     spread.summary_cells(spread.summarise(results)))
    print_and_record(FLAGS.spread_record + "_runs", spread.RUN_COLUMNS,
                     spread.run_cells(results))


def bench_learning_guard(config) -> None:
    """The learning guard's band over seeds, and runs that learn less beside it."""
    from benchmarks import learning_guard

    del config  # The guard's run is fixed: it is what the test trains.
    results = learning_guard.measure(lambda: scratch_dir("guard_"),
                                     [int(s) for s in FLAGS.spread_seeds])
    print_and_record("learning_guard", learning_guard.COLUMNS, learning_guard.cells(results))


def speed_settings() -> speed.SpeedSettings:
    """The speed table's settings, from the flags."""
    return speed.SpeedSettings(model_name=FLAGS.model_name, hparams=FLAGS.hparams,
                               repeats=FLAGS.repeats, data_dir=FLAGS.data_dir,
                               model_dir=FLAGS.model_dir, rows=tuple(FLAGS.speed_rows),
                               rounds=FLAGS.speed_rounds, scale=FLAGS.speed_scale)


def bench_speed(config) -> None:
    """The speed table (benchmarks/speed.py); each child builds its own config."""
    del config
    speed.bench_speed(speed_settings())


def bench_models(config) -> None:
    """The "Choose a model" figures (benchmarks/models.py); each model builds its own config."""
    del config
    models.bench_models(FLAGS.models, FLAGS.repeats, FLAGS.results_file)


def bench_formats(config) -> None:
    """The format table of --model_dir (benchmarks/formats.py), with the run's own config."""
    del config
    formats.bench_formats(FLAGS.model_dir, FLAGS.results_file, FLAGS.results_entry,
                          runs=max(10, FLAGS.repeats))


def bench_openvino_int8(config) -> None:
    """The int8 choices of the OpenVINO export, measured (benchmarks/formats.py)."""
    del config
    formats.bench_int8_choices(FLAGS.model_dir, FLAGS.results_file)


def bench_open_data(config):
    """Opening a COCO folder and describing it (benchmarks/data_reading.py)."""
    del config
    from benchmarks.data_reading import bench_open_data as run
    run(FLAGS.open_data_images, FLAGS.repeats)


def bench_class_rows(config) -> None:
    """Class rows by name against skipped and by-count heads (benchmarks/class_rows.py)."""
    del config  # Each model builds its own config; --hparams is applied on top.
    from benchmarks.class_rows import ClassRowsSettings, bench_class_rows as run, summary
    settings = ClassRowsSettings(overrides=FLAGS.hparams)
    print_and_record("class_rows", *summary(run(os.path.join(FLAGS.data_dir, "class_rows"),
                                                settings), settings))


def print_and_record(name: str, columns, cells) -> None:
    """Prints a table (its column headers and rows of cells) and records it as `name`."""
    from benchmarks.results import record
    print("| %s |\n|%s" % (" | ".join(columns), "---|" * len(columns)))
    for row in cells:
        print("| %s |" % " | ".join(str(cell) for cell in row))
    record(name, cells, speed.machine_line(), FLAGS.results_file, columns=columns)


def bench_host(config) -> None:
    """The host's cost of feeding an accelerator: the training pipeline's images per
    CPU-second beside the reference implementation's (benchmarks/host_feed.py), recorded in
    --results_file."""
    from benchmarks import host_feed

    del config  # Both sides read D0's defaults at --image_size.
    data = pipeline_benchmark_data()
    batches = max(10, 320 // FLAGS.batch_size)  # About 320 images per measurement.
    results = host_feed.side_by_side(data.train_tfrecord, FLAGS.image_size, FLAGS.batch_size,
                                     batches, FLAGS.host_rounds)
    if "reference" not in results:
        print("reference: skipped, its environment is not built (%s; see "
              "../shared/reference/automl/setup.sh)" % host_feed.REFERENCE_ENV)
    print("training input pipeline, D0 defaults (flip, scale jitter, anchor labels) at %dx%d, "
          "batch %d, %d synthetic 640x480 JPEGs; %d images per measurement, %d rounds "
          "alternating, medians" % (FLAGS.image_size, FLAGS.image_size, FLAGS.batch_size,
                                    FLAGS.pipeline_images, batches * FLAGS.batch_size,
                                    FLAGS.host_rounds))
    columns = ["pipeline", "images per CPU-second", "CPU ms per image", "images/s (2 cores)"]
    cells = []
    for side, rounds in results.items():
        medians = [statistics.median(r[key] for r in rounds) for key in
                   ("images_per_cpu_second", "cpu_ms_per_image", "images_per_second")]
        cells.append(["this package" if side == "package" else "reference (google/automl)"]
                     + [round(value, 1) for value in medians])
    if len(cells) == 2:
        ratio = cells[0][1] / cells[1][1]
        cells.append(["this package / reference", round(ratio, 2), "", ""])
    print_and_record("host_pipeline", columns, cells)


def bench_large_inputs(config) -> None:
    """Sliced detection against the whole-image pass, and video frames per second
    (benchmarks/large_inputs.py)."""
    del config  # The detector builds its own config; --hparams is applied on top.
    from benchmarks import large_inputs
    from benchmarks.class_rows import ClassRowsSettings, train_source
    source = train_source(os.path.join(FLAGS.data_dir, "class_rows"), ClassRowsSettings(
        source_steps=large_inputs.SOURCE_STEPS, overrides=FLAGS.hparams), seed=0)
    detector = os.path.join(source, "ckpt-1")  # Its config: the run's config.yaml.
    slicing = large_inputs.SlicingSettings(repeats=FLAGS.repeats)
    print_and_record("slicing", *large_inputs.slicing_summary(
        large_inputs.bench_slicing(detector, slicing), slicing))
    video = large_inputs.VideoSettings(repeats=FLAGS.repeats)
    print_and_record("video", *large_inputs.video_summary(
        large_inputs.bench_video(detector, scratch_dir("video_"), video), video))


def main(argv):
    del argv
    from efficientdet_keras import get_efficientdet_config
    try:
        config = get_efficientdet_config(FLAGS.model_name)
        config.override(FLAGS.hparams)
        if FLAGS.what == "postprocess":
            config.override({"image_size": FLAGS.image_size})
        if FLAGS.what == "augment":
            check_augment_options()
        if FLAGS.what == "speed":
            speed.check_speed_settings(speed_settings())
    except ValueError as e:
        sys.exit("%s: %s" % (PROGRAM, e))
    {"postprocess": bench_postprocess, "pipeline": bench_pipeline, "eval": bench_eval,
     "train": bench_train, "serve": bench_serve, "export": bench_export, "kills": bench_kills,
     "tflite": bench_tflite, "short_runs": bench_short_runs,
     "short_run_spread": bench_short_run_spread, "learning_guard": bench_learning_guard,
     "augment": bench_augment, "speed": bench_speed, "resize": bench_resize,
     "callbacks": bench_callbacks, "models": bench_models,
     "formats": bench_formats, "openvino_int8": bench_openvino_int8,
     "open_data": bench_open_data, "class_rows": bench_class_rows,
     "large_inputs": bench_large_inputs, "host": bench_host}[FLAGS.what](config)


def run():
    run_app(main, __name__)


if __name__ == "__main__":
    run()
