"""OpenVINO export (export/openvino.py), its parity check (graph_parity.py), the OpenVINO
runner (inference/openvino_runner.py), Detector("model.xml") and efficientdet-eval --openvino.

One D0 at 128 px with the package's default soft-NMS is exported once per module. It is
untrained but made "confident" (helpers.confident_model), so that NMS has real work.
"""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from helpers import (confident_model, keras_seeded, printed_metrics, python, synthetic_images,
                     tiny_config, write_self_labelled_data)
from efficientdet_keras import Detector, EfficientDetNet, save_ckpt
from efficientdet_keras.export.tflite_parity import saved_model_batch_detect

pytest.importorskip("openvino", reason="openvino (the openvino extra) is not installed")

from efficientdet_keras.export import graph_parity, openvino as openvino_export  # noqa: E402
from efficientdet_keras.inference.graph_file_runner import split_outputs  # noqa: E402
from efficientdet_keras.inference.openvino_runner import (INSTALL_HINT,  # noqa: E402
                                                          OpenVINODetector,
                                                          OpenVINOMissingError)

LABEL_MAP = {1: "circle", 2: "square", 3: "triangle", 4: "cross"}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(model with soft-NMS, path of its float32 model.xml, the module's folder)."""
    root = tmp_path_factory.mktemp("openvino")
    with keras_seeded(7):
        model = confident_model("efficientdet-d0", 128, label_map=LABEL_MAP)
    assert model.config.nms_configs.method == "gaussian"
    path = openvino_export.export_openvino(model, str(root / "fp32" / "model.xml"))
    return model, path, root


def run_tool(name, *args):
    return subprocess.run([python(), "-m", "efficientdet_keras.cli." + name, *args],
                          capture_output=True, text=True, timeout=900)


def test_soft_nms_survives_and_the_file_equals_the_saved_model(exported):
    """Boxes within 1e-3 px and scores within 1e-4 of the SavedModel's function, soft-NMS
    included, for batches of images of any size; the runner computes in float32."""
    model, path, _ = exported
    with open(path + ".json") as f:
        info = json.load(f)
    assert (info["format"], info["precision"]) == ("openvino", "float32")
    assert info["nms_configs"]["method"] == "gaussian"
    assert info["label_map"] == {str(k): v for k, v in LABEL_MAP.items()}
    runner = OpenVINODetector(path)
    import openvino
    assert runner.compiled.get_property("INFERENCE_PRECISION_HINT") == openvino.Type.f32
    reference_detect = saved_model_batch_detect(model, "gaussian")
    for height, width, count in ((96, 160, 2), (150, 90, 1)):
        images = np.stack(synthetic_images(count, height, width, seed=height))
        got, expected = runner.run(images), reference_detect(images)
        for one_got, one_expected in zip(split_outputs(got), split_outputs(expected)):
            found = runner.detections_from_outputs(one_got, image_size=(height, width))
            reference = runner.detections_from_outputs(one_expected, image_size=(height, width))
            keep = reference["scores"] > graph_parity.SOFT_NMS_MIN_SCORE
            assert np.sum(reference["scores"] > 0.3) >= 3
            matched = graph_parity.match_detections(
                {k: v[found["scores"] > graph_parity.SOFT_NMS_MIN_SCORE]
                 for k, v in found.items()},
                {k: v[keep] for k, v in reference.items()}, 1e-4, 1e-3)
            assert matched["unmatched"] == 0, matched
    result, = graph_parity.standard_checks(model, path, synthetic_images(3, 96, 160))
    assert result.passed and "(gaussian NMS)" in result.summary, result.summary
    assert result.measured["compared"] >= 10


def test_float16_halves_the_weights_and_stays_close(exported):
    model, path, root = exported
    half = openvino_export.export_openvino(model, str(root / "fp16" / "model.xml"), "float16")
    size = lambda xml: os.path.getsize(xml[:-len(".xml")] + ".bin")  # noqa: E731
    assert 0.45 < size(half) / size(path) < 0.55
    result, = graph_parity.standard_checks(model, half, synthetic_images(3, 96, 160))
    assert result.passed and result.name == "float16_error", result.summary
    assert 0 < result.measured["scores"] < 0.05, result.summary
    # The float32 check would be too strict for float16 weights: the scores moved.
    strict = graph_parity.detection_parity(model, half, synthetic_images(3, 96, 160))
    assert strict.measured["max_score_difference"] > 1e-5


def test_the_check_fails_when_a_weight_moves(exported):
    model, path, _ = exported
    bias = model.class_net.predict.bias
    kept = bias.numpy()
    bias.assign(kept + 1e-3)
    try:
        result, = graph_parity.standard_checks(model, path, synthetic_images(2, 96, 160))
    finally:
        bias.assign(kept)
    assert not result.passed and "FAILED" in result.summary


@pytest.mark.quick
def test_bad_requests_are_one_line(tmp_path, monkeypatch):
    model = EfficientDetNet(config=tiny_config())
    with pytest.raises(ValueError, match="OpenVINO precision must be one of float32, float16"):
        openvino_export.export_openvino(model, str(tmp_path / "model.xml"), "int4")
    with pytest.raises(ValueError, match="model.onnx: an OpenVINO IR is written as a .xml"):
        openvino_export.export_openvino(model, str(tmp_path / "model.onnx"))
    monkeypatch.setitem(sys.modules, "openvino", None)  # Import fails.
    with pytest.raises(OpenVINOMissingError, match=re.escape(INSTALL_HINT)):
        openvino_export.export_openvino(model, str(tmp_path / "model.xml"))
    assert not os.listdir(tmp_path)


def test_detector_and_the_commands_run_the_file(exported, tmp_path):
    model, path, _ = exported
    detector = Detector(path)
    assert detector.kind == "openvino" and detector.label_map == LABEL_MAP
    images = synthetic_images(2, 96, 160, seed=3)
    for one, reference in zip(detector.detect(images, score_threshold=0.1),
                              Detector.from_model(model).detect(images, score_threshold=0.1)):
        assert len(one) == len(reference) > 0
        np.testing.assert_allclose(one.scores, reference.scores, atol=1e-4)
        np.testing.assert_allclose(one.boxes, reference.boxes, atol=1e-2)
        assert one.class_names.tolist() == [LABEL_MAP[c] for c in one.class_ids]
    with pytest.raises(ValueError, match="model.xml is an OpenVINO detector .*: only_network"):
        detector.detect(images[0], only_network=True)
    with pytest.raises(ValueError, match="hparams cannot change .*model.xml"):
        Detector(path, hparams="nms_configs.score_thresh=0.5")

    # The export command, as a user runs it on a run folder trained with soft-NMS.
    model_dir = tmp_path / "run"
    model_dir.mkdir()
    model.config.save_yaml(str(model_dir))
    save_ckpt(model, str(model_dir / "ckpt-1"))
    export_dir = tmp_path / "exported"
    result = run_tool("export", "--model_dir=%s" % model_dir, "--format=openvino",
                      "--export_dir=%s" % export_dir)
    assert result.returncode == 0, result.stderr[-3000:]
    xml = export_dir / "model.xml"
    assert re.search(r"Exported OpenVINO model \(float32 weights, gaussian NMS, .*\) to %s, "
                     r"[0-9.]+ MB" % re.escape(str(xml)), result.stdout), result.stdout
    assert re.search(r"Parity: detections vs SavedModel \(gaussian NMS\): 0 of \d+ detections "
                     r"above 0.05 unmatched .*: ok$", result.stdout, re.M), result.stdout
    assert sorted(os.listdir(export_dir)) == ["model.bin", "model.xml", "model.xml.json"]

    # efficientdet-eval scores the IR as the checkpoint (both soft-NMS) on images of the
    # input size.
    data = tmp_path / "data"
    records = write_self_labelled_data(model, str(data), 128, 128)
    common = ("--val_file_pattern=%s" % records, "--progress=false", "--batch_size=4")
    ir_run = run_tool("eval", "--openvino=%s" % xml, *common)
    checkpoint_run = run_tool("eval", "--model_dir=%s" % model_dir, *common)
    assert ir_run.returncode == 0, ir_run.stderr[-3000:]
    assert checkpoint_run.returncode == 0, checkpoint_run.stderr[-3000:]
    printed, expected = (printed_metrics(run.stdout) for run in (ir_run, checkpoint_run))
    assert len(printed) == 12 and printed["AP"] > 0.3, ir_run.stdout
    assert printed == {k: pytest.approx(v, abs=1.5e-4) for k, v in expected.items()}
    refused = run_tool("eval", "--openvino=%s" % xml, "--onnx=x.onnx", *common)
    assert refused.returncode == 1 and "give one of --tflite, --onnx, --openvino" in refused.stderr
