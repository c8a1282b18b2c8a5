"""efficientdet-bench --formats: one model exported to each format, scored, timed and sized
(workflows/compare_formats.py), on a small confident D0 whose validation data is labelled with its
own detections, so that AP is far from 0 and a format that loses boxes shows it."""

import csv
import os
import subprocess

import pytest

from helpers import confident_model, keras_seeded, python, write_self_labelled_data
from efficientdet_keras import save_ckpt
from efficientdet_keras.workflows.compare_formats import FORMATS, TABLE_COLUMNS, check_formats

pytest.importorskip("openvino", reason="openvino (the openvino extra) is not installed")
pytest.importorskip("onnxruntime", reason="onnxruntime (the onnx extra) is not installed")
pytest.importorskip("ai_edge_litert", reason="ai-edge-litert (the tflite extra) is not installed")


def run_bench(*args):
    return subprocess.run([python(), "-m", "efficientdet_keras.cli.bench", *args],
                          capture_output=True, text=True, timeout=1800)


@pytest.mark.quick
def test_formats_are_checked_in_one_line():
    assert check_formats(["all"]) == list(FORMATS)
    assert check_formats(["tflite", "onnx"]) == ["onnx", "tflite"]  # In table order.
    with pytest.raises(ValueError, match="unknown format tensorrt: choose from saved_model"):
        check_formats(["onnx", "tensorrt"])
    result = run_bench("--model=nowhere", "--formats=tensorrt")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1].startswith(
        "efficientdet-bench: formats: unknown format tensorrt")
    # int8 files calibrate on TFRecords: asked for by name without them, refused at once.
    result = run_bench("--model=nowhere", "--formats=onnx,openvino_int8,tflite_int8",
                       "--val_json_file=val.json", "--image_dir=images")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == (
        "efficientdet-bench: formats: openvino_int8, tflite_int8 calibrate on TFRecords: "
        "give --val_file_pattern (val_file_pattern= in Python)")
    # With "all" they are left out in one line, before the model loads (here: fails to).
    result = run_bench("--model=nowhere", "--formats=all", "--val_json_file=val.json",
                       "--image_dir=images")
    assert result.stdout.splitlines()[0] == (
        "Skipping openvino_int8, tflite_int8: int8 calibration reads TFRecords "
        "(--val_file_pattern)"), result.stdout
    assert result.returncode == 1 and "Traceback" not in result.stderr


@pytest.mark.slow  # The benchmark's own command; each format's export is tested on its own.
def test_one_command_gives_the_table_of_every_format(tmp_path):
    with keras_seeded(7):
        model = confident_model("efficientdet-d0", 128)
    model_dir = tmp_path / "run"
    model_dir.mkdir()
    model.config.save_yaml(str(model_dir))
    save_ckpt(model, str(model_dir / "ckpt-1"))
    records = write_self_labelled_data(model, str(tmp_path / "data"), 128, 128)
    export_dir = tmp_path / "formats"
    results = tmp_path / "formats.csv"
    result = run_bench("--model=%s" % model_dir,
                       "--formats=saved_model,onnx,openvino,openvino_int8,tflite_int8",
                       "--val_file_pattern=%s" % records, "--export_dir=%s" % export_dir,
                       "--results_csv=%s" % results, "--runs=2", "--warmup=1",
                       "--throughput_batch=2", "--num_threads=2")
    assert result.returncode == 0, result.stderr[-3000:]
    print(result.stdout)
    with open(results) as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == TABLE_COLUMNS
    by_format = {row["format"]: row for row in rows}
    assert list(by_format) == ["saved_model", "onnx", "openvino", "openvino_int8", "tflite_int8"]
    ap = {name: float(row["AP"]) for name, row in by_format.items()}
    assert ap["saved_model"] > 0.3, rows
    # OpenVINO runs the same soft-NMS graph on images of the input size (no rounding): the
    # checkpoint's AP. ONNX runs hard NMS, the int8 .tflite the op's NMS on int8 scores: the
    # ground truth, soft-NMS's own boxes, has overlaps that hard NMS drops.
    assert ap["openvino"] == pytest.approx(ap["saved_model"], abs=2e-4), rows
    assert 0.2 < ap["onnx"] < ap["saved_model"] - 0.1, rows
    assert 0.2 < ap["tflite_int8"] < ap["saved_model"] - 0.1, rows
    assert 0.3 < ap["openvino_int8"] < ap["saved_model"], rows
    assert by_format["openvino_int8"]["nms"] == "gaussian"
    assert float(by_format["openvino_int8"]["size_mb"]) < 0.5 * float(
        by_format["openvino"]["size_mb"]), rows
    assert by_format["saved_model"]["threads"] == "0" and by_format["onnx"]["threads"] == "2"
    assert by_format["openvino"]["nms"] == "gaussian" and by_format["onnx"]["nms"] == "hard"
    assert by_format["tflite_int8"]["nms"] == "op global"
    for row in rows:
        assert float(row["latency_ms"]) > 0 and float(row["images_per_second"]) > 0
    tflite = export_dir / "tflite_int8" / "model.tflite"
    assert float(by_format["tflite_int8"]["size_mb"]) == pytest.approx(
        os.path.getsize(tflite) / 1e6, abs=0.01)
    xml = export_dir / "openvino" / "model.xml"
    assert float(by_format["openvino"]["size_mb"]) == pytest.approx(
        (os.path.getsize(xml) + os.path.getsize(export_dir / "openvino" / "model.bin")) / 1e6,
        abs=0.01)
    # The printed table: a header, one line per format, the note on what was timed.
    lines = result.stdout.strip().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("format "))
    rows_printed = lines[header + 1:header + 1 + len(by_format)]
    assert [line.split()[0] for line in rows_printed] == list(by_format)
    assert lines[header + 1].split()[4] == "1.00"  # The SavedModel against itself.
