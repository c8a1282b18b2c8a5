"""efficientdet-gpu-check as a user runs it on a machine without a GPU (tiny model, a few
rows, each in its own process), and the pieces of its table."""

import re
import subprocess
import textwrap

import pytest

from helpers import python
from efficientdet_keras.workflows import gpu_check, gpu_check_table
from efficientdet_keras.workflows.gpu_check import (FAILED, HOST_ROW, SKIPPED, TIMED_OUT,
                                                      WORKS, CheckOptions, RowResult)
from efficientdet_keras.training.device_settings import SETTINGS, setting_named

# A slim D0 at 64 px: every row builds, traces and trains it in seconds. batch_norm_renorm
# trains in every row but the gradient checkpointing one, whose config refuses it: a real
# failure of one row.
TINY_FLAGS = ["--image_size=64", "--batch_size=2", "--steps=2",
              "--hparams=fpn_num_filters=16,fpn_cell_repeats=1,box_class_repeats=1,"
              "batch_norm_renorm=true"]
# "float32                 0.117 s      17.1        1,296 MB  works"
WORKING_ROW = re.compile(r"^(\S+(?: \S+)*)\s+([\d.]+) s\s+([\d.]+)\s+([\d,]+) MB  works$", re.M)
# "host input pipeline           -     176.4               -  works"
HOST_TABLE_ROW = re.compile(r"^host input pipeline\s+-\s+([\d.]+)\s+-  works$", re.M)


def run_check(*args, timeout=600):
    return subprocess.run([python(), "-m", "efficientdet_keras.cli.gpu_check", *args],
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow  # The tool's whole run; the tests below keep each of its parts.
def test_cpu_run_works_skips_and_fails_rows_with_their_reasons():
    result = run_check(*TINY_FLAGS, "--settings=float32,mixed_bfloat16,gradient checkpointing,"
                       "mirrored float32")
    out = result.stdout
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert out.startswith("no GPU found: running the CPU rows; the mirrored rows need 2 GPUs")
    assert result.stderr.strip().splitlines()[-1] == (
        "efficientdet-gpu-check: 1 setting(s) did not work: gradient checkpointing")

    # A progress line per row, in table order, the host row last, then the table.
    progress = re.findall(r"^\[(\d)/5\] ([^:]+):", out, re.M)
    assert progress == [("1", "float32"), ("2", "mixed_bfloat16"), ("3", "mirrored float32"),
                        ("4", "gradient checkpointing"), ("5", HOST_ROW)]
    table = out.split("\n\n")[1].splitlines()
    assert re.match(r"^setting\s+step \(median\)\s+images/s\s+peak RSS \(CPU\)\s+result$",
                    table[0]), table[0]
    figures = WORKING_ROW.findall("\n".join(table))
    working = {name: (float(step), float(rate), int(memory.replace(",", "")))
               for name, step, rate, memory in figures}
    rates = {name: re.escape(rate) for name, _, rate, _ in figures}
    assert list(working) == ["float32", "mixed_bfloat16"], table
    for step_s, images_per_s, memory_mb in working.values():
        assert step_s > 0 and memory_mb > 100
        assert images_per_s == pytest.approx(2 / step_s, rel=0.05)  # Rounding of both.
    assert re.match(r"^mirrored float32\s+-\s+-\s+-\s+skipped: needs 2 GPUs \(found 0\)$",
                    table[3]), table[3]
    assert re.match(r"^gradient checkpointing\s+-\s+-\s+-\s+failed: ValueError: Invalid config: "
                    r"grad_checkpoint cannot be combined with batch_norm_renorm: .*forward$",
                    table[4]), table[4]
    host_rate = HOST_TABLE_ROW.match(table[5]).group(1)
    assert float(host_rate) > 0, table[5]

    # A slim D0 step on a CPU takes images far slower than the host's pipeline makes them.
    assert out.split("\n\n")[2] == ("the host's input pipeline (%s images/s) keeps ahead of "
                                    "every step measured." % host_rate)
    comparison = out.split("\n\n")[3].splitlines()
    assert comparison[1] == "  measured here, efficientdet-d0 at 64 px, batch 2, on the CPU:"
    assert re.match(r"^    float32 +%s images/s$" % rates["float32"], comparison[2])
    assert re.match(r"^    mixed_bfloat16 +%s images/s \(the fastest mixed-precision row\)$"
                    % rates["mixed_bfloat16"], comparison[3])
    assert "    1x A100 80GB  mixed precision (AMP)  batch 200   397 images/s" in comparison
    assert "    1x V100 32GB  mixed precision (AMP)  batch  64   232 images/s" in comparison
    assert comparison[4].startswith("  published by NVIDIA for its own EfficientDet-D0")
    assert "differs from theirs: 64 px, not 512; batch 2 per device" in " ".join(
        " ".join(comparison).split())


def test_an_unknown_setting_is_a_one_line_error():
    result = run_check("--settings=float32,float64")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith(
        "efficientdet-gpu-check: no device setting 'float64'; the settings are: float32, ")
    assert result.stdout == ""  # Stopped before any row.


# --- the pieces ---------------------------------------------------------------------------

ROWS = [RowResult("float32", WORKS, step_s=0.1234, images_per_s=64.83,
                  peak_memory_bytes=9_876_543_210, seconds=41.2),
        RowResult("mixed_float16 XLA", WORKS, step_s=0.05, images_per_s=160.0,
                  peak_memory_bytes=5_000_000_000),
        RowResult("mirrored float32", SKIPPED, "needs 2 GPUs (found 1)"),
        RowResult("hub trainer", FAILED, "ResourceExhaustedError: OOM when allocating tensor"),
        RowResult("float32 XLA", TIMED_OUT, "stopped after 60 s (--timeout)"),
        RowResult("hub trainer mixed_float16 XLA", WORKS, step_s=67.181, images_per_s=0.02977,
                  peak_memory_bytes=4_475_000_000)]


@pytest.mark.quick
def test_table_aligns_the_figures_and_puts_the_result_last():
    assert gpu_check_table.format_table(ROWS, "peak GPU memory").splitlines() == [
        "setting                        step (median)  images/s  peak GPU memory  result",
        "float32                              0.123 s      64.8         9,877 MB  works",
        "mixed_float16 XLA                    0.050 s     160.0         5,000 MB  works",
        "mirrored float32                           -         -                -  skipped: "
        "needs 2 GPUs (found 1)",
        "hub trainer                                -         -                -  failed: "
        "ResourceExhaustedError: OOM when allocating tensor",
        "float32 XLA                                -         -                -  timed out: "
        "stopped after 60 s (--timeout)",
        "hub trainer mixed_float16 XLA       67.181 s     0.030         4,475 MB  works"]


def test_progress_lines():
    assert gpu_check_table.progress_line(1, 5, ROWS[0], "peak GPU memory") == (
        "[1/5] float32: works, 0.123 s/step, 64.8 images/s, peak GPU memory 9,877 MB (41 s)")
    assert gpu_check_table.progress_line(3, 5, ROWS[2], "peak RSS (CPU)") == (
        "[3/5] mirrored float32: skipped: needs 2 GPUs (found 1)")
    assert gpu_check_table.progress_line(5, 5, HOST, "peak GPU memory") == (
        "[5/5] host input pipeline: works, 100.0 images/s (12 s)")


# --- the host row ---------------------------------------------------------------------------

HOST = RowResult(HOST_ROW, WORKS, images_per_s=100.0, seconds=12.0)


@pytest.mark.quick
def test_host_row_sits_in_the_images_per_s_column():
    table = gpu_check_table.format_table(ROWS[:2] + [HOST], "peak GPU memory").splitlines()
    assert table[1:] == [
        "float32                    0.123 s      64.8         9,877 MB  works",
        "mixed_float16 XLA          0.050 s     160.0         5,000 MB  works",
        "host input pipeline              -     100.0                -  works"]
    assert HOST_TABLE_ROW.match(table[3])


def test_host_verdict_names_the_steps_the_pipeline_is_slower_than():
    slower = gpu_check_table.host_verdict(ROWS + [HOST])
    assert " ".join(slower.split()) == (
        "the host's input pipeline (100.0 images/s) is slower than the step at mixed_float16 "
        "XLA (160.0 images/s): more CPU cores, `cache` (`--cache=ram`: decoded images kept "
        "after the first epoch), or tf.data service (`--data_service`).")
    assert max(map(len, slower.splitlines())) <= 100
    faster = RowResult(HOST_ROW, WORKS, images_per_s=500.0)
    assert gpu_check_table.host_verdict(ROWS + [faster]) == (
        "the host's input pipeline (500.0 images/s) keeps ahead of every step measured.")
    # Nothing to compare: no working host row, or no working step.
    assert gpu_check_table.host_verdict(ROWS) == ""
    assert gpu_check_table.host_verdict(ROWS + [RowResult(HOST_ROW, FAILED, "OSError")]) == ""
    assert gpu_check_table.host_verdict(ROWS[2:5] + [HOST]) == ""


def test_run_check_ends_with_the_host_row_run_without_gpus():
    """Each row's child prints its JSON line; the host row's also the GPUs CUDA shows it."""
    def child_argv(name):
        return python_child(textwrap.dedent("""
            import json, os
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            print(json.dumps({"works": True, "images_per_s": 8.0 if visible else 4.0,
                              "step_s": None if visible else 0.5, "gpus": visible}))"""))
    progress = []
    rows = gpu_check.run_check([setting_named("float32"), setting_named("mirrored float32")],
                               gpus=0, child_argv=child_argv, timeout=60,
                               on_row=lambda index, count, row: progress.append(
                                   (index, count, row.setting)))
    assert progress == [(1, 3, "float32"), (2, 3, "mirrored float32"), (3, 3, HOST_ROW)]
    assert [(row.setting, row.status, row.images_per_s) for row in rows] == [
        ("float32", WORKS, 4.0), ("mirrored float32", SKIPPED, None), (HOST_ROW, WORKS, 8.0)]
    assert gpu_check.child_environment(hide_gpus=True)["CUDA_VISIBLE_DEVICES"] == "-1"


def test_host_row_measures_the_training_pipeline(tmp_path, monkeypatch):
    """A few small images, so the row's images/s comes in a second."""
    monkeypatch.setattr(gpu_check, "HOST_IMAGES", 4)
    monkeypatch.setattr(gpu_check, "HOST_IMAGE_SHAPE", (48, 64))
    result = gpu_check.measure_host_row(CheckOptions(image_size=64, batch_size=2),
                                        str(tmp_path))
    assert (result["setting"], result["works"], result["batch_size"]) == (HOST_ROW, True, 2)
    assert result["images_per_s"] > 0
    failed = gpu_check.measure_host_row(CheckOptions(hparams="num_clases=3"), str(tmp_path))
    assert not failed["works"] and "num_clases" in failed["error"]


def test_the_command_says_when_the_host_is_the_limit():
    """The command's report with every child replaced by a fixed result: the host line under
    the table when the host's pipeline is slower than a step, and a line saying it keeps
    ahead when it is faster."""
    code = textwrap.dedent("""
        from efficientdet_keras.cli import gpu_check as command
        from efficientdet_keras.workflows import gpu_check
        from efficientdet_keras.workflows.gpu_check import CheckOptions, RowResult

        def fixed_rows(host_rate):
            rates = {"float32": 50.0, gpu_check.HOST_ROW: host_rate}
            return lambda name, argv, timeout, hide_gpus=False: RowResult(
                name, gpu_check.WORKS, step_s=None if hide_gpus else 0.04,
                images_per_s=rates[name], peak_memory_bytes=None if hide_gpus else 10 ** 9)

        for host_rate in (20.0, 80.0):
            gpu_check.run_child = fixed_rows(host_rate)
            command.check(["float32"], CheckOptions(batch_size=2), 60, "", "")
            print("=" * 8)
        """)
    result = subprocess.run([python(), "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    slower, faster = result.stdout.split("=" * 8 + "\n")[:2]
    assert re.search(r"^host input pipeline\s+-\s+20\.0\s+-  works$", slower, re.M), slower
    assert ("the host's input pipeline (20.0 images/s) is slower than the step at float32 "
            "(50.0 images/s): more CPU cores") in " ".join(slower.split())
    assert "is slower than the step" not in faster
    assert "the host's input pipeline (80.0 images/s) keeps ahead of every step measured." in (
        faster.split("\n\n"))


def test_comparison_takes_the_fastest_one_device_mixed_row_and_names_the_differences():
    rows = ROWS + [RowResult("mixed_bfloat16", WORKS, step_s=0.1, images_per_s=80.0),
                   RowResult("mirrored mixed_float16", WORKS, step_s=0.05, images_per_s=999.0)]
    text = gpu_check_table.throughput_comparison(rows, CheckOptions(batch_size=200), gpus=2)
    assert text.splitlines()[1:4] == [
        "  measured here, efficientdet-d0 at 512 px, batch 200, on GPU:0:",
        "    float32             64.8 images/s",
        "    mixed_float16 XLA  160.0 images/s (the fastest mixed-precision row)"]
    # Model, size and batch match the A100 mixed-precision figure: only the input differs.
    assert text.splitlines()[-1] == ("  this measurement differs from theirs: one repeated "
                                     "batch here, their input pipeline there.")
    other = gpu_check_table.throughput_comparison(
        [], CheckOptions("efficientdet-lite0", 320, 4, hparams="num_classes=3"), gpus=0)
    assert "    no one-device float32 or mixed-precision row ran" in other.splitlines()
    assert " ".join(other.split("theirs: ", 1)[1].split()) == (
        "efficientdet-lite0, not efficientdet-d0; 320 px, not 512; batch 4 per device, theirs "
        "40-200 (a larger batch gives more images/s); --hparams num_classes=3; on a CPU; one "
        "repeated batch here, their input pipeline there.")


def test_rows_a_machine_cannot_run_are_skipped_with_the_reason():
    mirrored = [s for s in SETTINGS if s.replicas == gpu_check.MIRRORED]
    assert len(mirrored) == 6
    for gpus, reason in ((0, "needs 2 GPUs (found 0)"), (1, "needs 2 GPUs (found 1)"), (2, "")):
        plan = gpu_check.plan_rows(SETTINGS, gpus)
        assert [setting for setting, _ in plan] == list(SETTINGS)
        assert all(why == (reason if setting in mirrored else "") for setting, why in plan)
    note = gpu_check.cpu_note(SETTINGS)
    assert note.startswith("no GPU found: running the CPU rows; the mirrored rows need 2 GPUs; "
                           "mixed_float16 runs slowly on a CPU")
    assert "mixed_float16" not in gpu_check.cpu_note([setting_named("float32")])


def test_options_no_row_could_train_with_stop_before_the_rows():
    with pytest.raises(ValueError, match="Unknown config key 'num_clases'"):
        gpu_check.check_options(CheckOptions(hparams="num_clases=3"))
    with pytest.raises(ValueError, match="Invalid config: .*min_level"):
        gpu_check.check_options(CheckOptions(hparams="min_level=5,max_level=4"))
    gpu_check.check_options(CheckOptions(hparams="batch_norm_renorm=true"))


def test_settings_are_chosen_by_name_in_table_order():
    assert gpu_check.selected_settings([]) == list(SETTINGS)
    assert [s.name for s in gpu_check.selected_settings(
        ["hub trainer", " float32", "float32"])] == ["float32", "hub trainer"]
    with pytest.raises(ValueError, match="no device setting 'fp16'; the settings are: float32, "
                                         "float32 XLA, mixed_float16,"):
        gpu_check.selected_settings(["fp16"])


def python_child(code):
    return [python(), "-c", code]


def test_a_row_reads_its_childs_json_line_or_its_crash_or_timeout():
    setting = setting_named("float32")
    measured = gpu_check.run_row(setting, python_child(
        "print('TensorFlow chatter {'); print('{\"works\": true, \"step_s\": 0.5, "
        "\"images_per_s\": 4.0, \"peak_memory_bytes\": 7}')"), timeout=60)
    assert (measured.status, measured.step_s, measured.images_per_s,
            measured.peak_memory_bytes) == (WORKS, 0.5, 4.0, 7)
    failed = gpu_check.run_row(setting, python_child(
        "print('{\"works\": false, \"error\": \"ValueError: bad\"}'); raise SystemExit(1)"),
        timeout=60)
    assert (failed.status, failed.detail, failed.step_s) == (FAILED, "ValueError: bad", None)
    crashed = gpu_check.run_row(setting, python_child(
        "import os, sys; print('F0000 check failed: XLA', file=sys.stderr, flush=True); "
        "os.abort()"), timeout=60)
    assert (crashed.status, crashed.detail) == (
        FAILED, "F0000 check failed: XLA (killed by signal 6)")
    stopped = gpu_check.run_row(setting, python_child("import time; time.sleep(30)"),
                                   timeout=1)
    assert (stopped.status, stopped.detail) == (TIMED_OUT, "stopped after 1 s (--timeout)")
    assert stopped.seconds < 10


def test_error_line_skips_tensorflow_context_lines():
    import tensorflow as tf
    error = tf.errors.ResourceExhaustedError(None, None, (
        "Graph execution error:\n\nDetected at node gradient_tape/x defined at (most recent "
        "call last):\n  File \"train.py\", line 1\n{{function_node __inference_train_"
        "function_1}} OOM when allocating tensor with shape[8,64,256,256]\n\t [[{{node x}}]]"))
    assert gpu_check.error_line(error) == (
        "ResourceExhaustedError: OOM when allocating tensor with shape[8,64,256,256]")
    assert gpu_check.error_line(ValueError("first\nsecond")) == "ValueError: first"
    assert gpu_check.error_line(KeyError()) == "KeyError"


def test_step_seconds_leave_out_the_warmup_steps():
    from efficientdet_keras.training.step_timing import step_seconds
    assert step_seconds([1.0, 3.0, 3.5, 4.25], warmup_steps=2) == [0.5, 0.75]


def test_gpu_queries_with_tensorflows_device_calls_stubbed(monkeypatch):
    """The GPU paths on this GPU-less machine: model names (the device name when the driver
    gives none), and a mirrored row's peak memory summed over its GPUs."""
    import tensorflow as tf
    devices = [tf.config.PhysicalDevice("/physical_device:GPU:%d" % i, "GPU") for i in range(3)]
    details = {devices[0].name: {"device_name": "NVIDIA A100-SXM4-80GB"},
               devices[1].name: {}}

    def device_details(device):
        if device.name not in details:
            raise ValueError("no details")
        return details[device.name]

    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: devices)
    monkeypatch.setattr(tf.config.experimental, "get_device_details", device_details)
    assert gpu_check.gpu_names() == ["NVIDIA A100-SXM4-80GB", "/physical_device:GPU:1",
                                        "/physical_device:GPU:2"]
    peaks = {"GPU:0": 5, "GPU:1": 7, "GPU:2": 100}
    monkeypatch.setattr(tf.config.experimental, "get_memory_info",
                        lambda device: {"current": 0, "peak": peaks[device]})
    assert gpu_check.peak_memory_bytes(gpus=3, replicas=2) == 12
    assert gpu_check.peak_memory_bytes(gpus=3, replicas=1) == 5
    assert gpu_check.peak_memory_bytes(gpus=0, replicas=1) > 100e6  # This process's RSS.
