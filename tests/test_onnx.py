"""ONNX export (exporters/onnx.py), its parity check (graph_parity.py), the ONNX Runtime runner
(inference/onnx_runner.py), Detector("model.onnx") and efficientdet-eval --onnx.

One D0 at 128 px with hard NMS is exported once per module. It is untrained but made
"confident" (helpers.confident_model): its scores vary from anchor to anchor and a few
dozen anchors score above 0.3, so that NMS has real work and near-ties are rare.
"""

import json
import os
import random
import re
import subprocess
import sys

import numpy as np
import pytest
import tf_keras

from helpers import (FAST, confident_model, overlapping_pairs, printed_metrics, python,
                     score_twice, synthetic_images, tiny_config, write_self_labelled_data)
from efficientdet_keras import Detector, EfficientDetNet, save_ckpt
from efficientdet_keras.data.pipeline import InputPipeline
from efficientdet_keras.data.sources import TFRecordSource
from efficientdet_keras.detection.postprocess import postprocess_detections
from efficientdet_keras.evaluation.coco_evaluator import COCOEvaluator
from efficientdet_keras.evaluation.runner import evaluate_dataset
from efficientdet_keras.data.pixels import pipeline_images_to_uint8
from efficientdet_keras.evaluation.file_evaluation import GraphFileEvaluation

pytest.importorskip("tf2onnx", reason="tf2onnx (the onnx extra) is not installed")
pytest.importorskip("onnxruntime", reason="onnxruntime (the onnx extra) is not installed")

from efficientdet_keras.exporters import onnx as onnx_export, graph_parity  # noqa: E402
from efficientdet_keras.exporters.parity import saved_model_batch_detect  # noqa: E402
from efficientdet_keras.inference.graph_file_runner import split_outputs  # noqa: E402
from efficientdet_keras.inference.onnx_runner import ONNXRunner  # noqa: E402
from efficientdet_keras.utils.extras import MissingExtraError, install_command  # noqa: E402

LABEL_MAP = {1: "circle", 2: "square", 3: "triangle", 4: "cross"}
HARD = {"method": "hard"}
SCORE_TOLERANCE, PIXEL_TOLERANCE = 1e-4, 1.0


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(model with hard NMS, path of its .onnx, the module's folder)."""
    root = tmp_path_factory.mktemp("onnx")
    # The same weights in every run: tf_keras's initializers draw their seeds from Python's
    # random module, which set_random_seed seeds with NumPy's and TensorFlow's.
    states = random.getstate(), np.random.get_state()
    tf_keras.utils.set_random_seed(7)
    model = confident_model("efficientdet-d0", 128, nms_configs=HARD, label_map=LABEL_MAP)
    random.setstate(states[0])
    np.random.set_state(states[1])
    path = onnx_export.export_onnx(model, str(root / "model.onnx"))
    return model, path, root


def run_tool(name, *args):
    """An efficientdet-* command in its own process (each CLI module defines its flags)."""
    return subprocess.run([python(), "-m", "efficientdet_keras.cli." + name, *args],
                          capture_output=True, text=True, timeout=900)


def assert_same_detections(found, reference):
    """Both dicts (boxes in pixels, scores, classes) hold the same detections, pairwise."""
    assert len(found["scores"]) == len(reference["scores"])
    matched = graph_parity.match_detections(found, reference, SCORE_TOLERANCE, PIXEL_TOLERANCE)
    assert matched["unmatched"] == matched["tied"] == 0, matched


def nms_constants(path):
    """[(max_output_boxes_per_class, iou_threshold, score_threshold)] of every
    NonMaxSuppression node in the file (inside the per-image Loop)."""
    import onnx
    from onnx import numpy_helper
    constants, found = {}, []

    def visit(graph):
        constants.update({i.name: numpy_helper.to_array(i) for i in graph.initializer})
        for node in graph.node:
            if node.op_type == "Constant":
                constants[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
            if node.op_type == "NonMaxSuppression":
                found.append(node)
            for attribute in node.attribute:
                if attribute.type == onnx.AttributeProto.GRAPH:
                    visit(attribute.g)

    visit(onnx.load(path).graph)
    return [tuple(float(constants[name]) for name in node.input[2:5]) for node in found]


def test_the_file_takes_any_batch_and_size_and_has_the_four_outputs(exported):
    model, path, _ = exported
    with open(path + ".json") as f:
        info = json.load(f)
    assert info == dict(info, format="onnx", opset=17, model_name="efficientdet-d0",
                        image_size=[128, 128], num_classes=4,
                        label_map={str(k): v for k, v in LABEL_MAP.items()})
    assert info["nms_configs"]["method"] == "hard"
    runner = ONNXRunner(path)
    [images] = runner.runtime.get_inputs()
    assert images.name == "images" and images.type == "tensor(uint8)"
    assert images.shape == ["batch", "height", "width", 3]
    assert {o.name: o.shape for o in runner.runtime.get_outputs()} == {
        "detection_boxes": ["batch", 100, 4], "detection_scores": ["batch", 100],
        "detection_classes": ["batch", 100], "num_detections": ["batch"]}
    # Hard NMS with the config's thresholds: soft-NMS would have become an IoU threshold of 1.
    assert nms_constants(path) == [(100, pytest.approx(0.5), pytest.approx(0.001))]


@pytest.mark.parametrize("batch_size", [pytest.param(1, marks=pytest.mark.slow), 3])
def test_detections_equal_the_saved_model_function(exported, batch_size):
    model, path, _ = exported
    runner = ONNXRunner(path)
    images = np.stack(synthetic_images(batch_size, 96, 160, seed=11))  # Letterboxed, padded.
    got = runner.run(images)
    expected = saved_model_batch_detect(model)(images)
    assert got["detection_boxes"].shape == (batch_size, 100, 4)
    np.testing.assert_array_equal(got["num_detections"], expected["num_detections"])
    for one_got, one_expected in zip(split_outputs(got), split_outputs(expected)):
        found = runner.detections_from_outputs(one_got, image_size=(96, 160))
        reference = runner.detections_from_outputs(one_expected, image_size=(96, 160))
        assert np.sum(reference["scores"] > 0.3) >= 3  # Detections worth comparing.
        assert_same_detections(found, reference)


@pytest.mark.quick
def test_parity_check_passes_and_fails_when_the_weights_move(exported):
    model, path, _ = exported
    images = synthetic_images(2, 96, 160) + synthetic_images(1, 150, 90)  # Two batches.
    result, = graph_parity.standard_checks(model, path, images)
    print(result.summary)
    assert result.passed and result.summary.endswith(": ok"), result.summary
    assert result.measured["compared"] == 300 and result.measured["tied"] == 0  # Boxes too.
    assert result.measured["max_score_difference"] < 1e-5
    # Scores move by up to 2.5e-4 when the class bias moves by 1e-3: above the tolerance.
    bias = model.class_net.predict.bias
    bias.assign_add(np.full(bias.shape, 1e-3, np.float32))
    try:
        result = graph_parity.detection_parity(model, path, images[:1])
    finally:
        bias.assign_sub(np.full(bias.shape, 1e-3, np.float32))
    assert not result.passed and "FAILED" in result.summary, result.summary


@pytest.mark.quick
def test_matching_pairs_ties_by_score_and_nothing_else():
    def detections(rows):  # (score, class, ymin): boxes 10 px tall and wide.
        rows = np.array(rows, np.float64)
        return {"scores": rows[:, 0], "classes": rows[:, 1].astype(np.int64),
                "boxes": rows[:, 2:3] + np.array([0.0, 0.0, 10.0, 10.0])}

    reference = detections([[0.9, 1, 0], [0.5, 2, 20], [0.5, 3, 40], [0.2, 1, 60]])
    exact = graph_parity.match_detections(
        detections([[0.9, 1, 0.5], [0.50002, 3, 40], [0.49999, 2, 20], [0.2, 1, 60]]),
        reference, 1e-4, 1.0)
    assert exact == {"unmatched": 0, "tied": 0, "max_score_difference": pytest.approx(2e-5),
                     "max_box_difference": 0.5}
    # The two detections scoring 0.5 tie: another class or box there is the runtime's choice.
    tied = graph_parity.match_detections(
        detections([[0.9, 1, 0], [0.5, 1, 30], [0.5, 4, 50], [0.2, 1, 60]]), reference, 1e-4, 1.0)
    assert (tied["unmatched"], tied["tied"]) == (0, 2)
    # A lone score with another box, or a score moved beyond the tolerance, is a mismatch.
    moved = graph_parity.match_detections(
        detections([[0.9, 1, 2], [0.5, 2, 20], [0.5, 3, 40], [0.2003, 1, 60]]), reference, 1e-4,
        1.0)
    assert (moved["unmatched"], moved["tied"]) == (2, 0)


@pytest.mark.quick
def test_soft_nms_becomes_hard_nms_per_class_and_bad_opsets_are_refused(tmp_path, monkeypatch):
    config = tiny_config()
    assert config.nms_configs.method == "gaussian"  # The package's default.
    assert onnx_export.onnx_nms_method(config) == "hard"
    notice = onnx_export.nms_notice(config)
    assert "\n" not in notice and notice.startswith(
        "nms_configs.method is 'gaussian', which ONNX's NonMaxSuppression cannot run: the "
        ".onnx runs hard NMS per class")
    assert onnx_export.sidecar_info(config, 17)["nms_configs"]["method"] == "hard"
    assert config.nms_configs.method == "gaussian"  # The caller's config is left as it was.
    for method, runs in (("combined", "hard"), ("hard", "hard"), ("global", "global")):
        config.override({"nms_configs": {"method": method}})
        assert onnx_export.onnx_nms_method(config) == runs
        assert (onnx_export.nms_notice(config) is None) == (method == runs)
        assert onnx_export.onnx_config(config).nms_configs.method == runs
    model = EfficientDetNet(config=tiny_config())  # Refused before anything is built.
    path = str(tmp_path / "model.onnx")
    with pytest.raises(ValueError, match="ONNX opset must be 13 to 18"):
        onnx_export.export_onnx(model, path, opset=9)
    monkeypatch.setitem(sys.modules, "tf2onnx", None)  # Import fails.
    with pytest.raises(MissingExtraError, match=r"^ONNX export needs tf2onnx \(.+\): "
                                                + re.escape(install_command("onnx"))):
        onnx_export.export_onnx(model, path)
    assert not os.listdir(tmp_path)


@pytest.mark.quick
def test_export_command_refuses_a_bad_opset_in_one_line(tmp_path):
    model_dir = tmp_path / "run"
    model_dir.mkdir()
    tiny_config(**FAST).save_yaml(str(model_dir))
    export_dir = tmp_path / "exported"
    result = run_tool("export", "--model_dir=%s" % model_dir, "--format=onnx",
                      "--export_dir=%s" % export_dir, "--onnx_opset=9")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1].startswith(
        "efficientdet-export: onnx_opset: ONNX opset must be 13 to 18")
    assert not export_dir.exists()


def test_export_command_writes_the_file_and_prints_the_parity_check(exported, tmp_path):
    model, _, _ = exported
    model_dir = tmp_path / "run"
    model_dir.mkdir()
    config = model.config.copy()
    config.override({"nms_configs": {"method": "gaussian"}})  # As trained: soft-NMS.
    config.save_yaml(str(model_dir))
    save_ckpt(model, str(model_dir / "ckpt-1"))
    export_dir = tmp_path / "exported"
    result = run_tool("export", "--model_dir=%s" % model_dir, "--format=onnx",
                      "--export_dir=%s" % export_dir)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    # Soft-NMS becomes hard NMS per class, said once.
    assert result.stderr.count("which ONNX's NonMaxSuppression cannot run") == 1, result.stderr
    path = export_dir / "model.onnx"
    size = re.search(r"Exported ONNX model \(opset 17, hard NMS per class, .*\) to %s, "
                     r"([0-9.]+) MB" % re.escape(str(path)), out)
    assert size and float(size.group(1)) == pytest.approx(os.path.getsize(path) / 1e6, abs=0.06)
    parity = re.search(r"Parity: detections vs SavedModel \(hard NMS\): 0 of (\d+) detections "
                       r"unmatched .* 0 of 8 image\(s\) with another count; .*: ok$", out, re.M)
    assert parity and int(parity.group(1)) > 0, out
    with open(str(path) + ".json") as f:
        info = json.load(f)
    assert info["label_map"] == {str(k): v for k, v in LABEL_MAP.items()}
    assert info["nms_configs"]["method"] == "hard"


def test_a_global_nms_config_exports_global_nms_and_checks_against_it(exported, tmp_path):
    """On a model that scores every box for two classes: the file suppresses across classes,
    and its check compares it with the SavedModel doing the same (per class it would fail)."""
    model, _, _ = exported
    images = synthetic_images(2, 128, 128, seed=4)
    kept = [w.numpy() for w in model.class_net.predict.weights]
    score_twice(model)
    model.config.nms_configs.method = "global"
    try:
        path = onnx_export.export_onnx(model, str(tmp_path / "global.onnx"))
        result, = graph_parity.standard_checks(model, path, images)
        per_class = graph_parity.detection_parity(
            model, path, images, reference_detect=saved_model_batch_detect(model, "hard"))
    finally:
        model.config.nms_configs.method = "hard"
        for weight, value in zip(model.class_net.predict.weights, kept):
            weight.assign(value)
    with open(path + ".json") as f:
        assert json.load(f)["nms_configs"]["method"] == "global"
    assert result.passed and "(global NMS)" in result.summary, result.summary
    assert not per_class.passed, per_class.summary
    found = ONNXRunner(path).detect(images[0])
    assert overlapping_pairs(found, model.config.nms_configs.iou_thresh) == 0
    # Each box under its best class only: class 1, which scores 0.2 above class 2 in logits.
    assert set(found["classes"][found["scores"] > 0.3]) == {1}, found


@pytest.mark.quick
def test_detector_runs_the_file_as_the_model_detects(exported, monkeypatch):
    model, path, root = exported
    detector = Detector(path)
    assert detector.kind == "onnx" and tuple(detector.config.image_size) == (128, 128)
    assert detector.label_map == LABEL_MAP
    images = synthetic_images(2, 96, 160, seed=3) + synthetic_images(1, 150, 90, seed=4)
    found = detector.detect(images)
    expected = Detector.from_model(model).detect(images)
    for one, reference in zip(found, expected):
        assert one.image_size == reference.image_size and len(one) == len(reference) > 0
        assert_same_detections(
            {"boxes": one.boxes, "scores": one.scores, "classes": one.class_ids},
            {"boxes": reference.boxes, "scores": reference.scores,
             "classes": reference.class_ids})
        assert one.class_names.tolist() == [LABEL_MAP[c] for c in one.class_ids]
    top = detector.detect(images[2], score_threshold=0.3, max_detections=5)
    assert 0 < len(top) <= 5 and top.scores.min() >= 0.3
    with pytest.raises(ValueError, match="model.onnx is an ONNX detector .*: only_network"):
        detector.detect(images[0], only_network=True)
    with pytest.raises(ValueError, match="hparams cannot change .*model.onnx"):
        Detector(path, hparams="nms_configs.score_thresh=0.5")
    timing = detector.benchmark(image=images[0], batch_size=2, runs=2, warmup=1, verbose=False)
    assert timing.network is None and timing.end_to_end.median_ms > 0

    lone = root / "lone.onnx"
    lone.write_bytes(open(path, "rb").read())
    with pytest.raises(FileNotFoundError, match="lone.onnx.json is missing; the .onnx must come "
                                                "from efficientdet-export --format=onnx"):
        Detector(str(lone))
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # Import fails.
    with pytest.raises(MissingExtraError, match=r"^running an \.onnx file needs onnxruntime "
                                                r"\(.+\): " + re.escape(install_command("onnx"))):
        Detector(path)


def keras_evaluation_on_uint8_images(model, records):
    """The model's metrics and COCO rows (hard NMS) on the images the .onnx evaluation
    feeds: the pipeline's letterboxed images, rounded to uint8."""
    config = model.config
    pipeline = InputPipeline(config, TFRecordSource(records), is_training=False, batch_size=4)
    evaluator = COCOEvaluator(None, label_map=LABEL_MAP)

    def forward(images):
        rounded = pipeline_images_to_uint8(images, config).astype(np.float32)
        return model((rounded - config.mean_rgb) / config.stddev_rgb, training=False)

    detect_fns = (forward, lambda classes, boxes, scales: postprocess_detections(
        config, classes, boxes, scales, nms_overrides=HARD))
    metrics, _ = evaluate_dataset(model, pipeline(), config, evaluator, progress=False,
                                  detect_fns=detect_fns)
    return metrics, evaluator.detection_results()


def test_eval_of_the_file_scores_as_the_model_with_hard_nms(exported, tmp_path):
    model, path, _ = exported
    # Letterboxed (scale 1.25, padded): the .onnx gets them rounded to uint8, as a .tflite.
    records = write_self_labelled_data(model, str(tmp_path / "data"), 96, 160)
    evaluation = GraphFileEvaluation(ONNXRunner(path), TFRecordSource(records), batch_size=4,
                                     progress=False)
    evaluated, metrics, timing = evaluation.run()
    assert evaluated == path and timing.images == 6 and metrics["AP"] > 0.3, metrics
    rows = evaluation.evaluator.detection_results()
    keras_metrics, keras_rows = keras_evaluation_on_uint8_images(model, records)
    assert metrics == {k: pytest.approx(v, abs=1e-4) for k, v in keras_metrics.items()}
    assert len(rows) == len(keras_rows) == 600
    for image_id in range(1, 7):
        found, reference = ({"boxes": np.array([r["bbox"] for r in chosen]),
                             "scores": np.array([r["score"] for r in chosen]),
                             "classes": np.array([r["category_id"] for r in chosen])}
                            for chosen in ([r for r in table if r["image_id"] == image_id]
                                           for table in (rows, keras_rows)))
        assert_same_detections(found, reference)

    # The command prints those metrics. Images of the input size need no resizing, so no
    # rounding either: on them the command scores exactly as the checkpoint's evaluation.
    model_dir = tmp_path / "run"
    model_dir.mkdir()
    config = model.config.copy()
    config.override({"nms_configs": {"method": "gaussian"}})  # Hard NMS comes from the flag.
    config.save_yaml(str(model_dir))
    save_ckpt(model, str(model_dir / "ckpt-1"))
    common = ("--val_file_pattern=%s" % records, "--progress=false", "--batch_size=4")
    onnx_run = run_tool("eval", "--onnx=%s" % path, *common)
    assert onnx_run.returncode == 0, onnx_run.stderr[-3000:]
    assert "%s: 6 images" % path in onnx_run.stdout
    printed = printed_metrics(onnx_run.stdout)
    assert len(printed) == 12
    assert printed == {k: pytest.approx(metrics[k], abs=1.5e-4) for k in printed}
    square = ("--val_file_pattern=%s" % write_self_labelled_data(
        model, str(tmp_path / "square"), 128, 128), "--progress=false", "--batch_size=4")
    onnx_run = run_tool("eval", "--onnx=%s" % path, *square)
    checkpoint_run = run_tool("eval", "--model_dir=%s" % model_dir, "--nms_method=hard", *square)
    assert checkpoint_run.returncode == 0, checkpoint_run.stderr[-3000:]
    printed, checkpoint_metrics = (printed_metrics(run.stdout)
                                   for run in (onnx_run, checkpoint_run))
    assert len(printed) == 12 and printed["AP"] > 0.3, onnx_run.stdout + onnx_run.stderr[-3000:]
    assert printed == {k: pytest.approx(v, abs=1.5e-4) for k, v in checkpoint_metrics.items()}

    refused = run_tool("eval", "--onnx=%s" % path, "--nms_method=gaussian", *common)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert refused.stderr.strip().splitlines()[-1] == (
        "efficientdet-eval: onnx: the file's NMS was fixed at export; leave out the NMS "
        "settings (method)")
