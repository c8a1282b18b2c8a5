"""benchmarks/results.json and the docs tables written from it: every entry says where its
figures come from, every table on a page is the file's, and the measured networks are the
published ones."""

import json
import os
import subprocess

import pytest

from helpers import REPO_ROOT, docs_hook, python
from benchmarks.results import load_results, missing_fields, record


@pytest.mark.quick
def test_every_entry_names_its_run_or_its_source():
    results = load_results()
    assert {"released_models_cpu", "published_coco_ap"} <= set(results)
    for name, entry in results.items():
        assert not missing_fields(entry), (name, missing_fields(entry))
        assert "+changes" not in entry.get("commit", ""), \
            "%s was measured on uncommitted code: measure a commit" % name


@pytest.mark.quick
def test_every_results_table_on_a_page_is_the_file_s():
    hook = docs_hook("results_tables")
    results = load_results()
    regions = 0
    for path in hook.page_paths():
        with open(path, encoding="utf-8") as f:
            text = f.read()
        regions += len(hook.REGION.findall(text))
        assert hook.stale_tables(text, results) == [], \
            "%s differs from benchmarks/results.json: run make docs" % path
    assert regions >= 1


@pytest.mark.quick
def test_a_changed_figure_makes_the_table_stale_and_make_docs_rewrites_it():
    hook = docs_hook("results_tables")
    results = load_results()
    page = "Intro\n<!-- results: choose_a_model -->\nold\n<!-- end results -->\nAfter\n"
    assert hook.stale_tables(page, results) == ["choose_a_model"]
    written = hook.render_regions(page, results)
    assert written.startswith("Intro\n<!-- results: choose_a_model -->\n| model |")
    assert written.endswith("<!-- end results -->\nAfter\n")
    assert hook.stale_tables(written, results) == []
    results["released_models_cpu"]["rows"][0]["latency_ms"] += 1.0
    assert hook.stale_tables(written, results) == ["choose_a_model"]


def pages():
    return [os.path.relpath(path, REPO_ROOT) for path in docs_hook("results_tables").page_paths()]


@pytest.mark.quick
@pytest.mark.parametrize("page", pages())
def test_no_page_states_a_measured_figure_the_results_file_lacks(page):
    figures = docs_hook("page_figures")
    if figures.is_settings_page(page):
        pytest.skip("%s writes out settings, not measurements" % page)
    with open(os.path.join(REPO_ROOT, page), encoding="utf-8") as f:
        missing = figures.unsourced_figures(f.read(), load_results(), figures.settings_values())
    assert missing == [], (
        "%s states figures that benchmarks/results.json does not hold: %s. A measured figure "
        "comes from a results entry (date, commit, command, machine); a setting is written in "
        "the config, a shipped YAML file, or the package's or the tests' code."
        % (page, ", ".join(missing)))


@pytest.mark.quick
def test_a_figure_is_sourced_only_at_its_own_precision():
    figures = docs_hook("page_figures")
    results = {"run": {"rows": [{"ap": 0.7370, "ms": [44.04, 3]}]},
               "page": {"columns": ["x"], "rows": [["12.5 min (3 runs)"]],
                        "figures": {"summed": "105.5 min"}}}
    page = ("AP 0.737 (0.74), 44.0 ms, 12.5 and 105.5 min; Python 3.10, TensorFlow >= 2.16 and "
            "ONNX Runtime 1.18 are versions.\nBut 0.7371 and 44.1 ms are not in it, nor 12.6.\n"
            "```sh\nrun --score=0.55\n```\nInline `--score=0.65` is code. <!-- 0.91 -->\n"
            "A score of 0.3 is a setting, 0.35 is not.\n")
    assert figures.unsourced_figures(page, results, settings={"0.3"}) == [
        "0.7371", "44.1", "12.6", "0.35"]


@pytest.mark.quick
def test_settings_are_the_decimals_the_package_writes_its_settings_with():
    figures = docs_hook("page_figures")
    settings = figures.settings_values()
    # The demo preset's EMA decay, the D0 default learning rate and a score threshold.
    assert {"0.99", "0.08", "0.3"} <= settings
    measured_ap = "%.4f" % load_results()["format_table_demo"]["rows"][0]["ap"]
    assert measured_ap not in settings  # A measured AP is not written in the code.


@pytest.mark.quick
def test_an_unknown_table_is_an_error_naming_it():
    hook = docs_hook("results_tables")
    with pytest.raises(ValueError, match="no results table 'nope'"):
        hook.render_regions("<!-- results: nope -->\n<!-- end results -->", load_results())


@pytest.mark.quick
def test_the_measured_networks_have_the_published_parameter_counts():
    """The trainable parameters counted in each built network match the published count to
    0.5% (the published counts are rounded; D7x's 77.0 M is 77.15 M counted): the package
    builds the architectures the released checkpoints are."""
    results = load_results()
    published = {r["model"]: r["params_m"] for r in results["published_coco_ap"]["rows"]}
    measured = {r["model"]: r["params_m"] for r in results["released_models_cpu"]["rows"]}
    assert set(published) <= set(measured)
    for model, count in published.items():
        assert abs(measured[model] - count) <= max(0.06, 0.005 * count), (
            model, measured[model], count)


@pytest.mark.quick
def test_record_writes_date_commit_command_and_machine(tmp_path):
    path = str(tmp_path / "results.json")
    with open(path, "w") as f:
        json.dump({"kept": {"source": "a paper", "rows": [{"x": 1}]}}, f)
    entry = record("timing", [{"model": "m", "ms": 1.5}], "a test machine", path)
    saved = load_results(path)
    assert saved["kept"] == {"source": "a paper", "rows": [{"x": 1}]}
    assert saved["timing"] == entry and not missing_fields(entry)
    assert entry["machine"] == "a test machine" and entry["rows"] == [{"model": "m", "ms": 1.5}]
    assert len(entry["date"]) == 10 and entry["command"].startswith("python ")
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT,
                          capture_output=True, text=True)
    if head.returncode == 0:  # A checkout: the entry names its commit.
        assert entry["commit"].startswith(head.stdout.strip())
    assert missing_fields({"date": "2026-01-01", "rows": []}) == [
        "commit", "command", "machine", "rows"]


def test_bench_models_records_its_rows(tmp_path):
    path = tmp_path / "results.json"
    result = subprocess.run(
        [python(), os.path.join(REPO_ROOT, "benchmarks", "bench.py"), "--what=models",
         "--models=efficientdet-lite0", "--repeats=1", "--results_file=%s" % path],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    entry = json.loads(path.read_text())["released_models_cpu"]
    assert not missing_fields(entry)
    [row] = entry["rows"]
    assert row["model"] == "efficientdet-lite0" and row["image_size"] == "320x320"
    assert 3.0 < row["params_m"] < 3.5 and row["float32_mb"] > 4 * row["params_m"]
    assert row["latency_ms"] > 0
    assert "efficientdet-lite0" in result.stdout and "Recorded as" in result.stdout


@pytest.mark.quick
def test_the_format_tables_show_each_row_with_its_speed_up_and_run():
    from benchmarks.formats import result_rows
    from efficientdet_keras.workflows.compare_formats import FormatRow
    hook = docs_hook("results_tables")
    rows = result_rows([
        FormatRow("saved_model", "sm", 0.51023, 0.65412, 44.04, 27.5, 18.24, 0, "gaussian"),
        FormatRow("openvino_int8", "x", 0.5, 0.64, 22.0, 60.0, 5.0, 2, "gaussian"),
        FormatRow("tflite_int8", "t", 0.0, 0.0, 30.9, 51.8, 5.2, 2, "op global")])
    assert rows[0] == {"format": "saved_model", "ap": 0.5102, "ap50": 0.6541, "latency_ms": 44.0,
                       "images_per_second": 27.5, "size_mb": 18.2, "threads": 0,
                       "nms": "soft (gaussian)"}
    assert rows[2]["nms"] == "the op's fast NMS"
    run = {"date": "2026-11-29", "commit": "abc1234", "command": "python benchmarks/bench.py "
           "--what=formats", "machine": "a test machine", "rows": rows}
    table = hook.TABLES["formats_demo"]({"format_table_demo": run}).splitlines()
    assert table[2] == ("| saved_model | 0.5102 | 0.6541 | 44.0 | 1.00 | 27.5 | 18.2 | "
                        "soft (gaussian) |")
    assert table[3].startswith("| openvino_int8 | 0.5000 | 0.6400 | 22.0 | 2.00 | 60.0 |")
    assert table[-1] == ("Measured 2026-11-29 at commit `abc1234` on a test machine with "
                         "`python benchmarks/bench.py --what=formats`.")
    # The front page names the int8 .tflite's collapse only when its AP is 0.
    readme = hook.formats_readme({"format_table_demo": run})
    assert "| OpenVINO int8 (NNCF) | 0.500 |" in readme
    assert "`.tflite` int8 (its boxes collapsed" in readme
    rows[2].update(ap=0.64, ap50=0.84)
    assert "collapsed" not in hook.formats_readme({"format_table_demo": run})
