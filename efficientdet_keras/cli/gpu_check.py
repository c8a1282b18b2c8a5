"""efficientdet-gpu-check: does each training setting work on this machine's GPUs, how fast, and
do its CPUs make the training images as fast?

  efficientdet-gpu-check
  efficientdet-gpu-check --settings="float32,mixed_float16 XLA" --batch_size=16
  efficientdet-gpu-check --image_size=64 --batch_size=2 --steps=2 --settings=float32 \\
      --hparams=fpn_num_filters=16,fpn_cell_repeats=1,box_class_repeats=1

For each training setting (float32, mixed_float16, mixed_bfloat16, each with and without XLA;
the same under MirroredStrategy over all local GPUs; gradient checkpointing; the TF-Hub
fine-tuning trainer) it builds the model on the built-in synthetic images, fits two untimed
steps (tracing, XLA compilation) and --steps timed ones, each setting in a process of its own
(a crash, an out-of-memory error or a hung compile costs one row; --timeout stops a row), and
prints a table: the median step time, images/s, the peak device memory and whether the
setting works (or the first line of its error). Mirrored rows need at least 2 GPUs; without a
GPU the one-device rows run on the CPU. A last row, the host input pipeline, times the
training input pipeline alone on this machine's CPUs (at the same size and batch, on
photo-sized synthetic JPEGs), and a line under the table says at which settings it is slower
than the step: there the host, not the GPU, sets the pace. The one-device throughput measured
is then printed beside the training throughput NVIDIA publishes for its own EfficientDet-D0
(TensorFlow 2) at 512 px.
"""

import json
import shutil
import sys
import tempfile
import textwrap

from absl import flags

from efficientdet_keras.cli.common import HPARAMS_HELP, run_app, run_or_exit
from efficientdet_keras.training.device_settings import SETTINGS

TOOL = "efficientdet-gpu-check"
LINE_WIDTH = 100  # The notes above the table are wrapped; the table's rows are not.
FLAGS = flags.FLAGS
flags.DEFINE_string("model_name", "efficientdet-d0", "The model every row trains: "
                    "efficientdet-d0 ... d7x or efficientdet-lite0 ... lite4.")
flags.DEFINE_integer("image_size", 512, "Input size in pixels (square).", lower_bound=64)
flags.DEFINE_integer("batch_size", 8, "Images per device: a one-device row trains this batch, "
                     "a mirrored row this many per GPU. The default is meant to fit D0 at 512 "
                     "px on a 16 GB GPU; an out-of-memory row says so.", lower_bound=1)
flags.DEFINE_integer("steps", 5, "Timed training steps per row, after 2 untimed ones; the "
                     "table gives their median.", lower_bound=1)
flags.DEFINE_list("settings", [], "The settings to run, a comma list of their names (default: "
                  "all): %s." % ", ".join(setting.name for setting in SETTINGS))
flags.DEFINE_string("hparams", "", HPARAMS_HELP)
flags.DEFINE_integer("timeout", 1800, "Seconds a row may take (model build, XLA compilation "
                     "and steps) before its process is stopped and the row reads 'timed out'.",
                     lower_bound=1)
flags.DEFINE_string("data_dir", "", "Where the synthetic images (and the exported TF-Hub "
                    "module) are written, once for all rows (default: a temporary folder, "
                    "removed at the end).")
flags.DEFINE_string("hub_module", "", "The TF-Hub feature module the hub-trainer rows "
                    "fine-tune: a path or URL (default: one exported from a freshly built "
                    "--model_name, so nothing is downloaded).")
flags.DEFINE_string("measure", "", "Run the one setting of this name (or the 'host input "
                    "pipeline' row) in this process and print its result as a JSON line: what "
                    "each row's own process does.")


def child_argv(setting_name: str, options, data_dir: str, hub_module: str):
    """The command line of one row's process: this tool with --measure and the same flags."""
    return [sys.executable, "-m", "efficientdet_keras.cli.gpu_check",
            "--measure=%s" % setting_name, "--model_name=%s" % options.model_name,
            "--image_size=%d" % options.image_size, "--batch_size=%d" % options.batch_size,
            "--steps=%d" % options.steps, "--hparams=%s" % options.hparams,
            "--data_dir=%s" % data_dir, "--hub_module=%s" % hub_module]


def measure(setting_name: str, options, data_dir: str, hub_module: str):
    """--measure: one row, its result as one JSON line."""
    from efficientdet_keras.workflows import gpu_check
    is_host = setting_name == gpu_check.HOST_ROW
    if not is_host:
        gpu_check.setting_named(setting_name)  # An unknown name is a flag error, not a row.
    folder = data_dir or tempfile.mkdtemp(prefix="efficientdet_gpu_check_")
    try:
        result = (gpu_check.measure_host_row(options, folder) if is_host else
                  gpu_check.measure_row(setting_name, options, folder, hub_module))
    finally:
        if not data_dir:
            shutil.rmtree(folder, ignore_errors=True)
    print(json.dumps(result), flush=True)
    if not result["works"]:
        sys.exit(1)


def check(setting_names, options, timeout: float, data_dir: str, hub_module: str):
    """Every selected row, a progress line as each ends, then the table and the published
    figures."""
    from efficientdet_keras.workflows import gpu_check, gpu_check_table
    settings = gpu_check.selected_settings(setting_names)
    gpu_check.check_options(options)
    names = gpu_check.gpu_names()
    gpus = len(names)
    memory_heading = gpu_check_table.memory_label(gpus)
    host_height, host_width = gpu_check.HOST_IMAGE_SHAPE
    print(textwrap.fill("%d GPU(s) found: %s." % (gpus, ", ".join(names)) if gpus
                        else gpu_check.cpu_note(settings), width=LINE_WIDTH))
    print(textwrap.fill("%s at %d px, batch %d per device, %d untimed + %d timed steps per "
                        "setting, each setting in its own process%s; then the %s alone, on "
                        "%d synthetic %dx%d JPEGs." % (
                            options.model_name, options.image_size, options.batch_size,
                            gpu_check.WARMUP_STEPS, options.steps,
                            "; hparams %s" % options.hparams if options.hparams else "",
                            gpu_check.HOST_ROW, gpu_check.HOST_IMAGES, host_width,
                            host_height), width=LINE_WIDTH), flush=True)
    folder = data_dir or tempfile.mkdtemp(prefix="efficientdet_gpu_check_")
    try:
        rows = gpu_check.run_check(
            settings, gpus, lambda name: child_argv(name, options, folder, hub_module), timeout,
            on_row=lambda index, count, row: print(gpu_check_table.progress_line(
                index, count, row, memory_heading), flush=True))
    finally:
        if not data_dir:
            shutil.rmtree(folder, ignore_errors=True)
    print()
    print(gpu_check_table.format_table(rows, memory_heading))
    print()
    verdict = gpu_check_table.host_verdict(rows)
    if verdict:
        print(verdict)
        print()
    print(gpu_check_table.throughput_comparison(rows, options, gpus))
    failed = [row.setting for row in rows
              if row.status in (gpu_check.FAILED, gpu_check.TIMED_OUT)]
    if failed:
        sys.exit("%s: %d setting(s) did not work: %s" % (TOOL, len(failed), ", ".join(failed)))


def main(argv):
    del argv
    from efficientdet_keras.workflows.gpu_check import CheckOptions
    options = CheckOptions(model_name=FLAGS.model_name, image_size=FLAGS.image_size,
                           batch_size=FLAGS.batch_size, steps=FLAGS.steps, hparams=FLAGS.hparams)
    if FLAGS.measure:
        run_or_exit(TOOL, measure, FLAGS.measure, options, FLAGS.data_dir, FLAGS.hub_module)
    else:
        run_or_exit(TOOL, check, FLAGS.settings, options, FLAGS.timeout, FLAGS.data_dir,
                    FLAGS.hub_module)


def run():
    run_app(main, __name__)


if __name__ == "__main__":
    run()
