import os
import subprocess
import sys

from conftest import REPO_ROOT


def test_summary_tool_prints_parts_and_levels():
    result = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "tools", "summary.py"),
         "--model_name=efficientdet-lite0", "--hparams=image_size=256x128,num_classes=3"],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert "efficientdet-lite0  input 128x256 (HxW), 3 classes" in out
    assert "P3     [1, 16, 32, 27]" in out and "P7     [1, 1, 2, 27]" in out
    assert "Mean initial class score on a blank image: 0.0100" in out


def test_summary_tool_rejects_unknown_key():
    result = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "tools", "summary.py"), "--hparams=num_clases=3"],
        capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith(
        "efficientdet-summary: Unknown config key 'num_clases'; closest known keys: num_classes")


def test_bench_postprocess_prints_figures():
    result = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "tools", "bench.py"), "--what=postprocess",
         "--model_name=efficientdet-lite0", "--image_size=128", "--batch_size=1", "--repeats=1"],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert lines[0].startswith("efficientdet-lite0 128x128 batch 1")
    assert lines[1].startswith("network forward (median)") and lines[1].endswith(" ms")
    assert [line.split(" (median)")[0] for line in lines[2:]] == [
        "post-process gaussian", "post-process hard", "post-process combined"]
