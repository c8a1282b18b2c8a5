"""benchmarks/bench.py --what=speed (benchmarks/speed.py): the float32 and best paths side by side,
each figure from a child process; a tiny run and the table's parsing and ratios."""

import os
import subprocess

import pytest

from helpers import REPO_ROOT, SMALL_NETWORK_HPARAMS, python


# Smaller BiFPN and heads and a frozen backbone: the children trace in seconds, not minutes.
SMALL_D0 = SMALL_NETWORK_HPARAMS + ",var_freeze_expr=efficientnet"


def run_bench(*args, cwd):
    return subprocess.run([python(), os.path.join(REPO_ROOT, "benchmarks", "bench.py"),
                           "--what=speed", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=900)


def table_cells(stdout: str):
    """{row label: [float32, best, ratio]} of the printed Markdown table."""
    rows = [line.strip("|").split("|") for line in stdout.splitlines()
            if line.startswith("| ") and not line.startswith("| measurement")]
    return {cells[0].strip(): [cell.strip() for cell in cells[1:]] for cells in rows}


@pytest.mark.slow  # The benchmark's own command.
def test_tiny_speed_run_prints_both_paths_and_their_ratio(tmp_path):
    """Sizes 64-128 px, two repeats: a training row (whose child also gives the first step and
    its peak memory), the network and end-to-end latency (TensorFlow against the .tflite); a
    missing demo run gives an n/a AP row, a bad --speed_rows one line."""
    result = run_bench("--speed_scale=0.25", "--repeats=2", "--hparams=" + SMALL_D0,
                       "--speed_rows=train_256_4,first_step,network,end_to_end,ap",
                       "--data_dir=%s" % (tmp_path / "data"), "--model_dir=no_run", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert out.startswith("efficientdet-d0 on ") and " cores, TensorFlow " in out
    assert "medians (training: 2 steps after 2 warm-up steps; latency: 6 runs after 10 " \
        "warm-up runs;" in out
    assert "best: training float32, memory row with grad_checkpoint=true; inference TFLite " \
        "float32 (raw outputs, XNNPACK, %d threads)" % os.cpu_count() in out
    cells = table_cells(out)
    assert list(cells) == [
        "training 64 px batch 4 (img/s)", "latency 128 px batch 1, network (ms)",
        "latency 128 px batch 1, JPEG to detections (ms)",
        "time to first step, 64 px batch 4 (s)", "demo AP", "demo AP50"]
    for label, (float32, best, ratio) in cells.items():
        if label.startswith("demo AP"):
            continue
        assert float(float32) > 0 and float(best) > 0, label
        assert float(ratio) == pytest.approx(float(best) / float(float32), abs=0.006), label
    assert cells["demo AP"][0] == "n/a (no demo run in no_run: make demo)"

    bad = run_bench("--speed_rows=train_256_4,latncy", cwd=tmp_path)
    assert bad.returncode != 0
    assert bad.stderr.strip().splitlines()[-1] == (
        "benchmarks/bench.py: --speed_rows: unknown row(s) 'latncy'; choose from train_256_4, "
        "train_256_8, train_512_4, train_512_8, network, end_to_end, first_step, memory, ap")


# Run in a child, as the benchmark programs run: from the checkout.
PARSING_CHECKS = """
import pytest
from benchmarks.speed import SPEED_PATHS, parse_child_output, ratio_cell
assert set(SPEED_PATHS) == {"float32", "best"}
assert SPEED_PATHS["best"]["memory_hparams"] == "grad_checkpoint=true"
assert SPEED_PATHS["best"]["infer_runtime"] == "tflite"
assert SPEED_PATHS["float32"]["infer_runtime"] == "tensorflow"
assert not SPEED_PATHS["float32"]["memory_hparams"] and not SPEED_PATHS["best"]["train_hparams"]
assert parse_child_output('noise\\n{"network_ms": 12.5}\\n', "", ["py", "-m", "a", "b"]) == {
    "network_ms": 12.5}
with pytest.raises(RuntimeError, match="the child's error"):
    parse_child_output("no json\\n", "Traceback\\nthe child's error", ["py", "-m", "a", "b"])
assert ratio_cell("4.00", "5.00") == "1.25"
assert ratio_cell("0.0000", "0.1000") == "n/a"
print("checked")
"""


@pytest.mark.quick
def test_child_output_and_ratio_formatting():
    result = subprocess.run([python(), "-c", PARSING_CHECKS], capture_output=True,
                            text=True, cwd=REPO_ROOT, timeout=300)
    assert result.returncode == 0 and result.stdout.strip() == "checked", result.stderr[-2000:]


# measure_rounds with a stand-in for the children: which ran in which order, and the table.
ROUNDS_CHECKS = """
from benchmarks import speed as sb
settings = sb.SpeedSettings(scale=0.25, repeats=2, model_dir="/no/demo/run")
calls = []
IMAGES_PER_S = {"float32": [10.0, 20.0, 30.0], "best": [5.0, 30.0, 12.0]}

def fake_child(measure, path, size, batch, steps):
    calls.append((measure, path, size, batch))
    index = calls.count(calls[-1]) - 1  # This child's round.
    if measure == "train":
        return {"images_per_s": IMAGES_PER_S[path][index] if size == 64 else 1.0,
                "first_step_s": 7.0, "max_rss_mb": 100.0}
    if measure == "memory":
        return {"max_rss_mb": 40.0 + 20 * index}
    return {"network_ms": {"float32": 8.0, "best": 2.0 + index}[path]}

rows = ["train_256_4", "network", "first_step", "memory"]
rounds = sb.measure_rounds(settings, rows, 3, run=fake_child)
one_round = [("train", "float32", 64, 4), ("train", "best", 64, 4),
             ("train", "float32", 128, 8),  # The best path's memory row has a child of its own.
             ("network", "float32", 128, 1), ("network", "best", 128, 1),
             ("memory", "best", 128, 8)]
swapped = [one_round[1], one_round[0], one_round[2], one_round[4], one_round[3], one_round[5]]
assert calls == one_round + swapped + one_round, calls
medians, ranges = sb.combine_rounds(rounds)
assert medians["float32"]["train_256_4"] == 20.0 and medians["best"]["train_256_4"] == 12.0
assert ranges["train_256_4"] == (0.4, 1.5)
assert medians["best"]["memory_mb"] == 60.0 and ranges["memory_mb"] == (0.4, 0.8)
assert medians["best"]["network_ms"] == 3.0 and ranges["network_ms"] == (0.25, 0.5)
table = sb.format_table(settings, medians, rows, ranges).splitlines()
assert table[0] == "| measurement | float32 | best | best/float32 | rounds' best/float32 |"
assert "| training 64 px batch 4 (img/s) | 20.00 | 12.00 | 0.60 | 0.40-1.50 |" in table, table
assert "| peak memory, training 128 px batch 8 (MB) | 100 | 60 | 0.60 | 0.40-0.80 |" in table
assert sb.format_table(settings, medians, rows).splitlines()[0].count("|") == 5  # One round.
once = sb.combine_rounds([{"float32": {"AP": 0.5}, "best": {"AP": 0.5}},
                         {"float32": {}, "best": {}}])
assert once == ({"float32": {"AP": 0.5}, "best": {"AP": 0.5}}, {})  # No range of one value.
print("checked")
"""


@pytest.mark.quick
def test_rounds_alternate_the_paths_and_the_table_gives_medians_and_ratio_ranges():
    result = subprocess.run([python(), "-c", ROUNDS_CHECKS], capture_output=True,
                            text=True, cwd=REPO_ROOT, timeout=300)
    assert result.returncode == 0 and result.stdout.strip() == "checked", result.stderr[-2000:]
