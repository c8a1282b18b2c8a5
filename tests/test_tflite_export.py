"""TFLite export (efficientdet_keras/exporters/tflite.py) and its parity checks (tflite_parity.py).

The models are untrained, so they are first made "confident": one forward pass in
training mode with batch_norm_momentum 0 sets the moving statistics of the BiFPN and head
BatchNorms to the statistics of real-looking images (otherwise random weights give
near-constant outputs), the prediction kernels are scaled to a realistic output range,
and the class-predict bias of class 1 is raised so that a few anchors score above 0.3.
The outputs then vary from anchor to anchor, which the checks need.
"""

import json
import os
import re
import subprocess

import numpy as np
import pytest

from helpers import (FAST, confident_model, keras_seeded, overlapping_pairs, python,
                     score_twice, synthetic_images, tiny_config)
from efficientdet_keras import EfficientDetNet, save_ckpt
from efficientdet_keras.data.synthetic import write_synthetic_dataset
from efficientdet_keras.exporters import tflite, tflite_parity

pytest.importorskip("ai_edge_litert", reason="ai-edge-litert (the tflite extra) is not installed")

NON_SQUARE = (128, 192)
@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("tflite")


@pytest.fixture(scope="module")
def d0_raw(workdir):
    """D0 at a non-square size, with its float32 raw .tflite (seeded: the same model in
    every run)."""
    with keras_seeded(0):
        model = confident_model("efficientdet-d0", NON_SQUARE)
    path = tflite.export_tflite(model, str(workdir / "d0-raw.tflite"), outputs="raw")
    return model, path


@pytest.fixture(scope="module")
def lite0(workdir):
    """Lite0 at 128 px, with its float32 detections .tflite."""
    model = confident_model("efficientdet-lite0", 128)
    path = tflite.export_tflite(model, str(workdir / "lite0.tflite"))
    return model, path


@pytest.fixture(scope="module")
def data(workdir):
    return write_synthetic_dataset(str(workdir / "data"), num_train=1, num_val=8,
                                   image_size=(96, 160), seed=3)


def test_float32_raw_outputs_equal_keras_at_a_non_square_size(d0_raw):
    model, path = d0_raw
    with open(tflite.sidecar_path(path)) as f:
        info = json.load(f)
    assert info == dict(info, image_size=list(NON_SQUARE), outputs="raw", quantization="float32",
                        input_type="uint8", num_classes=4, model_name="efficientdet-d0",
                        anchor_scale=4.0, min_level=3, max_level=7, max_detections=25)
    from ai_edge_litert.interpreter import Interpreter
    details = Interpreter(path).get_signature_runner().get_input_details()["images"]
    assert details["dtype"] == np.uint8 and list(details["shape"]) == [1, *NON_SQUARE, 3]

    images = synthetic_images(2, 100, 120)  # Letterboxed with padding on the right.
    result = tflite_parity.raw_parity(model, path, images)
    assert result.passed, result.summary
    # The outputs really vary (a constant network would pass trivially) ...
    letterboxed, _ = tflite_parity._runner(path).letterbox(images[0])
    assert np.std(tflite_parity.keras_raw_outputs(model, letterboxed)["class_outputs"]) > 0.1
    # ... and the check fails when the weights differ by 1e-3.
    bias = model.box_net.predict.bias
    bias.assign_add(np.full(bias.shape, 1e-3, np.float32))
    try:
        result = tflite_parity.raw_parity(model, path, images[:1])
    finally:
        bias.assign_sub(np.full(bias.shape, 1e-3, np.float32))
    assert not result.passed and "FAILED" in result.summary


def test_detections_match_the_saved_model(lite0):
    model, path = lite0
    from efficientdet_keras.inference.tflite_runner import TFLiteRunner
    detector = TFLiteRunner(path)
    outputs = detector.run(detector.letterbox(synthetic_images(1, 128, 128)[0])[0])
    assert sorted(outputs) == sorted(tflite.DETECTION_OUTPUTS)
    assert outputs["detection_boxes"].shape == (1, 25, 4)
    result = tflite_parity.detection_parity(model, path, synthetic_images(3, 96, 160))
    print(result.summary)
    assert result.passed, result.summary
    assert result.measured["compared"] >= 3, result.summary  # Scores above 0.3 were compared.


@pytest.mark.quick
def test_float16_halves_the_file_and_stays_close_to_float32(lite0, workdir):
    model, float_path = lite0
    path = tflite.export_tflite(model, str(workdir / "lite0-fp16.tflite"), quantization="FP16",
                                outputs="raw")
    assert os.path.getsize(path) < 0.6 * os.path.getsize(float_path)  # float16 weights.
    result, = tflite_parity.standard_checks(model, path, synthetic_images(2, 96, 160))
    print(result.summary)
    assert result.name == "float16_error" and result.passed, result.summary


def test_int8_detections_keep_their_boxes(lite0, data, workdir):
    """An int8 detections file puts its boxes where float32 does: its check counts the
    detections without a float32 box of their class at IoU >= 0.5 (scores alone do not show
    a file whose boxes all come out 0)."""
    model, _ = lite0
    path = tflite.export_tflite(model, str(workdir / "lite0-int8.tflite"), quantization="int8",
                                representative_data=data.val_tfrecord, num_calibration_images=8)
    result, = tflite_parity.standard_checks(model, path, synthetic_images(3, 96, 160))
    print(result.summary)
    assert result.name == "int8_error" and result.passed, result.summary
    assert result.measured["detections"] >= 10, result.summary
    assert result.measured["misplaced"] <= 0.25 * result.measured["detections"], result.summary
    from efficientdet_keras.inference.tflite_runner import TFLiteRunner
    found = TFLiteRunner(path).detect(synthetic_images(1, 96, 160)[0])
    assert np.all(found["boxes"][:, 2:] > found["boxes"][:, :2]), found


def run_export_tool(*args):
    """efficientdet-export in its own process (the CLI modules each define their flags)."""
    return subprocess.run([python(), "-m", "efficientdet_keras.cli.export", *args],
                          capture_output=True, text=True, timeout=600)


def test_export_cli_int8_with_representative_data(lite0, data, workdir):
    """The command writes <export_dir>/model.tflite and prints the int8 error check, whose
    tolerance (QUANTIZED_SCORE_TOLERANCE) is the one the export guide states."""
    model, float_path = lite0
    model_dir = workdir / "run"
    model_dir.mkdir()
    model.config.save_yaml(str(model_dir))
    save_ckpt(model, str(model_dir / "ckpt-1"))
    export_dir = workdir / "exported"
    flags = ["--model_dir=%s" % model_dir, "--format=tflite", "--export_dir=%s" % export_dir]
    missing = run_export_tool(*flags, "--tflite_quantization=INT8")
    assert missing.returncode == 1 and "--representative_data" in missing.stderr, missing.stderr
    assert "Traceback" not in missing.stderr, missing.stderr
    result = run_export_tool(*flags, "--tflite_quantization=INT8", "--tflite_outputs=raw",
                             "--representative_data=%s" % data.val_tfrecord,
                             "--num_calibration_images=8")
    out = result.stdout
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(r"Parity: int8 vs float32 Keras: .* score tolerance 0.25: ok", out), out
    path = export_dir / "model.tflite"
    assert os.path.getsize(path) < 0.4 * os.path.getsize(float_path)  # int8 weights.
    with open(str(path) + ".json") as f:
        assert json.load(f)["quantization"] == "int8"
    # Quantized, so not equal to float32; but far closer than the +-4 spread of the logits.
    error = float(re.search(r"([0-9.e-]+) \(class_outputs\)", out).group(1))
    assert 1e-4 < error < 1.5, out


@pytest.mark.quick
def test_conversion_prints_no_gradient_warning_and_keeps_the_raw_outputs(tmp_path, caplog):
    """The converter reads a SavedModel saved without gradient functions (they cost half the
    conversion): TensorFlow's warning about them on loading it is not shown, and the file
    still gives the Keras model's outputs."""
    model = EfficientDetNet(config=tiny_config(image_size=64, **FAST))  # Swish: D0's.
    with caplog.at_level("WARNING"):
        path = tflite.export_tflite(model, str(tmp_path / "raw.tflite"), outputs="raw")
    assert not [r for r in caplog.records if "gradient" in r.getMessage()], caplog.text
    result = tflite_parity.raw_parity(model, path, synthetic_images(1, 64, 64))
    assert result.passed, result.summary


def test_tflite_max_detections_is_a_checked_config_key():
    config = tiny_config()
    assert config.tflite_max_detections == 25
    with pytest.raises(ValueError, match="tflite_max_detections must be a positive integer"):
        config.override("tflite_max_detections=0")
    assert 'i: 7 }' in tflite.postprocess_op_attributes(
        config.override("tflite_max_detections=7")).split("max_classes")[0]


@pytest.mark.slow
@pytest.mark.parametrize("model_name", ["efficientdet-lite1", "efficientdet-lite2",
                                        "efficientdet-lite3", "efficientdet-lite3x",
                                        "efficientdet-lite4", "efficientdet-d1",
                                        "efficientdet-d2"])
def test_every_lite_model_and_d1_d2_convert_with_raw_parity(model_name, tmp_path):
    """The other backbones and BiFPN widths (full backbone, one BiFPN cell and head conv)."""
    model = EfficientDetNet(config=tiny_config(model_name, image_size=(128, 96), **FAST))
    model.build_variables()
    path = tflite.export_tflite(model, str(tmp_path / "model.tflite"), outputs="raw")
    result = tflite_parity.raw_parity(model, path, synthetic_images(1, 100, 90))
    assert result.passed, result.summary


def two_class_model(**overrides):
    """A confident Lite0 whose every box scores for two classes (helpers.score_twice)."""
    with keras_seeded(2):
        model = confident_model("efficientdet-lite0", 128, **overrides)
    score_twice(model)
    return model


@pytest.mark.slow
def test_op_options_come_from_the_config(tmp_path):
    """tflite_use_regular_nms: NMS per class, equal to the SavedModel's hard NMS; the
    default fast NMS keeps one class per box, equal to hard NMS across classes;
    tflite_max_classes_per_detection=2 keeps two, so every box then comes twice. The
    parity check compares each file with the SavedModel running the op's own NMS."""
    from efficientdet_keras.inference.tflite_runner import TFLiteRunner
    images = synthetic_images(2, 128, 128, seed=8)
    model = two_class_model(tflite_use_regular_nms=True,
                            nms_configs=dict(method="hard", iou_thresh=0.5))
    regular = tflite.export_tflite(model, str(tmp_path / "regular.tflite"))
    result = tflite_parity.detection_parity(model, regular, images)
    print(result.summary)
    assert result.passed and result.measured["compared"] >= 10, result.summary

    def detections(path, image):
        return TFLiteRunner(path).detect(image)

    model.config.tflite_use_regular_nms = False
    fast = tflite.export_tflite(model, str(tmp_path / "fast.tflite"))
    result = tflite_parity.detection_parity(model, fast, images)
    assert result.passed and result.measured["compared"] >= 10, result.summary
    assert "global NMS" in result.summary
    # Against NMS per class, the fast file misses every box's second class.
    per_class = tflite_parity.detection_parity(
        model, fast, images, reference_detect=tflite_parity.saved_model_detect(model, "hard"))
    assert not per_class.passed, per_class.summary
    model.config.tflite_max_classes_per_detection = 2
    two_classes = tflite.export_tflite(model, str(tmp_path / "two.tflite"))
    result = tflite_parity.detection_parity(model, two_classes, images)
    assert result.passed and result.measured["compared"] >= 10, result.summary
    for image in images:
        assert overlapping_pairs(detections(regular, image)) > 0
        one = detections(fast, image)
        assert overlapping_pairs(one) == 0
        found = detections(two_classes, image)
        # Each box twice, with both classes: every row the op wrote is read.
        assert len(found["scores"]) == 2 * len(one["scores"]), (found, one)
        boxes = [tuple(np.round(box, 3)) for box in found["boxes"]]
        assert len(set(boxes)) == len(boxes) // 2, found
