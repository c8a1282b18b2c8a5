"""The package's import layers (setup.cfg's [importlinter] contracts) hold, and the check fails
when an import points upward or closes a circle."""

import os
import shutil
import subprocess
import sys

import pytest

from helpers import REPO_ROOT

pytestmark = pytest.mark.quick  # All of this file is in the inner-loop set.

pytest.importorskip("importlinter", reason="import-linter is in the test extra")

SETUP_CFG = os.path.join(REPO_ROOT, "setup.cfg")


def lint_imports(cwd: str, config: str):
    """Runs lint-imports in a fresh interpreter whose first import path is `cwd`."""
    env = dict(os.environ, PYTHONPATH=cwd)
    code = ("import sys; from importlinter.cli import lint_imports; "
            "sys.exit(lint_imports(config_filename=%r, no_cache=True, no_logo=True))" % config)
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def package_copy(tmp_path) -> str:
    """A copy of the package's source and setup.cfg in tmp_path (its root)."""
    shutil.copytree(os.path.join(REPO_ROOT, "efficientdet_keras"),
                    os.path.join(tmp_path, "efficientdet_keras"),
                    ignore=shutil.ignore_patterns("__pycache__", "*.yaml"))
    shutil.copy(SETUP_CFG, os.path.join(tmp_path, "setup.cfg"))
    return str(tmp_path)


def add_import(root: str, module_path: str, statement: str) -> None:
    with open(os.path.join(root, "efficientdet_keras", module_path), "a") as f:
        f.write("\n%s\n" % statement)


def test_the_package_keeps_its_layers_and_has_no_circles():
    result = lint_imports(REPO_ROOT, SETUP_CFG)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 kept, 0 broken" in result.stdout


def test_an_upward_import_breaks_the_layers_contract(tmp_path):
    root = package_copy(tmp_path)
    add_import(root, "detection/anchors.py", "import efficientdet_keras.training.trainer")
    result = lint_imports(root, os.path.join(root, "setup.cfg"))
    assert result.returncode == 1
    assert "Each folder imports only the folders below it BROKEN" in result.stdout
    assert "efficientdet_keras.detection is not allowed to import" in result.stdout


def test_siblings_of_one_layer_may_not_import_each_other(tmp_path):
    root = package_copy(tmp_path)
    add_import(root, "exporters/saved_model.py", "import efficientdet_keras.evaluation.runner")
    result = lint_imports(root, os.path.join(root, "setup.cfg"))
    assert result.returncode == 1
    assert "efficientdet_keras.exporters is not allowed to import" in result.stdout


def test_a_circle_inside_a_folder_breaks_the_acyclic_contract(tmp_path):
    root = package_copy(tmp_path)
    # model/heads.py imports model/layers.py; the reverse closes a circle within one layer.
    add_import(root, "model/layers.py", "import efficientdet_keras.model.heads")
    result = lint_imports(root, os.path.join(root, "setup.cfg"))
    assert result.returncode == 1
    assert "Each folder imports only the folders below it KEPT" in result.stdout
    assert "No modules import each other in a circle BROKEN" in result.stdout
