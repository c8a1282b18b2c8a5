"""MkDocs hook: the tables of measured figures, written into the pages from
benchmarks/results.json.

A page marks where a table goes:

    <!-- results: choose_a_model -->
    ...the table, written by `make docs`...
    <!-- end results -->

`make docs` (generated_pages.py) rewrites what stands between the two lines from the results
file, with a line naming the run (date, commit, command, machine) and the source of any
published figure; the comments do not show on the site or on the repository's web page. The
build warns (a strict build fails) when a page's table differs from what the file gives.
"""

import logging
import os
import re
import sys
from typing import Callable, Dict, List

HOOKS_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HOOKS_DIR))
if REPO_ROOT not in sys.path:  # The checkout's benchmarks package, which is not installed.
    sys.path.insert(0, REPO_ROOT)
from benchmarks.results import load_results  # noqa: E402

REGION = re.compile(r"(<!-- results: (\w+) -->\n)(.*?)(<!-- end results -->)", re.S)
STALE_MESSAGE = "%s: the table %r differs from benchmarks/results.json: run make docs"


def _number(value, digits: int) -> str:
    return "%.*f" % (digits, value)


def measured_by(entry: dict) -> str:
    return "Measured %s at commit `%s` on %s with `%s`." % (
        entry["date"], entry["commit"], entry["machine"], entry["command"])


def choose_a_model(results: Dict[str, dict]) -> str:
    """Each released detector: published COCO AP and FLOPs beside the size and CPU latency
    measured here."""
    measured = results["released_models_cpu"]
    published_entry = results["published_coco_ap"]
    published = {row["model"]: row for row in published_entry["rows"]}
    lines = ["| model | input | COCO AP test-dev / val | FLOPs (B) | parameters (M) | "
             "float32 weights (MB) | network, batch 1 (ms) |",
             "|---|---|---|---|---|---|---|"]
    for row in measured["rows"]:
        paper = published.get(row["model"], {})
        ap = ("%s / %s" % (_number(paper["ap_test_dev"], 1), _number(paper["ap_val"], 1))
              if paper else "–")
        flops = "%g" % paper["flops_b"] if paper else "–"
        lines.append("| `%s` | %s | %s | %s | %s | %s | %s |" % (
            row["model"], row["image_size"], ap, flops, _number(row["params_m"], 2),
            _number(row["float32_mb"], 1), _number(row["latency_ms"], 1)))
    return "\n".join(lines) + "\n\nAP and FLOPs: published, from %s. %s\n" % (
        published_entry["source"], measured_by(measured))


README_FORMAT_LABELS = {
    "saved_model": "SavedModel (TF Serving), soft-NMS", "onnx": "ONNX Runtime, hard NMS",
    "openvino": "OpenVINO, soft-NMS", "openvino_fp16": "OpenVINO, float16 weights",
    "openvino_int8": "OpenVINO int8 (NNCF)",
    "tflite": "`.tflite` float32, the op's NMS", "tflite_fp16": "`.tflite` float16",
    "tflite_int8": "`.tflite` int8"}
# Said beside an int8 .tflite row whose boxes collapsed (AP 0).
COLLAPSED_INT8 = (" (its boxes collapsed: [troubleshooting]"
                  "(docs/guides/troubleshooting.md#my-int8-tflite-is-much-less-accurate))")


def formats_readme(results: Dict[str, dict]) -> str:
    """The front page's format table (its link to the benchmarks page names the run)."""
    lines = ["| format | AP | AP50 | latency, batch 1 | images/s, batch 8 | size |",
             "|---|---|---|---|---|---|"]
    for row in results["format_table_demo"]["rows"]:
        label = README_FORMAT_LABELS[row["format"]]
        if row["format"] == "tflite_int8" and row["ap"] == 0:
            label += COLLAPSED_INT8
        lines.append("| %s | %.3f | %.3f | %.1f ms | %.1f | %.1f MB |" % (
            label, row["ap"], row["ap50"], row["latency_ms"], row["images_per_second"],
            row["size_mb"]))
    return "\n".join(lines) + "\n"


def format_benchmark_table(entry_name: str) -> Callable[[Dict[str, dict]], str]:
    """The benchmarks page's table of one `bench.py --what=formats` entry: every column, the
    speed-up over the SavedModel, and the run that measured it."""
    def table(results: Dict[str, dict]) -> str:
        entry = results[entry_name]
        saved_model = {row["format"]: row for row in entry["rows"]}["saved_model"]
        lines = ["| format | AP | AP50 | latency ms | x SavedModel | images/s | size MB | NMS |",
                 "|---|---|---|---|---|---|---|---|"]
        for row in entry["rows"]:
            lines.append("| %s | %.4f | %.4f | %.1f | %.2f | %.1f | %.1f | %s |" % (
                row["format"], row["ap"], row["ap50"], row["latency_ms"],
                saved_model["latency_ms"] / row["latency_ms"], row["images_per_second"],
                row["size_mb"], row["nms"]))
        return "\n".join(lines) + "\n\n" + measured_by(entry) + "\n"
    return table


def openvino_int8_choices(results: Dict[str, dict]) -> str:
    """AP of the OpenVINO IR in float32 and quantized with each NNCF choice."""
    entry = results["openvino_int8_choices"]
    lines = ["| weights and activations | NNCF preset | prediction convolutions | AP | AP50 |",
             "|---|---|---|---|---|"]
    for row in entry["rows"]:
        if row["float_predictions"] is None:
            lines.append("| float32 | – | float32 | %.4f | %.4f |" % (row["ap"], row["ap50"]))
            continue
        lines.append("| int8 | `%s` | %s | %.4f | %.4f |" % (
            row["preset"], "float32" if row["float_predictions"] else "int8", row["ap"],
            row["ap50"]))
    return "\n".join(lines) + "\n\n" + measured_by(entry) + "\n"


def resize_modes_readme(results: Dict[str, dict]) -> str:
    """The front page's letterboxed against stretched frames: AP on 640x480 frames."""
    rows = results["resize_modes_demo"]["rows"]
    labels = [(rows[0], "demo, trained letterboxed on square images"),
              (rows[2], "+ 80 steps on 640x480 frames, `resize_mode: stretch`")]
    lines = ["| model | letterboxed frames | stretched frames |", "|---|---|---|"]
    for row, label in labels:
        lines.append("| %s | %.3f | %.3f |" % (label, row["letterbox_640x480"][0],
                                               row["stretch_640x480"][0]))
    return "\n".join(lines) + "\n"


TABLES: Dict[str, Callable[[Dict[str, dict]], str]] = {
    "choose_a_model": choose_a_model, "formats_readme": formats_readme,
    "resize_modes_readme": resize_modes_readme,
    "formats_demo": format_benchmark_table("format_table_demo"),
    "formats_d0_512": format_benchmark_table("format_table_d0_512"),
    "openvino_int8_choices": openvino_int8_choices}


def recorded_table(entry: dict) -> str:
    """The table of an entry that keeps it as the page shows it: `columns` (the headers) and
    `rows` (lists of cells, text or numbers)."""
    columns = entry["columns"]
    lines = ["| %s |" % " | ".join(columns), "|%s" % ("---|" * len(columns))]
    for row in entry["rows"]:
        if len(row) != len(columns):
            raise ValueError("a row of %d cells under %d columns: %r" % (
                len(row), len(columns), row))
        lines.append("| %s |" % " | ".join(str(cell) for cell in row))
    return "\n".join(lines) + "\n"


def table_text(name: str, results: Dict[str, dict]) -> str:
    """Region `name`'s table: one of TABLES, or an entry's recorded table."""
    if name in TABLES:
        return TABLES[name](results)
    if "columns" in results.get(name, {}):
        return recorded_table(results[name])
    raise ValueError("no results table %r (known: %s, or an entry with columns)" % (
        name, ", ".join(TABLES)))


def render_regions(text: str, results: Dict[str, dict]) -> str:
    """`text` with every results region rewritten from `results`.

    Raises:
      ValueError: a region names a table this module does not know.
    """
    def replace(match):
        return match.group(1) + table_text(match.group(2), results) + match.group(4)
    return REGION.sub(replace, text)


def stale_tables(text: str, results: Dict[str, dict]) -> List[str]:
    """The names of the regions of `text` whose table is not the results file's."""
    current = {m.group(2): m.group(3) for m in REGION.finditer(render_regions(text, results))}
    return [m.group(2) for m in REGION.finditer(text) if current[m.group(2)] != m.group(3)]


def page_paths() -> List[str]:
    """The README and every Markdown page under docs/ (the hooks' own folder aside)."""
    paths = [os.path.join(REPO_ROOT, "README.md")]
    docs = os.path.dirname(HOOKS_DIR)
    for root, dirs, names in os.walk(docs):
        dirs[:] = sorted(d for d in dirs if os.path.join(root, d) != HOOKS_DIR)
        paths += [os.path.join(root, n) for n in sorted(names) if n.endswith(".md")]
    return paths


def write_tables() -> List[str]:
    """Rewrites the results regions of every page; returns the pages it changed."""
    results = load_results()
    changed = []
    for path in page_paths():
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if not REGION.search(text):
            continue
        rendered = render_regions(text, results)
        if rendered != text:
            with open(path, "w", encoding="utf-8") as f:
                f.write(rendered)
            changed.append(os.path.relpath(path, REPO_ROOT))
    return changed


def on_page_markdown(markdown, page, config, files):
    """MkDocs hook: warns when a page's table is not the results file's."""
    for name in stale_tables(markdown, load_results()):
        logging.getLogger("mkdocs.hooks").warning(STALE_MESSAGE, page.file.src_path, name)
    return markdown
