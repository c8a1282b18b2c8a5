"""Exported .tflite files run by the clients that ship them to devices: MediaPipe Tasks'
ObjectDetector (and the LiteRT Task Library when it loads here) read the file's metadata,
its label file and its outputs with no code from this package, and must find the
package Detector's detections on the same file.

The clients live in their own environment (.venv-clients, made by `make test`): MediaPipe
pins absl-py 2 and tflite-support protobuf 3, which the package's dependencies exclude.
"""

import io
import json
import os
import subprocess
import zipfile

import numpy as np
import pytest
from PIL import Image

from helpers import (CLIENTS_PYTHON, REPO_ROOT, confident_model, keras_seeded, python,
                     synthetic_images)
from efficientdet_keras.data.synthetic import write_synthetic_dataset
from efficientdet_keras.exporters import tflite, tflite_metadata
from efficientdet_keras.inference.detector import Detector

pytest.importorskip("ai_edge_litert", reason="ai-edge-litert (the tflite extra) is not installed")

CLIENT_SCRIPTS = os.path.join(REPO_ROOT, "tests", "clients")
LABEL_MAP = {1: "cat", 2: "dog"}
SIZE = 128


def client_available(script: str) -> bool:
    """Whether the client script's imports load (`--check` stops right after them)."""
    if not os.path.exists(CLIENTS_PYTHON):
        return False
    probe = subprocess.run([CLIENTS_PYTHON, os.path.join(CLIENT_SCRIPTS, script), "--check"],
                           capture_output=True)
    return probe.returncode == 0


# (client script, the module it needs): MediaPipe Tasks and the LiteRT Task Library.
CLIENTS = [pytest.param(script, marks=pytest.mark.skipif(
    not client_available(script), reason="%s is not installed in %s (make test installs it "
    "from tests/clients/requirements.txt)" % (module, CLIENTS_PYTHON)), id=module)
    for script, module in [("mediapipe_detect.py", "mediapipe"),
                           ("task_library_detect.py", "tflite_support")]]


def run_client(script: str, model_path: str, image_paths):
    result = subprocess.run([CLIENTS_PYTHON, os.path.join(CLIENT_SCRIPTS, script), model_path,
                             *image_paths], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("clients")


@pytest.fixture(scope="module")
def images(workdir):
    """Square test images at the input size (no resizing by either side), as PNG files."""
    arrays = synthetic_images(3, SIZE, SIZE, seed=21)
    paths = []
    for i, image in enumerate(arrays):
        paths.append(str(workdir / ("image%d.png" % i)))
        Image.fromarray(image).save(paths[-1])
    return arrays, paths


@pytest.fixture(scope="module")
def calibration_data(workdir):
    return write_synthetic_dataset(str(workdir / "data"), num_train=1, num_val=8,
                                   image_size=(SIZE, SIZE), seed=3).val_tfrecord


@pytest.fixture(scope="module", params=["efficientdet-lite0", "efficientdet-d0"])
def exported(request, workdir, calibration_data):
    """{variant: .tflite path} of one confident model: float32, float16, int8 (uint8 input)
    and, for Lite0, float32 with a float32 input."""
    name = request.param
    with keras_seeded(0):  # One model, whatever ran before: the int8 figures stay put.
        model = confident_model(name, SIZE, label_map=dict(LABEL_MAP))
    variants = [("float32", "uint8"), ("float16", "uint8"), ("int8", "uint8")]
    if name == "efficientdet-lite0":
        variants.append(("float32", "float32"))
    paths = {}
    for quantization, input_type in variants:
        key = "%s-%s-input" % (quantization, input_type)
        paths[key] = tflite.export_tflite(
            model, str(workdir / ("%s-%s.tflite" % (name, key))), quantization,
            input_type=input_type, representative_data=calibration_data,
            num_calibration_images=8)
    return name, model, paths


def package_detections(path, image):
    result = Detector(path).detect(image)
    return [{"box": box.tolist(), "score": float(score), "class_id": int(class_id)}
            for box, score, class_id in zip(result.boxes, result.scores, result.class_ids)]


def as_whole_pixels(box):
    """A box as the clients report it: origin and size each truncated to whole pixels, so
    the far edges of a float box can move by up to 2 px."""
    ymin, xmin, ymax, xmax = box
    top, left = int(ymin), int(xmin)
    return [top, left, top + int(ymax - ymin), left + int(xmax - xmin)]


def assert_same_detections(client_rows, package_rows, label_lines, what):
    """Same number, classes and scores; boxes within 1 px of the package's boxes in whole
    pixels (1 px: a float edge next to a whole number may truncate either way)."""
    assert len(client_rows) == len(package_rows) > 0, (what, len(client_rows),
                                                         len(package_rows))
    unmatched = []
    for row in client_rows:
        class_id = label_lines.index(row["name"]) + 1
        matches = [p for p in package_rows if p["class_id"] == class_id
                   and abs(p["score"] - row["score"]) < 1e-5
                   and np.max(np.abs(np.subtract(as_whole_pixels(p["box"]), row["box"]))) <= 1]
        if not matches:
            unmatched.append(row)
    assert not unmatched, (what, unmatched[:3])


@pytest.mark.parametrize("client", CLIENTS)
def test_client_object_detector_finds_the_detectors_detections(client, exported, images):
    name, model, paths = exported
    arrays, image_paths = images
    lines = tflite_metadata.label_lines(model.config)
    assert lines[:3] == ["cat", "dog", "class_3"]
    for key, path in paths.items():
        found = run_client(client, path, image_paths)
        for image, rows in zip(arrays, found):
            assert_same_detections(rows, package_detections(path, image), lines,
                                   "%s %s" % (name, key))
        names = {row["name"] for rows in found for row in rows}
        assert "cat" in names, (key, names)  # The confident class, named from the label file.


def test_int8_boxes_are_clipped_and_close_to_the_float_files(exported, images):
    """The int8 file lets the op decode raw codes; its boxes are clipped inside the file,
    its scores pass the export's int8 check and its best box lands where float32's does."""
    from efficientdet_keras.exporters import tflite_parity
    name, model, paths = exported
    arrays, _ = images
    check, = tflite_parity.standard_checks(model, paths["int8-uint8-input"], arrays)
    assert check.passed, check.summary
    for image in arrays:
        int8 = package_detections(paths["int8-uint8-input"], image)
        float32 = package_detections(paths["float32-uint8-input"], image)
        boxes = np.array([row["box"] for row in int8])
        assert boxes.min() >= 0.0 and boxes.max() <= SIZE, (name, boxes.min(), boxes.max())
        best = max(float32, key=lambda row: row["score"])
        overlaps = [iou(best["box"], row["box"]) for row in int8
                    if row["class_id"] == best["class_id"]]
        assert max(overlaps) > 0.5, (name, best, int8[:3])


def iou(a, b):
    ymin, xmin = max(a[0], b[0]), max(a[1], b[1])
    ymax, xmax = min(a[2], b[2]), min(a[3], b[3])
    inter = max(0.0, ymax - ymin) * max(0.0, xmax - xmin)
    area = lambda r: (r[2] - r[0]) * (r[3] - r[1])  # noqa: E731
    return inter / (area(a) + area(b) - inter)


def test_every_detection_file_carries_metadata_and_its_label_file(exported):
    from tensorflow.lite.python import schema_py_generated as schema
    _, model, paths = exported
    for key, path in paths.items():
        with open(path, "rb") as f:
            data = f.read()
        flatbuffer = schema.ModelT.InitFromPackedBuf(bytearray(data), 0)
        names = [m.name.decode() for m in flatbuffer.metadata]
        assert tflite_metadata.METADATA_NAME in names, (key, names)
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            labels = archive.read(tflite_metadata.LABEL_FILE_NAME).decode().splitlines()
        assert labels == ["cat", "dog", "class_3", "class_4"], (key, labels)


def test_label_map_beyond_num_classes_is_one_clear_line(tmp_path):
    """The label file has one line per class: a map naming more classes stops the export
    before any work, in one line naming label_map."""
    from helpers import tiny_config
    config = tiny_config("efficientdet-lite0", image_size=64, label_map=dict(LABEL_MAP))
    config.save_yaml(str(tmp_path))
    result = subprocess.run(
        [python(), "-m", "efficientdet_keras.cli.export", "--model_dir=%s" % tmp_path,
         "--format=tflite", "--export_dir=%s" % (tmp_path / "out"), "--hparams=num_classes=1"],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stderr[-2000:]
    assert "label_map names class id 2 but num_classes is 1" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()
