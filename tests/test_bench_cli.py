"""efficientdet-bench --model=PATH: Detector.benchmark's figures for a user's model, and one
error line for a model that is not there."""

import re
import subprocess

import pytest

from helpers import REPO_ROOT, python, tiny_config, write_image, write_model_dir

# "  network     median 12.3 ms, p90 14.0 ms per batch, 162.6 images/s"
FIGURES = re.compile(r"^  (network|end to end)\s+median ([\d.]+) ms, p90 ([\d.]+) ms per batch, "
                     r"([\d.]+) images/s$", re.M)


def run_bench(*args):
    return subprocess.run([python(), "-m", "efficientdet_keras.cli.bench", *args],
                          capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A training directory (config.yaml and ckpt-1) of a slim D0 at 64 px."""
    folder = tmp_path_factory.mktemp("bench_cli") / "run"
    write_model_dir(folder, tiny_config(image_size=64, num_classes=4, fpn_num_filters=16,
                                        fpn_cell_repeats=1, box_class_repeats=1))
    return str(folder)


@pytest.mark.quick
def test_a_model_dir_gets_network_and_end_to_end_figures(model_dir, tmp_path):
    import numpy as np
    image = write_image(str(tmp_path / "photo.jpg"),
                        np.random.default_rng(0).integers(0, 256, [48, 80, 3], np.uint8))
    result = run_bench("--model=%s" % model_dir, "--batch_size=2", "--runs=3", "--warmup=1",
                       "--image=%s" % image)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("%s, batch 2 of 48x80 images, 3 runs after 1 warm-up runs:"
                                    % model_dir), result.stdout
    figures = {name: [float(v) for v in values] for name, *values
               in FIGURES.findall(result.stdout)}
    assert list(figures) == ["network", "end to end"], result.stdout
    for median_ms, p90_ms, images_per_second in figures.values():
        assert 0 < median_ms <= p90_ms
        assert images_per_second == pytest.approx(2 / (median_ms / 1e3), rel=0.01)


def test_the_default_image_and_a_missing_model_or_flag(tmp_path, model_dir):
    default = run_bench("--model=%s" % model_dir, "--runs=1", "--warmup=0")
    assert default.returncode == 0, default.stderr[-3000:]
    assert "batch 1 of 480x640 images, 1 runs after 0 warm-up runs:" in default.stdout
    assert len(FIGURES.findall(default.stdout)) == 2

    missing = run_bench("--model=%s" % (tmp_path / "none"))
    assert missing.returncode == 1 and "Traceback" not in missing.stderr
    assert missing.stderr.strip().splitlines()[-1] == (
        "efficientdet-bench: %s: no such file or directory" % (tmp_path / "none"))

    no_model = run_bench()
    assert no_model.returncode == 1
    assert no_model.stderr.strip().splitlines()[-1] == (
        "efficientdet-bench: give --model: a training directory, a checkpoint, a detection "
        "SavedModel, a .tflite, .onnx or OpenVINO file")
