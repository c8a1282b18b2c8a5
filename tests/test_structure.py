"""The package's shape: command-line tools read their flags in main only and stay small, no
module of the package grows past a size a reader takes in, and the export formats are listed
in one place."""

import ast
import glob
import os

import pytest

from helpers import REPO_ROOT

pytestmark = pytest.mark.quick  # All of this file is in the inner-loop set.

PACKAGE = os.path.join(REPO_ROOT, "efficientdet_keras")
MAX_CLI_LINES = 200
MAX_MODULE_LINES = 400


def modules(folder: str):
    return sorted(glob.glob(os.path.join(PACKAGE, folder, "**", "*.py"), recursive=True))


def line_count(path: str) -> int:
    with open(path) as f:
        return sum(1 for _ in f)


def flag_reads_outside_main(path: str):
    """(function, line) of each use of the module's FLAGS inside a function other than main."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    found = []
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if getattr(function, "name", "") == "main":
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.Name) and node.id == "FLAGS":
                found.append((getattr(function, "name", "lambda"), node.lineno))
    return found


def test_flags_are_read_only_in_each_tools_main():
    offenders = {os.path.relpath(path, REPO_ROOT): flag_reads_outside_main(path)
                 for path in modules("cli")}
    assert not {path: uses for path, uses in offenders.items() if uses}


def test_the_check_finds_a_flag_read_in_a_helper(tmp_path):
    path = tmp_path / "tool.py"
    path.write_text("FLAGS = None\n\ndef helper():\n    return FLAGS.x\n\n"
                    "def main(argv):\n    return FLAGS.y\n")
    assert flag_reads_outside_main(str(path)) == [("helper", 4)]


def test_no_library_module_reads_absl_flags():
    readers = []
    for path in modules(""):
        if os.sep + "cli" + os.sep in path:
            continue
        with open(path) as f:
            if "flags.FLAGS" in f.read():
                readers.append(os.path.relpath(path, REPO_ROOT))
    assert not readers


def test_command_line_modules_and_library_modules_stay_small():
    too_long = {os.path.relpath(path, REPO_ROOT): line_count(path)
                for path in modules("cli") if line_count(path) > MAX_CLI_LINES}
    too_long.update({os.path.relpath(path, REPO_ROOT): line_count(path)
                     for path in modules("") if line_count(path) > MAX_MODULE_LINES})
    assert not too_long


def test_the_format_names_come_from_the_one_registry():
    from efficientdet_keras.workflows import compare_formats, formats
    export_tool = os.path.join(PACKAGE, "cli", "export.py")
    with open(export_tool) as f:
        text = f.read()
    # The tool's --format choices are the registry's keys, not a list of its own.
    assert "list(FORMATS)" in text and '"onnx", "openvino"' not in text
    assert list(formats.FORMATS) == ["saved_model", "hub", "onnx", "openvino", "tflite"]
    assert compare_formats.FORMATS == (
        "saved_model", "onnx", "openvino", "openvino_fp16", "openvino_int8", "tflite",
        "tflite_fp16", "tflite_int8")
    for name, fmt, precision in formats.compared_variants():
        assert precision in fmt.precisions and compare_formats.format_precision(name) == precision
    assert formats.format_of_file("x/model.xml").name == "openvino"
    assert formats.format_of_file("x/model.tflite").name == "tflite"
    assert formats.format_of_file("x/saved_model") is None


def test_a_format_rejects_a_precision_it_does_not_write():
    from efficientdet_keras.workflows.formats import get_format
    assert get_format("tflite").canonical_precision("FP16") == "float16"
    assert get_format("openvino").canonical_precision(None) == "float32"
    with pytest.raises(ValueError, match="onnx takes precision float32, not 'int8'"):
        get_format("onnx").canonical_precision("int8")
    with pytest.raises(ValueError, match="unknown format 'tensorrt': choose from saved_model"):
        get_format("tensorrt")


def test_no_subpackage_shadows_a_public_name():
    """A subpackage named like a public name (export/ beside export()) replaces the function
    on the package as soon as any of its modules is imported."""
    import efficientdet_keras
    folders = {name for name in os.listdir(PACKAGE)
               if os.path.isfile(os.path.join(PACKAGE, name, "__init__.py"))}
    assert not folders & set(efficientdet_keras.__all__)
    import efficientdet_keras.exporters.saved_model  # noqa: F401
    from efficientdet_keras import evaluate, export, train
    assert [f.__module__ for f in (train, evaluate, export)] == [
        "efficientdet_keras.workflows.train", "efficientdet_keras.workflows.evaluate",
        "efficientdet_keras.workflows.export"]
