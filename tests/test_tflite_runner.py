"""The .tflite runner (TFLiteRunner), efficientdet-eval --tflite and efficientdet-infer --tflite.

One tiny model is exported once per module, with raw outputs and with the
TFLite_Detection_PostProcess op; references are the Keras model and the
package's own pre- and post-processing.
"""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from helpers import REPO_ROOT, keras_seeded, python, tiny_config
from efficientdet_keras import EfficientDetNet
from efficientdet_keras.data.pipeline import InputPipeline
from efficientdet_keras.data.sources import TFRecordSource
from efficientdet_keras.data.synthetic import write_synthetic_dataset
from efficientdet_keras.evaluation.coco_evaluator import COCOEvaluator
from efficientdet_keras.evaluation.runner import evaluate_dataset
from efficientdet_keras.data.pixels import pipeline_images_to_uint8, to_uint8
from efficientdet_keras.evaluation.tflite_evaluation import TFLiteEvaluation
from efficientdet_keras.inference.serving_graph import preprocess_image
from efficientdet_keras.exporters.tflite import export_tflite
from efficientdet_keras.data.augmentation.augment import resize_crop_pad
from efficientdet_keras.inference.tflite_runner import TFLiteRunner, letterbox_uint8
from efficientdet_keras.utils.extras import MissingExtraError, install_command
from efficientdet_keras.detection.postprocess import postprocess_detections
from efficientdet_keras.reports.eval_images import EvaluationImages

# The class kernel's spread: the head's inputs are small, so it takes this much for the top
# scores to lie apart (about 1e-3, from 0.68 to 0.996 for the top 150 of a test photo) without
# reaching 1.0. Closer scores swap under soft-NMS between TFLite's and TensorFlow's rounding.
STDDEV = 20000.0
SMALL = dict(image_size=64, num_classes=4, fpn_num_filters=16, fpn_cell_repeats=1,
             box_class_repeats=1, backbone_survival_prob=1.0)


def spread_model(**overrides):
    """A tiny built model whose class scores are spread apart: an untrained head gives every
    anchor nearly the same score, and near-ties make the NMS order arbitrary (the bias also
    raises them above the score thresholds). Seeded: an unseeded model now and then has two
    same-class scores within TFLite's rounding of each other, whose soft-NMS order (and so the
    later scores) then differs between the .tflite and Keras."""
    with keras_seeded(0):
        model = EfficientDetNet(config=tiny_config(**SMALL, **overrides))
        model.build_variables()
    weights = {v.name: v for v in model.variables}
    kernel = weights["class_net/class-predict/pointwise_kernel:0"]
    kernel.assign(tf.random.stateless_normal(kernel.shape, [1, 2], stddev=STDDEV))
    bias = weights["class_net/class-predict/bias:0"]
    bias.assign(bias + 3.0)
    return model


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(model, {"raw": path, "detections": path}, synthetic data with 48 x 64 images)."""
    root = tmp_path_factory.mktemp("tflite_runner")
    data = write_synthetic_dataset(str(root / "data"), num_train=1, num_val=4,
                                   image_size=(48, 64), seed=4)  # Non-square: padded input.
    model = spread_model(label_map=data.label_map)
    paths = {kind: export_tflite(model, str(root / ("%s.tflite" % kind)), outputs=kind)
             for kind in ("raw", "detections")}
    return model, paths, data


def photo(seed=0, shape=(40, 90, 3)):
    return np.random.RandomState(seed).randint(0, 256, shape).astype(np.uint8)


def keras_detections(model, letterboxed, scale):
    """The Keras model and postprocess_detections on the same letterboxed uint8 image."""
    config = model.config
    images = (letterboxed[np.newaxis].astype(np.float32) - config.mean_rgb) / config.stddev_rgb
    class_outputs, box_outputs = model(images, training=False)
    found = postprocess_detections(config, class_outputs, box_outputs, [scale])
    count = int(found.valid[0])
    return found.boxes[0, :count].numpy(), found.scores[0, :count].numpy(), \
        found.classes[0, :count].numpy()


def assert_same_detections(found, boxes, scores, classes, box_atol):
    """Every detection of `found` has its own partner (class, score within 1e-5, box within
    box_atol); near-equal scores may come in another order."""
    assert len(found["scores"]) == len(scores)
    unmatched = set(range(len(scores)))
    for box, score, class_id in zip(found["boxes"], found["scores"], found["classes"]):
        partner = [i for i in unmatched if classes[i] == class_id and abs(scores[i] - score) < 1e-5
                   and np.abs(boxes[i] - box).max() <= box_atol]
        assert partner, (box, score, class_id)
        unmatched.remove(partner[0])


def detections_of_image(rows, image_id):
    """COCO result rows of one image as a detect()-style dict (boxes as x, y, w, h)."""
    mine = [row for row in rows if row["image_id"] == image_id]
    return {"boxes": np.array([row["bbox"] for row in mine]),
            "scores": np.array([row["score"] for row in mine]),
            "classes": np.array([row["category_id"] for row in mine])}


def test_letterbox_equals_the_saved_model_preprocessing(exported):
    model, paths, _ = exported
    detector = TFLiteRunner(paths["raw"])
    image = photo()
    letterboxed, scale = detector.letterbox(image)
    assert letterboxed.dtype == np.uint8 and letterboxed.shape == (64, 64, 3)
    expected, expected_scale, _ = preprocess_image(tf.constant(image), model.config)
    normalised = (letterboxed.astype(np.float32) - model.config.mean_rgb) / model.config.stddev_rgb
    # uint8 rounding is at most half a grey level; the padding (rows 28..63) is ~0 as well.
    np.testing.assert_allclose(normalised, expected.numpy(), atol=0.51 / 57.0)
    assert abs(normalised[40:]).max() < 0.01
    assert scale == pytest.approx(float(expected_scale)) and scale == pytest.approx(40 / 28)



def test_traced_letterbox_equals_the_eager_one_for_every_image_size(exported):
    _, paths, _ = exported
    detector = TFLiteRunner(paths["raw"])
    mean = detector.config.mean_rgb
    # Down- and up-scaled, wide and tall, and a float image (which takes the eager path).
    images = [photo(3, (90, 150, 3)), photo(4, (20, 30, 3)), photo(5, (64, 63, 3)),
              photo(6, (200, 17, 3)), photo(7, (30, 40, 3)).astype(np.float32) + 0.5]
    for image in images:
        got, scale = detector.letterbox(image)
        expected, expected_scale = letterbox_uint8(image, detector.image_size, mean)
        # The numpy rounding the eager path used before it was written in TF ops.
        shifted, _, _, _ = resize_crop_pad(tf.constant(image), tf.zeros([0, 4]),
                                           detector.image_size, normalize=lambda x: x - mean)
        np.testing.assert_array_equal(got, to_uint8(shifted.numpy() + np.float32(mean)))
        np.testing.assert_array_equal(got, expected)
        assert got.dtype == np.uint8 and scale == expected_scale
    assert len(detector._letterbox_fn._list_all_concrete_functions()) == 1  # One trace.

def test_raw_file_detections_equal_keras_postprocessing_in_original_pixels(exported):
    model, paths, _ = exported
    detector = TFLiteRunner(paths["raw"], num_threads=1)
    image = photo(1)
    found = detector.detect(image)
    boxes, scores, classes = keras_detections(model, *detector.letterbox(image))
    assert len(scores) > 10
    assert_same_detections(found, boxes, scores, classes, box_atol=1e-3)
    np.testing.assert_allclose(found["scores"], scores, atol=1e-5)  # Sorted alike.
    assert found["boxes"].max() > 64  # Original pixels (the image is 90 wide), not input pixels.


def test_detections_file_gives_the_same_top_detection_as_raw_outputs(exported):
    model, paths, _ = exported
    detector = TFLiteRunner(paths["detections"], use_xnnpack=False)
    assert detector.info["outputs"] == "detections" and detector.info["max_detections"] == 25
    image = photo(2)
    found = detector.detect(image)
    boxes, scores, classes = keras_detections(model, *detector.letterbox(image))
    assert 0 < len(found["scores"]) <= 25
    assert np.all(np.diff(found["scores"]) <= 0)  # High to low.
    assert set(found["classes"]) <= {1, 2, 3, 4}
    # The highest-scoring (anchor, class) wins under any NMS: same box, score and class id.
    assert found["classes"][0] == classes[0]
    assert found["scores"][0] == pytest.approx(scores[0], abs=1e-5)
    np.testing.assert_allclose(found["boxes"][0], boxes[0], atol=1e-2)


@pytest.mark.parametrize("resize_mode", [
    "letterbox", pytest.param("stretch", marks=pytest.mark.slow)])
def test_tflite_evaluation_equals_the_keras_evaluation(exported, resize_mode):
    model, paths, data = exported
    nms = {"score_thresh": 0.1}  # Scores below are close together (see `exported`).
    detector = TFLiteRunner(paths["raw"], config_overrides={"nms_configs": nms,
                                                            "resize_mode": resize_mode})
    tflite_images = EvaluationImages(detector.config, num_images=3, score_threshold=0.1)
    evaluation = TFLiteEvaluation(detector, TFRecordSource(data.val_tfrecord), data.val_json,
                                  batch_size=2, progress=False, on_detections=tflite_images)
    _, tflite_metrics, timing = evaluation.run()
    assert timing.images == 4
    tflite_rows = evaluation.evaluator.detection_results()

    config = model.config.copy().override({"resize_mode": resize_mode})
    pipeline = InputPipeline(config, TFRecordSource(data.val_tfrecord), is_training=False,
                             batch_size=2)
    evaluator = COCOEvaluator(data.val_json, label_map=data.label_map)

    def forward(images):  # The same uint8 input as the .tflite gets; eager: 4 images only.
        rounded = pipeline_images_to_uint8(images, config).astype(np.float32)
        return model((rounded - config.mean_rgb) / config.stddev_rgb, training=False)

    eager = (forward, lambda classes, boxes, scales: postprocess_detections(
        config, classes, boxes, scales, nms_overrides=nms))
    keras_images = EvaluationImages(config, num_images=3, score_threshold=0.1)
    keras_metrics, _ = evaluate_dataset(model, pipeline(), config, evaluator,
                                        progress=False, detect_fns=eager,
                                        on_detections=keras_images)
    keras_rows = evaluator.detection_results()
    assert len(tflite_rows) == len(keras_rows) > 40
    for image_id in {row["image_id"] for row in keras_rows}:
        tflite_found = detections_of_image(tflite_rows, image_id)
        assert_same_detections(tflite_found, *detections_of_image(keras_rows, image_id).values(),
                               box_atol=1e-3)
    for name, value in keras_metrics.items():
        assert tflite_metrics[name] == pytest.approx(value, abs=1e-3), name
    # Evaluation images: the .tflite's detections are drawn as the Keras model's are.
    assert [i for i, _ in tflite_images.pictures] == [i for i, _ in keras_images.pictures]
    for (_, tflite_picture), (_, keras_picture) in zip(tflite_images.pictures,
                                                       keras_images.pictures):
        assert np.mean(tflite_picture != keras_picture) < 0.002
        truth, predicted = keras_picture[14:, :64], keras_picture[14:, 64 + 4:]
        assert (truth != predicted).any(-1).mean() > 0.05  # Detections are drawn.


@pytest.mark.slow
def test_a_stretch_trained_file_is_fed_stretched_images(tmp_path):
    """resize_mode stretch travels with the file: the sidecar, the metadata's description and
    the runner, which resizes each axis on its own and maps boxes back per axis."""
    model = spread_model(resize_mode="stretch")
    path = export_tflite(model, str(tmp_path / "stretch.tflite"), outputs="raw")
    detector = TFLiteRunner(path)
    assert detector.info["resize_mode"] == "stretch"
    image = photo(8, (40, 96, 3))
    fitted, scale = detector.letterbox(image)
    np.testing.assert_allclose(scale, [40 / 64, 96 / 64])
    expected = tf.image.resize(image.astype(np.float32), (64, 64)).numpy()
    assert np.abs(fitted.astype(np.float32) - expected).max() <= 0.5 + 1e-3  # No padding.
    found = detector.detect(image)
    boxes, scores, classes = keras_detections(model, fitted, scale)
    assert len(scores) > 10 and boxes[:, 1::2].max() > 64  # x in the 96 original columns.
    assert_same_detections(found, boxes, scores, classes, box_atol=1e-3)
    detections_path = export_tflite(model, str(tmp_path / "stretch-detections.tflite"))
    with open(detections_path, "rb") as f:  # The input's description in the metadata.
        assert b"stretched: each axis resized to the input on its own" in f.read()


def run_tool(name, *args):
    return subprocess.run([python(), os.path.join(REPO_ROOT, "tools", name + ".py"), *args],
                          capture_output=True, text=True, timeout=600)


def test_eval_and_infer_tools_take_a_tflite_file(exported, tmp_path):
    model, paths, data = exported
    result = run_tool("eval", "--tflite=%s" % paths["detections"], "--progress=false",
                      "--val_file_pattern=%s" % data.val_tfrecord,
                      "--val_json_file=%s" % data.val_json, "--write_images=2",
                      "--images_dir=%s" % (tmp_path / "images"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "%s: 4 images" % paths["detections"] in result.stdout
    # --write_images: <images_dir>/<.tflite name>/<image id>.png, val ids 2 and 3 first.
    assert sorted(name for name in os.listdir(tmp_path / "images" / "detections")
                  if name.endswith(".png")) == ["2.png", "3.png"]
    printed = {line.split()[0]: float(line.split()[1]) for line in result.stdout.splitlines()
               if line.split() and line.split()[0] in ("AP", "AP50", "ARmax100")}
    evaluation = TFLiteEvaluation(TFLiteRunner(paths["detections"]),
                                  TFRecordSource(data.val_tfrecord), data.val_json,
                                  progress=False)
    _, metrics, _ = evaluation.run()
    letterbox_rows = evaluation.evaluator.detection_results()
    assert len(printed) == 3
    assert printed == {k: pytest.approx(metrics[k], abs=1e-4) for k in printed}
    # --resize_mode=stretch scores the file as MediaPipe feeds it (each axis resized alone).
    result = run_tool("eval", "--tflite=%s" % paths["detections"], "--progress=false",
                      "--val_file_pattern=%s" % data.val_tfrecord,
                      "--val_json_file=%s" % data.val_json, "--resize_mode=stretch")
    assert result.returncode == 0, result.stderr[-3000:]
    stretched = {line.split()[0]: float(line.split()[1]) for line in result.stdout.splitlines()
                 if line.split() and line.split()[0] in ("AP", "AP50", "ARmax100")}
    evaluation = TFLiteEvaluation(
        TFLiteRunner(paths["detections"], config_overrides={"resize_mode": "stretch"}),
        TFRecordSource(data.val_tfrecord), data.val_json, progress=False)
    expected = evaluation.run()[1]
    assert stretched == {k: pytest.approx(expected[k], abs=1e-4) for k in printed}
    # The untrained model scores AP 0 either way; its detections show the other resize.
    assert evaluation.evaluator.detection_results() != letterbox_rows

    image = photo(3)
    Image.fromarray(image).save(tmp_path / "photo.png")
    out = tmp_path / "out"
    result = run_tool("infer", "--tflite=%s" % paths["detections"], "--input=%s" % tmp_path,
                      "--output_dir=%s" % out, "--score_threshold=0.05", "--max_boxes=5")
    assert result.returncode == 0, result.stderr[-3000:]
    assert (out / "photo.png").exists()
    written = json.load(open(out / "detections.json"))["photo.png"]
    found = TFLiteRunner(paths["detections"]).detect(image)
    keep = found["scores"] >= 0.05
    expected = np.minimum(found["boxes"][keep][:5], [40, 90, 40, 90])  # Clipped to the image.
    assert 0 < len(written) == len(expected)
    np.testing.assert_allclose([d["box"] for d in written], expected, atol=0.02)
    assert [d["name"] for d in written] == [data.label_map[c] for c in found["classes"][keep][:5]]


def printed_metrics(stdout):
    return {line.split()[0]: float(line.split()[1]) for line in stdout.splitlines()
            if line.split() and line.split()[0] in ("AP", "AP50", "ARmax100")}


def test_eval_tool_flip_tta_on_a_tflite_file(exported):
    _, paths, data = exported
    result = run_tool("eval", "--tflite=%s" % paths["raw"], "--progress=false", "--tta=flip",
                      "--val_file_pattern=%s" % data.val_tfrecord,
                      "--val_json_file=%s" % data.val_json)
    assert result.returncode == 0, result.stderr[-3000:]
    printed = printed_metrics(result.stdout)
    source = TFRecordSource(data.val_tfrecord)
    evaluations = {tta: TFLiteEvaluation(
        TFLiteRunner(paths["raw"], config_overrides={"tta": tta}), source, data.val_json,
        progress=False) for tta in ("flip", None)}
    metrics = {tta: evaluation.run()[1] for tta, evaluation in evaluations.items()}
    assert len(printed) == 3
    assert printed == {k: pytest.approx(metrics["flip"][k], abs=1e-4) for k in printed}
    # The untrained model scores AP 0 either way; its detections show the mirror pass.
    flip_scores, plain_scores = ([row["score"] for row in evaluation.evaluator.detection_results()]
                                 for evaluation in evaluations.values())
    assert flip_scores != plain_scores


def test_infer_tool_flip_tta_writes_the_detectors_fused_detections(exported, tmp_path):
    from efficientdet_keras import Detector
    _, paths, _ = exported
    image = photo(4, (64, 64, 3))
    Image.fromarray(image).save(tmp_path / "photo.png")
    result = run_tool("infer", "--tflite=%s" % paths["raw"], "--input=%s" % tmp_path,
                      "--output_dir=%s" % (tmp_path / "out"), "--score_threshold=0.05",
                      "--max_boxes=5", "--tta=flip")
    assert result.returncode == 0, result.stderr[-3000:]
    written = json.load(open(tmp_path / "out" / "detections.json"))["photo.png"]
    expected = Detector(paths["raw"], tta="flip").detect(image, 0.05, 5)
    plain = Detector(paths["raw"]).detect(image, 0.05, 5)
    assert 0 < len(written) == len(expected)
    np.testing.assert_allclose([d["score"] for d in written], expected.scores, atol=1e-4)
    assert not np.allclose(expected.scores[:len(plain)], plain.scores[:len(expected)])


def test_python_detector_on_tflite_files(exported):
    """efficientdet_keras.Detector on both files: TFLiteRunner's detections, clipped to the
    image, and the raw file's outputs for only_network (tests/test_detector.py: the rest)."""
    from efficientdet_keras import Detector
    model, paths, data = exported
    image = photo(5, (40, 90, 3))
    for kind in ("raw", "detections"):
        expected = TFLiteRunner(paths[kind]).detect(image)
        found = Detector(paths[kind]).detect(image)
        assert found.image_size == (40, 90) and len(found) == len(expected["scores"]) > 0
        np.testing.assert_allclose(found.boxes, np.minimum(expected["boxes"], [40, 90, 40, 90]),
                                   atol=1e-4)
        np.testing.assert_allclose(found.scores, expected["scores"], atol=1e-6)
        np.testing.assert_array_equal(found.class_ids, expected["classes"])
        assert found.class_names.tolist() == [data.label_map[c] for c in expected["classes"]]

    raw = Detector(paths["raw"])
    outputs = raw.detect([image], only_network=True)[0]
    runner = TFLiteRunner(paths["raw"])
    letterboxed, scale = runner.letterbox(image)
    direct = runner.run(letterboxed)
    anchors = sum(int(np.ceil(64 / 2 ** level)) ** 2 for level in range(3, 8)) * 9  # 8x8..1x1
    assert outputs.class_outputs[0].shape == (anchors, 4) and outputs.image_scale == scale
    np.testing.assert_array_equal(outputs.class_outputs[0], direct["class_outputs"][0])
    np.testing.assert_array_equal(outputs.box_outputs[0], direct["box_outputs"][0])
    with pytest.raises(ValueError, match="detections.tflite has detection outputs "
                                         r"\(TFLite_Detection_PostProcess\): only_network"):
        Detector(paths["detections"]).detect(image, only_network=True)
    timing = raw.benchmark(image=image, batch_size=2, runs=2, warmup=1, verbose=False)
    assert timing.network.median_ms > 0 and timing.end_to_end.median_ms > 0


@pytest.mark.quick
def test_clear_errors(tmp_path, monkeypatch):
    missing = str(tmp_path / "none.tflite")
    with pytest.raises(FileNotFoundError, match="none.tflite: no such .tflite file"):
        TFLiteRunner(missing)
    not_tflite = tmp_path / "bad.tflite"
    not_tflite.write_bytes(b"0123456789abcdef")
    with pytest.raises(ValueError, match="bad.tflite is not a .tflite file"):
        TFLiteRunner(str(not_tflite))
    no_sidecar = tmp_path / "lone.tflite"
    no_sidecar.write_bytes(b"\x1c\x00\x00\x00TFL3" + bytes(8))
    with pytest.raises(FileNotFoundError, match=r"lone.tflite.json is missing; the .tflite must "
                                                r"come from efficientdet-export --format=tflite"):
        TFLiteRunner(str(no_sidecar))
    (tmp_path / "lone.tflite.json").write_text(json.dumps(dict(
        image_size=[64, 64], num_classes=4, min_level=3, max_level=7, num_scales=3,
        aspect_ratios=[1.0], anchor_scale=4.0, outputs="raw")))
    monkeypatch.setitem(sys.modules, "ai_edge_litert.interpreter", None)  # Import fails.
    with pytest.raises(MissingExtraError, match=r"^running a \.tflite file needs ai-edge-litert "
                                                r"\(.+\): " + re.escape(install_command("tflite"))):
        TFLiteRunner(str(no_sidecar))
