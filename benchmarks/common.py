"""What the benchmark programs share: timing, training runs to time, the demo run's data and
its AP.

TensorFlow is imported inside the functions, so a program's --help answers at once.
"""

import atexit
import json
import os
import shutil
import statistics
import tempfile
import time

# Where the benchmarks write their synthetic data (reused from one run to the next).
DATA_DIR = "/tmp/efficientdet_bench_data"
# TFLite interpreter threads of the AP and latency figures (bench.py --tflite_threads).
TFLITE_THREADS = 2


_SCRATCH_ROOT = []  # The process's scratch folder, made at the first scratch_dir call.


def scratch_dir(prefix: str) -> str:
    """A new empty folder for a benchmark's exports and runs, removed with everything in it
    when the process exits: repeated benchmarks and the tests that run them leave no
    gigabytes behind in the temp folder."""
    if not _SCRATCH_ROOT:
        root = tempfile.mkdtemp(prefix="efficientdet_bench_scratch_")
        atexit.register(shutil.rmtree, root, ignore_errors=True)
        _SCRATCH_ROOT.append(root)
    return tempfile.mkdtemp(prefix=prefix, dir=_SCRATCH_ROOT[0])


def median_seconds(fn, repeats: int, warmup: int = 1) -> float:
    """Runs fn `warmup` times (tracing), then `repeats` times; returns the median time."""
    from efficientdet_keras.inference.detector import timed_runs
    return statistics.median(timed_runs(fn, repeats, warmup=warmup))


def step_end_recorder(wait_for_device: bool = True):
    """A Keras callback whose `ends` lists when each training batch ended (perf_counter)."""
    from efficientdet_keras.training.step_timing import StepEndTimes
    return StepEndTimes(wait_for_device)


def step_seconds(ends, warmup_steps: int):
    """Seconds of each step after the first `warmup_steps` (tracing, first oneDNN calls)."""
    from efficientdet_keras.training.step_timing import step_seconds as seconds
    return seconds(ends, warmup_steps)


def training_run(config, data, steps_per_epoch: int, seed: int = 0, validation: bool = False):
    """The library's TrainingRun of `config` on a synthetic dataset (`data`, as
    write_synthetic_dataset returns it), its validation split too when `validation`.

    Its folder is new and empty: nothing resumes, and the pieces a benchmark takes
    (build_model, train_pipeline, validation_data) write nothing there.
    """
    from efficientdet_keras.data.sources import TFRecordSource
    from efficientdet_keras.training.run import TrainingRun

    val_source = TFRecordSource(data.val_tfrecord) if validation else None
    return TrainingRun(config, scratch_dir("run_"),
                       TFRecordSource(data.train_tfrecord), val_source=val_source,
                       val_json=data.val_json if validation else None,
                       steps_per_epoch=steps_per_epoch, seed=seed)


def one_cached_batch(run):
    """The run's first training batch, repeated, read once: a benchmark then times the
    step, not the input."""
    dataset = run.train_pipeline()().take(1).cache().repeat()
    next(iter(dataset))
    return dataset


def timed_fit(run, dataset, steps: int):
    """Builds the run's compiled trainer and fits `steps` steps of `dataset`.

    Returns:
      (seconds from building the model to the end of the first step, the end time of
      each step).
    """
    start = time.perf_counter()
    model = run.build_model()
    recorder = step_end_recorder()
    model.fit(dataset, epochs=1, steps_per_epoch=steps, callbacks=[recorder], verbose=0)
    return recorder.ends[0] - start, recorder.ends


def has_demo_run(model_dir: str) -> bool:
    """Whether model_dir holds the synthetic dataset of a `--demo` training run."""
    from efficientdet_keras.data.synthetic import MANIFEST_NAME
    return os.path.exists(os.path.join(model_dir, "synthetic", MANIFEST_NAME))


def demo_validation_data(model_dir: str):
    """The synthetic dataset a `--demo` run wrote to model_dir/synthetic (reused, not rewritten)."""
    from efficientdet_keras.data.synthetic import MANIFEST_NAME, write_synthetic_dataset
    root = os.path.join(model_dir, "synthetic")
    manifest_path = os.path.join(root, MANIFEST_NAME)
    if not os.path.exists(manifest_path):
        raise FileNotFoundError("%s is missing: --model_dir must be a demo run (efficientdet-train "
                                "--demo, or make demo)" % manifest_path)
    with open(manifest_path) as f:
        manifest = json.load(f)
    return write_synthetic_dataset(root, manifest["num_train"], manifest["num_val"],
                                   (manifest["height"], manifest["width"]), manifest["seed"],
                                   num_shards=manifest["num_shards"])


def keras_metrics(model, config, data, batch_size: int):
    """COCO metrics of a Keras model on a synthetic dataset's validation split."""
    from efficientdet_keras.data.pipeline import InputPipeline
    from efficientdet_keras.data.sources import TFRecordSource
    from efficientdet_keras.evaluation import COCOEvaluator
    from efficientdet_keras.evaluation.runner import evaluate_dataset
    pipeline = InputPipeline(config, TFRecordSource(data.val_tfrecord), is_training=False,
                             batch_size=batch_size)
    evaluator = COCOEvaluator(data.val_json, label_map=data.label_map)
    return evaluate_dataset(model, pipeline(), config, evaluator, progress=False)[0]


def tflite_metrics_and_latency(path: str, data, repeats: int, batch_size: int,
                               num_threads: int = TFLITE_THREADS):
    """(COCO metrics of a .tflite file on the validation split, median seconds of one
    interpreter run on one image)."""
    from efficientdet_keras.data.sources import TFRecordSource
    from efficientdet_keras.data.pixels import pipeline_images_to_uint8
    from efficientdet_keras.evaluation.tflite_evaluation import TFLiteEvaluation
    from efficientdet_keras.inference.tflite_runner import TFLiteRunner
    detector = TFLiteRunner(path, num_threads=num_threads)
    evaluation = TFLiteEvaluation(detector, TFRecordSource(data.val_tfrecord), data.val_json,
                                  batch_size=batch_size, progress=False)
    metrics = evaluation.run()[1]
    first_images = next(iter(evaluation.pipeline()))[0]
    letterboxed = pipeline_images_to_uint8(first_images[:1], detector.config)
    return metrics, median_seconds(lambda: detector.run(letterboxed), repeats)
