"""The GPU self-check's report: the table of its rows, a progress line per row, whether the
host's input pipeline keeps up with the steps, and the one-device throughput beside the figures
NVIDIA publishes for its own EfficientDet-D0.
"""

import dataclasses
import textwrap
from typing import List, Sequence

from efficientdet_keras.training.device_settings import MIRRORED, DeviceSetting, setting_named
from efficientdet_keras.workflows.gpu_check import HOST_ROW, WORKS, CheckOptions, RowResult


def memory_label(gpus: int) -> str:
    """The memory column's heading: what it measures on this machine."""
    return "peak GPU memory" if gpus else "peak RSS (CPU)"


def format_table(rows: Sequence[RowResult], memory_heading: str) -> str:
    """The rows as an aligned text table: setting, median step, images/s, peak memory, then
    the result (works, or the error's first line, or why the row was skipped) last, so a
    long line does not push the figures out of their columns."""
    header = ["setting", "step (median)", "images/s", memory_heading, "result"]
    cells = [[row.setting,
              "-" if row.step_s is None else "%.3f s" % row.step_s,
              "-" if row.images_per_s is None else format_rate(row.images_per_s),
              "-" if row.peak_memory_bytes is None else
              "{:,.0f} MB".format(row.peak_memory_bytes / 1e6),
              row.result_text] for row in rows]
    widths = [max(len(line[i]) for line in [header] + cells) for i in range(len(header) - 1)]

    def line(values):
        name, *figures, result = values
        return "  ".join([name.ljust(widths[0])] + [value.rjust(width) for value, width
                                                    in zip(figures, widths[1:])] + [result])
    return "\n".join(line(values) for values in [header] + cells)


def format_rate(images_per_s: float) -> str:
    """Images/s with one decimal, or three below 1 (a CPU running an XLA float16 step)."""
    return "%.1f" % images_per_s if images_per_s >= 1 else "%.3f" % images_per_s


def progress_line(index: int, count: int, row: RowResult, memory_heading: str) -> str:
    """What is printed as each row ends: "[2/5] mixed_float16: works, 0.112 s/step, ..."."""
    parts = [row.result_text]
    if row.step_s is not None:
        parts.append("%.3f s/step" % row.step_s)
    if row.images_per_s is not None:
        parts.append("%s images/s" % format_rate(row.images_per_s))
    if row.peak_memory_bytes is not None:
        parts.append("%s {:,.0f} MB".format(row.peak_memory_bytes / 1e6) % memory_heading)
    text = "[%d/%d] %s: %s" % (index, count, row.setting, ", ".join(parts))
    return text if row.seconds is None else "%s (%.0f s)" % (text, row.seconds)


# --- the host -----------------------------------------------------------------------------

# What feeds the steps faster, in the train command's terms.
HOST_REMEDIES = ("more CPU cores, `cache` (`--cache=ram`: decoded images kept after the first "
                 "epoch), or tf.data service (`--data_service`)")


def host_verdict(rows: Sequence[RowResult]) -> str:
    """Whether the host row's input pipeline makes images faster than each working row's step
    takes them: the settings whose step it is slower than, with what helps, or that it keeps
    ahead of all ("" without a working host row and a working step)."""
    host = next((row for row in rows if row.setting == HOST_ROW and row.status == WORKS), None)
    steps = [row for row in step_rows(rows) if row.status == WORKS]
    if host is None or not steps:
        return ""
    rate = format_rate(host.images_per_s)
    faster = [row for row in steps if row.images_per_s > host.images_per_s]
    if not faster:
        return "the host's input pipeline (%s images/s) keeps ahead of every step measured." % rate
    settings = ", ".join("%s (%s images/s)" % (row.setting, format_rate(row.images_per_s))
                         for row in faster)
    return textwrap.fill("the host's input pipeline (%s images/s) is slower than the step at %s: "
                         "%s." % (rate, settings, HOST_REMEDIES), width=100)


def step_rows(rows: Sequence[RowResult]) -> List[RowResult]:
    """The rows of training settings: all but the host row."""
    return [row for row in rows if row.setting != HOST_ROW]


# --- the published figures ----------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class PublishedThroughput:
    gpu: str
    precision: str
    batch_per_gpu: int
    images_per_s: float


# EfficientDet-D0 training at 512 px on one GPU, averaged over a training epoch of COCO
# (their input pipeline included), from the README's "Training performance results".
PUBLISHED_SOURCE = ("NVIDIA DeepLearningExamples, TensorFlow2/Detection/Efficientdet/README.md, "
                    "22.03-tf2 container")
PUBLISHED_THROUGHPUT = (
    PublishedThroughput("1x A100 80GB", "mixed precision (AMP)", 200, 397),
    PublishedThroughput("1x A100 80GB", "TF32", 104, 162),
    PublishedThroughput("1x V100 32GB", "mixed precision (AMP)", 64, 232),
    PublishedThroughput("1x V100 32GB", "FP32", 40, 113),
)
PUBLISHED_MODEL, PUBLISHED_SIZE = "efficientdet-d0", 512


def throughput_comparison(rows: Sequence[RowResult], options: CheckOptions, gpus: int) -> str:
    """The one-device training throughput measured here (the float32 row and the fastest
    mixed-precision row) beside PUBLISHED_THROUGHPUT, and how this measurement differs from
    theirs."""
    measured = []
    float32 = next((row for row in rows if row.setting == "float32"), None)
    if float32 is not None and float32.status == WORKS:
        measured.append((float32, ""))
    mixed = [row for row in step_rows(rows) if row.status == WORKS and
             _is_one_device_mixed(setting_named(row.setting))]
    if mixed:
        measured.append((max(mixed, key=lambda row: row.images_per_s),
                         " (the fastest mixed-precision row)"))
    lines = ["Training throughput on one device, beside published figures:",
             "  measured here, %s at %d px, batch %d, on %s:" % (
                 options.model_name, options.image_size, options.batch_size,
                 "GPU:0" if gpus else "the CPU")]
    names = [row.setting for row, _ in measured]
    rates = [format_rate(row.images_per_s) for row, _ in measured]
    lines += ["    %s  %s images/s%s" % (name.ljust(max(map(len, names))),
                                        rate.rjust(max(map(len, rates))), note)
              for name, rate, (_, note) in zip(names, rates, measured)]
    if not measured:
        lines.append("    no one-device float32 or mixed-precision row ran")
    lines += ["  published by NVIDIA for its own EfficientDet-D0 (TensorFlow 2) at %d px, not this "
              "package's" % PUBLISHED_SIZE, "  (%s):" % PUBLISHED_SOURCE]
    for figure in PUBLISHED_THROUGHPUT:
        lines.append("    %-13s %-22s batch %3d  %4.0f images/s" % (
            figure.gpu, figure.precision, figure.batch_per_gpu, figure.images_per_s))
    lines.append(textwrap.fill("this measurement differs from theirs: %s."
                               % "; ".join(measurement_differences(options, gpus)),
                               width=100, initial_indent="  ", subsequent_indent="    "))
    return "\n".join(lines)


def _is_one_device_mixed(setting: DeviceSetting) -> bool:
    return setting.replicas != MIRRORED and not setting.hub and setting.precision != "float32"


def measurement_differences(options: CheckOptions, gpus: int) -> List[str]:
    """How the rows' measurement differs from the published one (model, size, batch, ...)."""
    differences = []
    if options.model_name != PUBLISHED_MODEL:
        differences.append("%s, not %s" % (options.model_name, PUBLISHED_MODEL))
    if options.image_size != PUBLISHED_SIZE:
        differences.append("%d px, not %d" % (options.image_size, PUBLISHED_SIZE))
    batches = [figure.batch_per_gpu for figure in PUBLISHED_THROUGHPUT]
    if options.batch_size not in batches:
        differences.append("batch %d per device, theirs %d-%d (a larger batch gives more "
                           "images/s)" % (options.batch_size, min(batches), max(batches)))
    if options.hparams:
        differences.append("--hparams %s" % options.hparams)
    if not gpus:
        differences.append("on a CPU")
    differences.append("one repeated batch here, their input pipeline there")
    return differences
