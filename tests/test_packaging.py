"""A plain (non-editable) install works on its own: the wheel ships the hparams files, the
installed package and console scripts run from a folder outside the checkout, and a bare
hparams file name means the packaged file."""

import os
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

from helpers import HPARAMS_DIR, REPO_ROOT
from efficientdet_keras.config import PACKAGED_HPARAMS_DIR, get_efficientdet_config
from test_cli import assert_quiet_start, console_scripts

PACKAGED_FILES = ("demo.yaml", "short_run.yaml", "voc.yaml")
# What a wheel build must not see: environments, build outputs, run outputs.
NOT_SOURCES = shutil.ignore_patterns(".venv", ".git", "build", "dist", "*.egg-info", "runs",
                                     "tmp", "__pycache__", ".pytest_cache")


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(wheel path, site folder): the wheel of a copy of this checkout, installed with
    `pip install --target` (dependencies come from the running environment)."""
    root = tmp_path_factory.mktemp("packaging")
    source = root / "source"
    shutil.copytree(REPO_ROOT, source, symlinks=True, ignore=NOT_SOURCES)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    built = subprocess.run(pip + ["wheel", "--no-deps", "--no-build-isolation", "-w",
                                  str(root / "wheels"), str(source)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    wheel = next((root / "wheels").glob("efficientdet_keras-*.whl"))
    site = root / "site"
    done = subprocess.run(pip + ["install", "--no-deps", "--target", str(site), str(wheel)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    shutil.rmtree(source)  # Nothing can come from the copy now.
    return wheel, site


def run_installed(site, cwd, args, timeout=120):
    """Runs Python with only the installed copy of the package ahead of the environment's."""
    env = dict(os.environ, PYTHONPATH=str(site))
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # What a user's shell has.
    return subprocess.run([sys.executable, *args], cwd=str(cwd), env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_checkout_hparams_is_the_packaged_folder():
    # One copy of each file: the top-level folder is a symlink to the package's.
    assert os.path.islink(HPARAMS_DIR)
    assert os.path.realpath(HPARAMS_DIR) == os.path.realpath(PACKAGED_HPARAMS_DIR)
    assert sorted(os.listdir(HPARAMS_DIR)) == sorted(PACKAGED_FILES)


@pytest.mark.quick
def test_bare_name_means_the_packaged_file_unless_the_working_directory_has_one(
        tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    voc = get_efficientdet_config("efficientdet-d0").override("voc.yaml")
    assert voc.num_classes == 21 and voc.label_map[20] == "tvmonitor"

    (tmp_path / "voc.yaml").write_text("num_classes: 3\n")
    assert get_efficientdet_config("efficientdet-d0").override("voc.yaml").num_classes == 3

    # A path with a folder is taken as written; a missing name lists what is shipped.
    with pytest.raises(ValueError, match=r"elsewhere/demo\.yaml \(packaged files, usable by "
                                         r"name: demo\.yaml, short_run\.yaml, voc\.yaml\)"):
        get_efficientdet_config("efficientdet-d0").override("elsewhere/demo.yaml")
    with pytest.raises(ValueError, match=r"Config YAML file not found: coco\.yaml"):
        get_efficientdet_config("efficientdet-d0").override("coco.yaml")


def test_wheel_ships_the_hparams_files_and_every_console_script(installed):
    wheel, _ = installed
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        for name in PACKAGED_FILES:
            shipped = archive.read("efficientdet_keras/hparams/" + name)
            with open(os.path.join(PACKAGED_HPARAMS_DIR, name), "rb") as f:
                assert shipped == f.read()
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        text = archive.read(entry_points).decode()
    for script, target in console_scripts().items():
        assert "%s = %s" % (script, target) in text


def test_installed_package_runs_outside_the_checkout(installed, tmp_path):
    _, site = installed
    result = run_installed(site, tmp_path, ["-c", (
        "import efficientdet_keras, efficientdet_keras.config as c\n"
        "print(efficientdet_keras.__file__)\n"
        "print(c.get_efficientdet_config('efficientdet-d0').override('voc.yaml').num_classes)")])
    assert result.returncode == 0, result.stderr[-2000:]
    module_file, num_classes = result.stdout.split()
    assert module_file.startswith(str(site)) and num_classes == "21"

    help_run = run_installed(site, tmp_path, [str(site / "bin" / "efficientdet-train"), "--help"])
    assert help_run.returncode == 0 and "--demo_images" in help_run.stdout


@pytest.mark.slow
def test_installed_demo_trains_with_the_packaged_settings(installed, tmp_path):
    _, site = installed
    result = run_installed(site, tmp_path, [
        str(site / "bin" / "efficientdet-train"), "--demo", "--model_dir=demo",
        "--demo_images=4", "--num_epochs=1", "--batch_size=2",
        "--hparams=steps_per_epoch=1,image_size=64,fpn_num_filters=16,fpn_cell_repeats=1,"
        "box_class_repeats=1"], timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    run = tmp_path / "demo"
    assert (run / "ckpt-1.index").exists()
    config = (run / "config.yaml").read_text()
    # The demo's label map, and settings that only hparams/demo.yaml makes.
    assert "label_map:\n  1: circle\n  2: square\n  3: triangle\n  4: cross\n" in config
    assert "optimizer: adam" in config and "moving_average_decay: 0.99\n" in config
    assert "COCO metrics after epoch 1" in result.stdout
    assert_quiet_start(result.stderr)
    assert re.search(r"^I\d{4} ", result.stderr, re.M)  # The package's own INFO lines stay.
