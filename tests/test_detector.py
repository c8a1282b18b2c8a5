"""The Python Detector (efficientdet_keras.Detector) on every kind of model it loads.

One tiny D0 (128 px) is saved once per module as a training directory (config.yaml and a
checkpoint whose EMA values are the good weights) and exported as a detection SavedModel;
the reference is the SavedModel's own serving signature. The .tflite files are tested in
tests/test_tflite_runner.py, on the files its module exports anyway.
"""

import json
import shutil

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from helpers import tiny_config
from efficientdet_keras import Detections, Detector, EfficientDetNet, save_ckpt
from efficientdet_keras.checkpoint import variable_name
from efficientdet_keras.exporters.saved_model import export_detector
from efficientdet_keras.inference.loading import checkpoint_config

LABELS = {1: "circle", 2: "square", 3: "triangle", 4: "cross"}
# The full D0 architecture at 128 px with slim FPN and heads: exports take half the time.
SMALL = dict(fpn_num_filters=16, fpn_cell_repeats=1, box_class_repeats=1, label_map=LABELS)


def spread_scores(model):
    """An untrained head scores every anchor alike, and near-ties make the NMS order
    arbitrary: spread the class logits and raise a few dozen anchors above 0.3."""
    weights = {v.name: v for v in model.variables}
    kernel = weights["class_net/class-predict/pointwise_kernel:0"]
    kernel.assign(tf.random.stateless_normal(kernel.shape, [1, 2], stddev=1000.0))
    bias = weights["class_net/class-predict/bias:0"]
    bias.assign(bias + 3.0)
    return bias


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """{"model_dir", "saved_model": paths} of one model, and its checkpoint prefix."""
    root = tmp_path_factory.mktemp("detector")
    model = EfficientDetNet(config=tiny_config(**SMALL))
    model.build_variables()
    bias = spread_scores(model)
    # The checkpoint's raw weights detect nothing; its EMA values are the good weights.
    ema_values = {variable_name(v): tf.identity(v) for v in model.variables}
    good_bias = bias.numpy()
    bias.assign(good_bias - 100.0)
    model_dir = root / "run"
    model_dir.mkdir()
    model.config.save_yaml(str(model_dir))
    prefix = save_ckpt(model, str(model_dir / "ckpt-1"), ema_values=ema_values)
    bias.assign(good_bias)
    paths = {"model_dir": str(model_dir),
             "saved_model": export_detector(model, str(root / "saved_model"))}
    return paths, prefix


@pytest.fixture(scope="module")
def detectors(sources):
    paths, _ = sources
    return {kind: Detector(path) for kind, path in paths.items()}


def photo(seed, shape):
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def signature_detections(saved_model_dir, image):
    """The SavedModel's serving_default on one image: boxes scaled to its pixels."""
    outputs = tf.saved_model.load(saved_model_dir).signatures["serving_default"](
        images=tf.constant(image[np.newaxis]))
    count = int(outputs["num_detections"][0])
    height, width = image.shape[:2]
    pixels = np.array([height, width, height, width], np.float32)
    # The Detector clips boxes to the image (the graph clips to its padded input).
    return (np.minimum(outputs["detection_boxes"][0, :count].numpy() * pixels, pixels),
            outputs["detection_scores"][0, :count].numpy(),
            outputs["detection_classes"][0, :count].numpy().astype(np.int64))


def assert_same(found, other):
    np.testing.assert_array_equal(found.class_ids, other.class_ids)
    np.testing.assert_allclose(found.scores, other.scores, atol=1e-5)
    np.testing.assert_allclose(found.boxes, other.boxes, atol=1e-3)
    assert found.image_size == other.image_size


def test_recognises_each_source_and_detects_like_the_saved_model(sources, detectors):
    paths, _ = sources
    assert {k: d.kind for k, d in detectors.items()} == {
        "model_dir": "model_dir", "saved_model": "saved_model"}
    image = photo(0, (90, 150, 3))  # Not square: letterboxed, and boxes scaled back.
    boxes, scores, classes = signature_detections(paths["saved_model"], image)
    # The EMA weights were loaded: the checkpoint's raw ones detect nothing.
    assert len(scores) > 10 and scores[0] > 0.1
    for kind in ("model_dir", "saved_model"):
        found = detectors[kind].detect(image)
        assert isinstance(found, Detections) and len(found) == len(scores)
        np.testing.assert_array_equal(found.class_ids, classes)
        np.testing.assert_allclose(found.scores, scores, atol=1e-5)
        np.testing.assert_allclose(found.boxes, boxes, atol=1e-3)  # Original pixels.
        assert found.class_names.tolist() == [LABELS[c] for c in classes]
        assert found.image_size == (90, 150)
        assert found.boxes[:, 2].max() == 90  # Boxes reaching into the padding: clipped.


@pytest.mark.quick
def test_image_forms_lists_and_filters(detectors, tmp_path):
    detector = detectors["model_dir"]
    first, second = photo(2, (60, 100, 3)), photo(3, (120, 80, 3))
    Image.fromarray(first).save(tmp_path / "first.png")
    reference = detector.detect(first)
    for same in (Image.fromarray(first), str(tmp_path / "first.png"), tmp_path / "first.png",
                 np.dstack([first, np.full(first.shape[:2], 255, np.uint8)])):  # RGBA
        assert_same(detector.detect(same), reference)
    gray = first[..., 0]
    assert_same(detector.detect(gray), detector.detect(np.dstack([gray] * 3)))

    both = detector.detect([first, second])  # Different sizes: two batches.
    assert isinstance(both, list) and len(both) == 2
    assert_same(both[0], reference)
    assert_same(both[1], detector.detect(second))
    batch = detector.detect(np.stack([first, first]))  # A uint8 [B, H, W, 3] array.
    assert len(batch) == 2 and all(isinstance(b, Detections) for b in batch)
    assert_same(batch[1], reference)

    kept = detector.detect(first, score_threshold=0.5, max_detections=3)
    expected = reference.scores[reference.scores >= 0.5][:3]
    np.testing.assert_allclose(kept.scores, expected)
    assert kept.to_dict()["scores"] == pytest.approx(expected.tolist())
    assert json.loads(json.dumps(kept.to_dict()))["class_names"] == kept.class_names.tolist()


def found_colour(found):
    from efficientdet_keras.utils.drawing import class_colour
    return class_colour(found.class_ids[0])


@pytest.mark.quick
def test_draw_marks_box_edges_and_nothing_else(detectors):
    detector = detectors["model_dir"]
    image = np.full((100, 140, 3), 255, np.uint8)
    found = detector.detect(image, max_detections=1)
    assert len(found) == 1
    picture = detector.draw(image, found)
    assert picture.shape == image.shape and picture.dtype == np.uint8
    ymin, xmin, ymax, xmax = found.boxes[0]
    middle = int(np.clip((ymin + ymax) / 2, 0, 99))  # Below the label, on the left edge.
    left = int(np.clip(np.round(xmin), 0, 139))
    assert (picture[middle, left] != 255).any()
    assert (picture[middle, left] == found_colour(found)).all()
    nothing = found.top(score_threshold=2.0)
    assert len(nothing) == 0
    np.testing.assert_array_equal(detector.draw(image, nothing), image)


@pytest.mark.quick
def test_only_network_outputs(detectors):
    config = detectors["model_dir"].config
    raw = detectors["model_dir"].detect(photo(4, (64, 96, 3)), only_network=True)
    anchors = config.num_scales * len(config.aspect_ratios)
    levels = range(config.min_level, config.max_level + 1)
    assert [c.shape for c in raw.class_outputs] == [
        (128 // 2 ** level, 128 // 2 ** level, anchors * 4) for level in levels]
    assert [b.shape for b in raw.box_outputs] == [
        (128 // 2 ** level, 128 // 2 ** level, anchors * 4) for level in levels]
    assert raw.image_scale == pytest.approx(96 / 128, abs=0.01) and raw.image_size == (64, 96)

    image = photo(5, (64, 96, 3))
    with pytest.raises(ValueError, match="is a detection SavedModel .*only_network needs a "
                                         "checkpoint"):
        detectors["saved_model"].detect(image, only_network=True)


@pytest.mark.quick
def test_benchmark_reports_positive_latencies(detectors, capsys):
    result = detectors["model_dir"].benchmark(image=photo(7, (48, 64, 3)), batch_size=2,
                                              runs=2, warmup=1)
    for latency in (result.network, result.end_to_end):
        assert 0 < latency.median_ms <= latency.p90_ms
        assert latency.images_per_second == pytest.approx(2e3 / latency.median_ms)
    printed = capsys.readouterr().out
    assert "batch 2 of 48x64 images, 2 runs after 1 warm-up runs" in printed
    assert "end to end  median" in printed
    served = detectors["saved_model"].benchmark(batch_size=1, runs=1, warmup=0, verbose=False)
    assert served.network is None and served.end_to_end.median_ms > 0


@pytest.mark.quick
def test_checkpoint_config_resolution(sources):
    _, prefix = sources
    assert checkpoint_config(prefix, None, "").label_map == LABELS  # config.yaml beside it.
    config = checkpoint_config(prefix, "efficientdet-lite0", "image_size=256")
    assert config.name == "efficientdet-lite0" and list(config.image_size) == [256, 256]


@pytest.mark.quick
def test_clear_errors(sources, detectors, tmp_path):
    missing = tmp_path / "none"
    with pytest.raises(FileNotFoundError, match="%s: no such file or directory" % missing):
        Detector(missing)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="empty is not a model: expected a training directory"):
        Detector(tmp_path / "empty")
    lone = tmp_path / "lone"
    lone.mkdir()
    _, prefix = sources
    for suffix in (".index", ".data-00000-of-00001"):
        shutil.copy(prefix + suffix, str(lone / ("ckpt-1" + suffix)))
    with pytest.raises(ValueError, match="lone is a checkpoint without config.yaml beside it: "
                                         "give model_name"):
        Detector(lone)
    with pytest.raises(ValueError, match="hparams cannot change"):
        Detector(sources[0]["saved_model"], hparams="num_classes=3")
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"not a jpeg")
    with pytest.raises(ValueError, match="bad.jpg is not a decodable image"):
        detectors["model_dir"].detect(str(bad))
    with pytest.raises(FileNotFoundError, match="gone.png: no such image file"):
        detectors["model_dir"].detect([photo(8, (8, 8, 3)), str(tmp_path / "gone.png")])
    with pytest.raises(ValueError, match=r"expected an image of shape \[H, W, 3\], got \[4, 4, 2\]"):
        detectors["model_dir"].detect(np.zeros([4, 4, 2], np.uint8))
