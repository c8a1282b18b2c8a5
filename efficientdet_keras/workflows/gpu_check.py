"""gpu_check: the GPU self-check behind `efficientdet-gpu-check`: each training setting of
`device_settings.SETTINGS` that the machine supports, trained for a few steps, in one table.

    options = CheckOptions(model_name="efficientdet-d0", image_size=512, batch_size=8)
    gpus = count_gpus()
    rows = plan_rows(selected_settings([]), gpus)       # [(setting, reason it is skipped)]
    results = [run_row(setting, child_argv(setting.name), timeout=1800)
               for setting, skipped in rows if not skipped]
    results.append(run_host_row(child_argv(HOST_ROW), timeout=1800))
    print(format_table(results, memory_label(gpus)))      # gpu_check_table
    print(host_verdict(results))                          # gpu_check_table

Each row runs in a child process of its own (`measure_row`, behind the command's --measure):
a crash, an out-of-memory error or an XLA compile that never ends then costs one row (a
timeout stops it), and each row's peak memory is its own. The child builds the setting's
trainer through TrainingRun (the hub trainer on a feature module exported from a freshly
built model), reads one batch of the package's synthetic images through InputPipeline and
repeats it, so the step is timed and not the input; it fits WARMUP_STEPS untimed steps
(tracing, XLA compilation, autotuning) and then the timed ones, and prints one JSON line.
The parent only lists the GPUs, which creates no TensorFlow device: it holds no GPU memory
while the rows run.

The rows time the step alone; the host row (HOST_ROW, `measure_host_row`) times the other half
of training, the input pipeline on this host's CPUs, also alone and in a child of its own, so
that the table shows which of the two sets the pace.
"""

import dataclasses
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable, List, Optional, Sequence, Tuple

from efficientdet_keras.training.device_settings import (MIRRORED, SETTINGS, DeviceSetting,
                                                         setting_named)
from efficientdet_keras.utils.error_text import first_cause_line

# Steps fitted before the timed ones: the first traces (and XLA compiles) the step, the second
# still runs slower (autotuning, first kernel launches).
WARMUP_STEPS = 2
# Synthetic training images written per image size; the pipeline repeats them, and the
# timed steps repeat its first batch.
SYNTHETIC_IMAGES = 8
# A row's result column: the setting trained, failed, was not run, or was stopped.
WORKS, FAILED, SKIPPED, TIMED_OUT = "works", "failed", "skipped", "timed out"
# A row's text is cut here: an error's first line can hold a whole tensor shape list.
MAX_DETAIL_CHARS = 300
# The host row: the training input pipeline alone, on photo-sized synthetic JPEGs (decoding and
# resizing them is most of a real dataset's cost; the rows' images are already the input size).
HOST_ROW = "host input pipeline"
HOST_IMAGES, HOST_IMAGE_SHAPE = 64, (480, 640)


@dataclasses.dataclass(frozen=True)
class CheckOptions:
    """What every row trains: model_name with `hparams` (config overrides) at image_size px,
    batch_size images per device (a mirrored row's global batch is batch_size x GPUs),
    `steps` timed steps after WARMUP_STEPS untimed ones."""
    model_name: str = "efficientdet-d0"
    image_size: int = 512
    batch_size: int = 8
    steps: int = 5
    hparams: str = ""


@dataclasses.dataclass
class RowResult:
    """One row of the table.

    status: WORKS, FAILED, SKIPPED or TIMED_OUT; detail: the first line of the error, or why
    the row was skipped or stopped. step_s: median seconds of a timed step; images_per_s:
    the global batch over it; peak_memory_bytes: the GPUs' allocator peak (summed over a
    mirrored row's GPUs), or on a CPU the child's peak resident memory. seconds: the row's
    wall time, child start to end. The host row (setting HOST_ROW) has no step or memory:
    its images_per_s is what the input pipeline made.
    """
    setting: str
    status: str
    detail: str = ""
    step_s: Optional[float] = None
    images_per_s: Optional[float] = None
    peak_memory_bytes: Optional[int] = None
    seconds: Optional[float] = None

    @property
    def result_text(self) -> str:
        return "%s: %s" % (self.status, self.detail) if self.detail else self.status


# --- choosing the rows --------------------------------------------------------------------

def selected_settings(names: Sequence[str]) -> List[DeviceSetting]:
    """The settings named (in SETTINGS order, each once), or all of them when none is.

    Raises:
      ValueError naming an unknown setting and listing the known ones.
    """
    wanted = {setting_named(name.strip()).name for name in names if name.strip()}
    return [s for s in SETTINGS if not wanted or s.name in wanted]


def count_gpus() -> int:
    """The GPUs TensorFlow sees. Listing them creates no device, so this process takes no
    GPU memory from the rows' children."""
    return len(gpu_names())


def gpu_names() -> List[str]:
    """The model name of each GPU TensorFlow sees ("NVIDIA A100-SXM4-80GB"), or its device
    name when the driver gives none; read without creating a device."""
    import tensorflow as tf
    names = []
    for device in tf.config.list_physical_devices("GPU"):
        try:
            details = tf.config.experimental.get_device_details(device)
        except (ValueError, RuntimeError):
            details = {}
        names.append(details.get("device_name") or device.name)
    return names


def skip_reason(setting: DeviceSetting, gpus: int) -> str:
    """Why `setting` cannot run on a machine with `gpus` GPUs ("" when it can)."""
    if setting.replicas == MIRRORED and gpus < 2:
        return "needs 2 GPUs (found %d)" % gpus
    return ""


def plan_rows(settings: Sequence[DeviceSetting], gpus: int) -> List[Tuple[DeviceSetting, str]]:
    """[(setting, skip reason or "")] in table order."""
    return [(setting, skip_reason(setting, gpus)) for setting in settings]


def cpu_note(settings: Sequence[DeviceSetting]) -> str:
    """The line printed first on a machine without a GPU."""
    note = "no GPU found: running the CPU rows"
    if any(s.replicas == MIRRORED for s in settings):
        note += "; the mirrored rows need 2 GPUs"
    if any(s.precision == "mixed_float16" or s.uses_xla for s in settings):
        note += ("; mixed_float16 runs slowly on a CPU (no float16 arithmetic) and XLA "
                 "compiles for long")
    return note + ". These times say whether each setting trains here, not how fast a GPU is."


def row_config(setting: DeviceSetting, options: CheckOptions, replicas: int):
    """The config a row trains: the model, the options' hparams, size and global batch, then
    the setting's own overrides (they win: the row is the setting)."""
    from efficientdet_keras.config import get_efficientdet_config
    config = get_efficientdet_config(options.model_name)
    config.override(options.hparams)
    config.override({"image_size": options.image_size,
                     "batch_size": options.batch_size * replicas})
    return config.override(dict(setting.overrides))


def check_options(options: CheckOptions) -> None:
    """Stops options no row could train with (an unknown model or hparams key, a value out
    of range), before any child starts.

    Raises:
      ValueError: the config's one-line message.
    """
    from efficientdet_keras.config import validate_config
    validate_config(row_config(setting_named("float32"), options, replicas=1))


# --- the parent: one child per row ---------------------------------------------------------

def run_row(setting: DeviceSetting, child_argv: Sequence[str], timeout: float) -> RowResult:
    """Runs one row's child (`child_argv`, which ends in measure_row's JSON line) and reads
    its result; a child that crashes, prints no result or runs past `timeout` seconds (then
    stopped) is a row that did not work."""
    return run_child(setting.name, child_argv, timeout)


def run_host_row(child_argv: Sequence[str], timeout: float) -> RowResult:
    """Runs the host row's child (`child_argv`, which ends in measure_host_row's JSON line)
    with the GPUs hidden: the input pipeline runs on the CPUs, and the child then spends no
    time starting GPUs it would not use."""
    return run_child(HOST_ROW, child_argv, timeout, hide_gpus=True)


def run_child(name: str, child_argv: Sequence[str], timeout: float,
              hide_gpus: bool = False) -> RowResult:
    """The row `name` from its child's JSON line, or from how the child failed (run_row)."""
    start = time.perf_counter()
    try:
        done = subprocess.run(list(child_argv), capture_output=True, text=True,
                              timeout=timeout, env=child_environment(hide_gpus))
    except subprocess.TimeoutExpired:
        return RowResult(name, TIMED_OUT, "stopped after %g s (--timeout)" % timeout,
                         seconds=time.perf_counter() - start)
    seconds = time.perf_counter() - start
    result = last_json_line(done.stdout)
    if result is None:
        return RowResult(name, FAILED, crash_line(done.stderr, done.returncode),
                         seconds=seconds)
    return RowResult(name, WORKS if result.get("works") else FAILED,
                     detail=result.get("error", ""), step_s=result.get("step_s"),
                     images_per_s=result.get("images_per_s"),
                     peak_memory_bytes=result.get("peak_memory_bytes"), seconds=seconds)


def run_check(settings: Sequence[DeviceSetting], gpus: int,
              child_argv: Callable[[str], Sequence[str]], timeout: float,
              on_row: Callable[[int, int, RowResult], None] = lambda i, n, row: None
              ) -> List[RowResult]:
    """Every row of `settings`: skipped ones with their reason, the others each measured in
    its child (child_argv(setting name), whose command line carries the CheckOptions); then
    the host row, measured in its child (child_argv(HOST_ROW)). on_row(index, count, result)
    after each row."""
    results = []
    planned = plan_rows(settings, gpus)
    count = len(planned) + 1
    for index, (setting, reason) in enumerate(planned, 1):
        row = (RowResult(setting.name, SKIPPED, reason) if reason else
               run_row(setting, child_argv(setting.name), timeout))
        results.append(row)
        on_row(index, count, row)
    results.append(run_host_row(child_argv(HOST_ROW), timeout))
    on_row(count, count, results[-1])
    return results


def child_environment(hide_gpus: bool = False) -> dict:
    """The children import this copy of the package, also when it runs from a checkout that
    is not installed; hide_gpus: CUDA shows the child no GPU."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.environ.get("PYTHONPATH")
    environment = dict(os.environ, PYTHONPATH=root + (os.pathsep + path if path else ""))
    if hide_gpus:
        environment["CUDA_VISIBLE_DEVICES"] = "-1"
    return environment


def last_json_line(stdout: str) -> Optional[dict]:
    """The last line of `stdout` that is a JSON object, or None."""
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def crash_line(stderr: str, returncode: int) -> str:
    """What a child that printed no result died of: its last error line and exit status."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    status = ("killed by signal %d" % -returncode if returncode < 0
              else "exit status %d" % returncode)
    return ("%s (%s)" % (lines[-1], status) if lines else status)[:MAX_DETAIL_CHARS]


# --- the child: one row measured in this process --------------------------------------------

def measure_row(setting_name: str, options: CheckOptions, data_dir: str,
                hub_module: str = "") -> dict:
    """Trains one setting for WARMUP_STEPS + options.steps steps in this process.

    data_dir: where the synthetic images (and the exported feature module) are written, or
    reused when a row before wrote them. hub_module: the feature module the hub rows train
    on ("": one exported from a freshly built model into data_dir).

    Returns:
      {"setting", "works": True, "step_s", "images_per_s", "peak_memory_bytes",
      "replicas", "global_batch"}, or {"setting", "works": False, "error": the error's first
      line}: every failure is the row's result.
    """
    return _row_result(setting_name, lambda: _measure(setting_named(setting_name), options,
                                                      data_dir, hub_module))


def measure_host_row(options: CheckOptions, data_dir: str) -> dict:
    """The host row in this process: the images/s the training input pipeline of the options'
    config (size, per-device batch, hparams) makes on this host's CPUs, alone, from HOST_IMAGES
    synthetic JPEGs of HOST_IMAGE_SHAPE written into data_dir (or reused from there).

    The per-device batch serves every row: under MirroredStrategy one pipeline makes each
    replica's batch in turn, so its images/s is what the host gives all the GPUs together.

    Returns:
      {"setting": HOST_ROW, "works": True, "images_per_s", "batch_size"}, or {"setting",
      "works": False, "error": the error's first line}.
    """
    return _row_result(HOST_ROW, lambda: _measure_host(options, data_dir))


def _row_result(name: str, measure: Callable[[], dict]) -> dict:
    """measure()'s figures with works=True, or works=False and the error's first line."""
    try:
        result = dict(measure(), works=True)
    except Exception as e:  # noqa: BLE001 (whatever stops the row is what the row reports)
        result = {"works": False, "error": error_line(e)}
    return dict(result, setting=name)


def _measure_host(options: CheckOptions, data_dir: str) -> dict:
    from efficientdet_keras.config import validate_config
    from efficientdet_keras.data.sources import TFRecordSource
    from efficientdet_keras.data.synthetic import write_synthetic_dataset
    from efficientdet_keras.data.throughput import training_images_per_second
    config = validate_config(row_config(setting_named("float32"), options, replicas=1))
    data = write_synthetic_dataset(os.path.join(data_dir, "host-images"),
                                   num_train=HOST_IMAGES, num_val=0,
                                   image_size=HOST_IMAGE_SHAPE)
    source = TFRecordSource(data.train_tfrecord)
    return {"images_per_s": training_images_per_second(config, source, HOST_IMAGES),
            "batch_size": config.batch_size}


def _measure(setting: DeviceSetting, options: CheckOptions, data_dir: str,
             hub_module: str) -> dict:
    import tensorflow as tf
    from efficientdet_keras.config import validate_config
    from efficientdet_keras.data.sources import TFRecordSource
    from efficientdet_keras.data.synthetic import write_synthetic_dataset
    from efficientdet_keras.training.run import TrainingRun
    from efficientdet_keras.training.runtime import get_strategy
    from efficientdet_keras.training.step_timing import StepEndTimes, step_seconds

    gpus = count_gpus()
    strategy = get_strategy("gpus" if setting.replicas == MIRRORED else "")
    replicas = strategy.num_replicas_in_sync
    config = validate_config(row_config(setting, options, replicas))
    if setting.hub:
        config.hub_module_url = hub_module or exported_hub_module(options, data_dir)
        for index in range(gpus):  # The export's own peak is not the row's.
            tf.config.experimental.reset_memory_stats("GPU:%d" % index)
    data = write_synthetic_dataset(os.path.join(data_dir, "images-%d" % options.image_size),
                                   num_train=SYNTHETIC_IMAGES, num_val=0,
                                   image_size=options.image_size)
    executions = WARMUP_STEPS + options.steps
    with tempfile.TemporaryDirectory(prefix="efficientdet_gpu_check_") as model_dir:
        run = TrainingRun(config, model_dir, TFRecordSource(data.train_tfrecord),
                          strategy=strategy,
                          steps_per_epoch=executions * config.steps_per_execution)
        model = run.build_model()
        pipeline = run.train_pipeline()
        batches = strategy.distribute_datasets_from_function(
            lambda context: pipeline(context).take(1).cache().repeat())
        recorder = StepEndTimes()
        history = model.fit(batches, epochs=1, steps_per_epoch=run.steps_per_epoch,
                            callbacks=[recorder], verbose=0)
    # A random start trains without NaN; a non-finite step here points at the setting (the
    # NaN guard left it out of the loss mean, which alone would look healthy).
    logs = {name: values[-1] for name, values in history.history.items()}
    nonfinite = int(logs.get("nonfinite_steps", 0))
    if nonfinite or not math.isfinite(logs["loss"]):
        raise FloatingPointError("%d of %d steps had a NaN or inf loss or gradient norm (mean "
                                 "loss %s)" % (nonfinite, run.steps_per_epoch, logs["loss"]))
    # One batch-end call per steps_per_execution steps.
    step_s = statistics.median(step_seconds(recorder.ends, WARMUP_STEPS)) / \
        config.steps_per_execution
    return {"step_s": step_s, "images_per_s": config.batch_size / step_s,
            "peak_memory_bytes": peak_memory_bytes(gpus, replicas),
            "replicas": replicas, "global_batch": config.batch_size}


def exported_hub_module(options: CheckOptions, data_dir: str) -> str:
    """A TF-Hub feature module of a freshly built float32 model of the options, exported
    into data_dir once and reused by the later hub rows (export_feature_module publishes a
    complete folder only)."""
    path = os.path.join(data_dir, "hub_module")
    if not os.path.isdir(path):
        from efficientdet_keras.exporters.hub_module import export_feature_module
        from efficientdet_keras.model import EfficientDetNet
        model = EfficientDetNet(config=row_config(setting_named("float32"), options, 1))
        model.build_variables()
        export_feature_module(model, path)
    return path


def peak_memory_bytes(gpus: int, replicas: int) -> int:
    """The allocator's peak on the GPUs a row used (GPU:0 .. replicas - 1), or without a
    GPU this process's peak resident memory (Linux reports KiB)."""
    if gpus:
        import tensorflow as tf
        return sum(tf.config.experimental.get_memory_info("GPU:%d" % index)["peak"]
                   for index in range(replicas))
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def error_line(error: BaseException) -> str:
    """"ErrorType: the first line of its message that says what went wrong" (TensorFlow's
    messages start with where the op ran: "Graph execution error:", "Detected at node")."""
    tf = sys.modules.get("tensorflow")  # Loaded when the error can be one of its own.
    message = error.message if tf is not None and isinstance(error, tf.errors.OpError) \
        else str(error)
    line = first_cause_line(message.splitlines())
    if line is None:
        return type(error).__name__
    return ("%s: %s" % (type(error).__name__, line))[:MAX_DETAIL_CHARS]
