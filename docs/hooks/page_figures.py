"""The decimal figures a page states, and which of them no run in benchmarks/results.json holds.

A page's prose and tables may state three kinds of decimal number:

- a measured figure (an AP, a latency, a speed-up), which must come from an entry of the
  results file, at the precision the page shows it;
- a setting or constant (a threshold, a preset's learning rate, a tolerance): a value written in
  the generated config and CLI references, a shipped YAML file, the package's code or the
  tests' (a tolerance a page explains);
- a version ("TensorFlow 2.16", "opset 13", ">= 1.18").

Code (fenced blocks and inline spans) holds settings and commands, not figures, and a results
region (`<!-- results: NAME -->`) is the results file's by construction (results_tables.py
checks it). The generated reference pages are settings throughout. Everything else must be
found in the results file.
"""

import glob
import os
import re
from typing import Dict, Iterable, List, Set

HOOKS_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HOOKS_DIR))
# Pages and files that write the package's settings out; their decimals are settings.
SETTINGS_PAGES = ("docs/reference/config.md", "docs/reference/cli.md")
SETTINGS_FILES = ("hparams/*.yaml", "efficientdet_keras/hparams/*.yaml",
                  "efficientdet_keras/**/*.py", "tests/**/*.py")
# A number with a decimal point, not part of a word or a version (1.2.3); a full stop may end
# it, and so may "x" for times ("0.72x").
DECIMAL = re.compile(r"(?<![\w.])\d+\.\d+(?:(?=x\b)|(?!\w|\.\d))")
# Versions and requirements, not measurements: "Python 3.10", "TensorFlow >= 2.16",
# "ONNX Runtime 1.18", "TensorRT 8.6", "opset 13".
VERSION = re.compile(r"(?:Python|TensorFlow|tf_keras|Keras|ONNX Runtime|onnxruntime|TensorRT|"
                     r"OpenVINO|NNCF|MediaPipe|LiteRT|ai-edge-litert|pycocotools|"
                     r"faster-coco-eval|opset|CUDA|cuDNN|version|>=|<=|==)"
                     r"\s*\d+\.\d+(?:\.\d+)?")
FENCED = re.compile(r"^\s*```.*?^\s*```", re.S | re.M)
# An inline code span; it may wrap onto the next line of its paragraph.
INLINE_CODE = re.compile(r"`(?:[^`\n]|\n(?!\n))+`")
REGION = re.compile(r"<!-- results: \w+ -->\n.*?<!-- end results -->", re.S)
COMMENT = re.compile(r"<!--.*?-->", re.S)


def numbers(value) -> List[float]:
    """Every number in a results value: numbers, and the decimals written in its strings."""
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, (int, float)):
        return [float(value)]
    if isinstance(value, str):
        return [float(figure) for figure in DECIMAL.findall(value)]
    if isinstance(value, dict):
        return [n for v in value.values() for n in numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in numbers(v)]
    return []


def known_figures(results: Dict[str, dict]) -> List[float]:
    """The figures the results file holds: every entry's rows and its prose `figures`."""
    return numbers([[entry.get("rows"), entry.get("figures")] for entry in results.values()])


def prose(text: str) -> str:
    """The page without its code, comments and versions."""
    for pattern in (FENCED, REGION, COMMENT, INLINE_CODE, VERSION):
        text = pattern.sub(" ", text)
    return text


def settings_values(root: str = REPO_ROOT) -> Set[str]:
    """The decimals written in the settings pages and files, as written."""
    values: Set[str] = set()
    paths = [os.path.join(root, page) for page in SETTINGS_PAGES]
    for pattern in SETTINGS_FILES:
        paths += glob.glob(os.path.join(root, pattern), recursive=True)
    for path in paths:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        values.update(_decimal_forms(DECIMAL.findall(text)))
    return values


def _decimal_forms(figures: Iterable[str]) -> Set[str]:
    """Each figure and its shortest form (0.50 is the setting 0.5)."""
    forms = set()
    for figure in figures:
        forms.add(figure)
        forms.add(repr(float(figure)))
    return forms


def is_settings_page(path: str, root: str = REPO_ROOT) -> bool:
    return os.path.relpath(os.path.abspath(path), root) in SETTINGS_PAGES


def unsourced_figures(text: str, results: Dict[str, dict],
                      settings: Iterable[str] = ()) -> List[str]:
    """The decimal figures of a page's prose and tables that are neither a setting nor held by
    an entry of the results file to the figure's own precision, in the page's order."""
    known = known_figures(results)
    settings = set(settings)
    missing = []
    for figure in DECIMAL.findall(prose(text)):
        if figure in settings or repr(float(figure)) in settings:
            continue
        digits = len(figure.split(".")[1])
        if not any(round(value, digits) == float(figure) for value in known):
            missing.append(figure)
    return missing
