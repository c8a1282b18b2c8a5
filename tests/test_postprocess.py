import numpy as np
import pytest
import tensorflow as tf

from helpers import tiny_config
from efficientdet_keras.detection.anchors import Anchors, encode_boxes
from efficientdet_keras.detection.postprocess import (BatchedDetections, batched_nms,
                                                      postprocess_detections, to_coco_rows)

pytestmark = pytest.mark.quick  # All of this file is in the inner-loop set.


def iou_one(a, b):
    ih = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iw = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ih * iw
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def numpy_nms(boxes, scores, classes, method, max_output, iou_threshold, score_threshold, sigma):
    """Per-class greedy NMS (hard) or gaussian soft-NMS, the textbook way."""
    kept = []
    for c in np.unique(classes):
        idx = list(np.flatnonzero(classes == c))
        live = {i: float(scores[i]) for i in idx}
        while live:
            best = max(live, key=live.get)
            best_score = live.pop(best)
            if best_score <= score_threshold:
                break
            kept.append((best_score, best, c))
            for j in list(live):
                iou = iou_one(boxes[best], boxes[j])
                if method == "gaussian":
                    live[j] *= np.exp(-iou * iou / sigma)
                elif iou > iou_threshold:
                    del live[j]
    kept.sort(key=lambda k: -k[0])
    return kept[:max_output]


def random_candidates(rng, batch, k, num_classes):
    centres = rng.uniform(20, 200, [batch, k, 2])
    sizes = rng.uniform(5, 60, [batch, k, 2])
    boxes = np.concatenate([centres - sizes / 2, centres + sizes / 2], -1).astype(np.float32)
    # Clusters of near-duplicates, so suppression really happens.
    boxes[:, 1::2] = boxes[:, 0::2][:, :boxes[:, 1::2].shape[1]] + rng.normal(0, 2, boxes[:, 1::2].shape)
    scores = rng.uniform(0, 1, [batch, k]).astype(np.float32)
    classes = rng.integers(0, num_classes, [batch, k]).astype(np.int32)
    return boxes, scores, classes


@pytest.mark.parametrize("method", ["hard", "gaussian", "combined"])
def test_nms_matches_numpy_reference(method):
    rng = np.random.default_rng(4)
    boxes, scores, classes = random_candidates(rng, batch=3, k=300, num_classes=4)
    max_output, iou_threshold, score_threshold, sigma = 50, 0.5, 0.05, 0.5
    detections = batched_nms(tf.constant(boxes), tf.constant(scores), tf.constant(classes), 4,
                             method, max_output, iou_threshold, score_threshold, sigma)
    for b in range(3):
        reference_method = "gaussian" if method == "gaussian" else "hard"
        expected = numpy_nms(boxes[b], scores[b], classes[b], reference_method, max_output,
                             iou_threshold, score_threshold, sigma)
        n = int(detections.valid[b])
        assert n == len(expected)
        np.testing.assert_allclose(detections.scores[b, :n], [e[0] for e in expected], rtol=1e-4)
        np.testing.assert_allclose(detections.boxes[b, :n], boxes[b][[e[1] for e in expected]],
                                   atol=1e-4)
        np.testing.assert_array_equal(detections.classes[b, :n], [e[2] + 1 for e in expected])
        assert not detections.scores[b, n:].numpy().any()
        assert not detections.classes[b, n:].numpy().any()


def test_nms_never_suppresses_across_classes():
    box = [10.0, 10.0, 50.0, 50.0]
    boxes = tf.constant([[box, box, box]])
    detections = batched_nms(boxes, tf.constant([[0.9, 0.8, 0.7]]), tf.constant([[0, 1, 1]]), 2,
                             "hard", 10, 0.5, 0.01, 0.5)
    assert int(detections.valid[0]) == 2
    np.testing.assert_array_equal(detections.classes[0, :2], [1, 2])


def test_nms_traces_once_for_many_classes():
    fn = tf.function(lambda b, s, c: batched_nms(b, s, c, 90, "gaussian", 100, 0.5, 0.001, 0.5))
    rng = np.random.default_rng(5)
    for _ in range(2):
        boxes, scores, classes = random_candidates(rng, 2, 500, 90)
        fn(tf.constant(boxes), tf.constant(scores), tf.constant(classes))
    assert fn.experimental_get_tracing_count() == 1


def level_outputs(config, targets):
    """Per-level class and box outputs of a tiny 3-class model whose only confident anchors
    are `targets`: {anchor index: (box in input pixels, 0-based class, logit)}."""
    anchors = Anchors(config)
    logits = np.full([1, anchors.num_anchors, 3], -10.0, np.float32)
    codes = np.zeros([1, anchors.num_anchors, 4], np.float32)
    for index, (box, class_index, logit) in targets.items():
        codes[0, index] = encode_boxes(tf.constant(box, tf.float32),
                                       tf.constant(anchors.boxes[index])).numpy()
        logits[0, index, class_index] = logit
    class_outputs, box_outputs, start = [], [], 0
    for h, w in anchors.level_shapes.values():
        count = h * w * 9
        class_outputs.append(tf.reshape(logits[:, start:start + count], [1, h, w, 27]))
        box_outputs.append(tf.reshape(codes[:, start:start + count], [1, h, w, 36]))
        start += count
    return class_outputs, box_outputs


# One scale per image (letterbox), or a y and an x scale (resize_mode stretch), and the
# hand-computed box [30, 40, 70, 90] in original pixels.
@pytest.mark.parametrize("image_scales, expected_box", [
    ([2.5], [75.0, 100.0, 175.0, 225.0]), ([[0.5, 3.0]], [15.0, 120.0, 35.0, 270.0])])
def test_postprocess_decodes_scales_and_keeps_best(image_scales, expected_box):
    config = tiny_config(num_classes=3, image_size=128)
    config.nms_configs.method = "hard"
    # One confident detection: anchor 100 shifted to a known box, class id 2.
    target_box = np.array([30.0, 40.0, 70.0, 90.0], np.float32)
    class_outputs, box_outputs = level_outputs(config, {100: (target_box, 1, 5.0)})
    detections = postprocess_detections(config, class_outputs, box_outputs,
                                        image_scales=tf.constant(image_scales))
    assert detections.boxes.shape == (1, 100, 4) and detections.valid.dtype == tf.int32
    assert int(detections.valid[0]) == 1
    np.testing.assert_allclose(detections.boxes[0, 0], expected_box, rtol=1e-4)
    assert int(detections.classes[0, 0]) == 2
    np.testing.assert_allclose(float(detections.scores[0, 0]), 1 / (1 + np.exp(-5.0)), rtol=1e-5)


@pytest.mark.parametrize("method", ["hard", "combined"])
def test_nms_sees_unclipped_boxes_and_clipping_comes_after(method):
    # Two boxes of one class at the top edge of a 128 px input. Unclipped, their IoU is
    # 1600 / 4000 = 0.4 < 0.5 and both stay; clipped first they would be the same box
    # [0, 0, 40, 40] (IoU 1) and the second would be suppressed. The reference order:
    # NMS on the decoded boxes, then clipping.
    config = tiny_config(num_classes=3, image_size=128)
    config.nms_configs.method = method
    config.nms_configs.iou_thresh = 0.5
    class_outputs, box_outputs = level_outputs(config, {
        100: (np.array([-60.0, 0.0, 40.0, 40.0]), 0, 4.0),
        200: (np.array([0.0, 0.0, 40.0, 40.0]), 0, 3.0)})
    detections = postprocess_detections(config, class_outputs, box_outputs)
    assert int(detections.valid[0]) == 2
    np.testing.assert_allclose(detections.boxes[0, :2], [[0, 0, 40, 40], [0, 0, 40, 40]],
                               atol=1e-3)
    np.testing.assert_allclose(detections.scores[0, :2], 1 / (1 + np.exp([-4.0, -3.0])),
                               rtol=1e-5)


def test_postprocess_rejects_wrong_image_size():
    config = tiny_config(image_size=128)
    outputs = [tf.zeros([1, 8, 8, 36])]
    with pytest.raises(ValueError, match="image_size"):
        postprocess_detections(config, outputs, outputs, image_size=(256, 256))


def test_coco_rows_keep_large_image_ids_exact():
    detections = BatchedDetections(
        boxes=tf.constant([[[10.0, 20.0, 30.0, 60.0], [0.0, 0.0, 0.0, 0.0]],
                           [[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 9.0]]]),
        scores=tf.constant([[0.9, 0.0], [0.5, 0.25]]),
        classes=tf.constant([[3, 0], [1, 2]]),
        valid=tf.constant([1, 2]))
    big_id = 2 ** 40 + 7  # Far beyond float16 (inf) and float32 (rounded) precision.
    ids, rows = to_coco_rows(tf.constant([big_id, 5], tf.int64), detections)
    assert ids.dtype == np.int64 and ids.tolist() == [big_id, 5, 5]
    assert rows.dtype == np.float64 and rows.shape == (3, 6)
    np.testing.assert_allclose(rows[0], [20.0, 10.0, 40.0, 20.0, 0.9, 3.0], rtol=1e-6)
    np.testing.assert_allclose(rows[2], [6.0, 5.0, 3.0, 2.0, 0.25, 2.0])
    top_id = 2 ** 63 - 1  # Not even float64 holds it; the int64 column does.
    assert to_coco_rows(np.array([top_id, 1], np.int64), detections).image_ids[0] == top_id


@pytest.mark.parametrize("num_classes", [12, 90])
def test_top_candidates_are_the_top_k_pairs_of_all_anchors(num_classes, monkeypatch):
    from efficientdet_keras.detection import postprocess
    rng = np.random.default_rng(7)
    num_anchors, k = 3000, 400
    # One high class per anchor, so the best pairs spread over many anchors, and three
    # anchors with every class high, so some anchors give many of them.
    logits = rng.normal(-5, 2, [2, num_anchors, num_classes]).astype(np.float32)
    high_class = rng.integers(0, num_classes, [2, num_anchors])
    np.put_along_axis(logits, high_class[..., None],
                      rng.normal(3, 1, [2, num_anchors, 1]).astype(np.float32), axis=-1)
    logits[:, :3, :] = rng.normal(4, 1, [2, 3, num_classes])
    codes = np.zeros([2, num_anchors, 4], np.float32)  # Each box is its anchor.
    anchors = np.tile(np.array([[10.0, 10.0, 50.0, 70.0]], np.float32), [num_anchors, 1])
    anchors += np.arange(num_anchors, dtype=np.float32)[:, None]  # One box per anchor.
    args = tf.constant(logits), tf.constant(codes), tf.constant(anchors), k
    assert postprocess.PRESELECT_MIN_CLASSES <= num_classes  # The preselecting path.
    boxes, scores, classes = [t.numpy() for t in postprocess._top_candidates(*args)]
    monkeypatch.setattr(postprocess, "PRESELECT_MIN_CLASSES", 10**6)
    plain = [t.numpy() for t in postprocess._top_candidates(*args)]
    for image in range(2):
        # numpy's own top k of every (anchor, class) pair.
        best = np.argsort(-logits[image].reshape(-1), kind="stable")[:k]
        expected = sorted(zip(best // num_classes, best % num_classes))
        anchor_of_box = np.rint(boxes[image, :, 0] - 10.0).astype(int)
        order = np.lexsort((classes[image], anchor_of_box))
        assert sorted(zip(anchor_of_box, classes[image])) == expected
        plain_order = np.lexsort((plain[2][image], np.rint(plain[0][image, :, 0] - 10.0)))
        np.testing.assert_array_equal(boxes[image, order], plain[0][image, plain_order])
        np.testing.assert_array_equal(scores[image, order], plain[1][image, plain_order])
        np.testing.assert_allclose(np.sort(scores[image]),
                                   np.sort(1 / (1 + np.exp(-logits[image].reshape(-1)[best]))),
                                   rtol=1e-6)


# The reference implementation's own post-processing case (google/automl,
# efficientdet/tf2/postprocess_test.py): network outputs drawn with seed 1111 for a model of
# levels 1-2, one anchor per place, 2 classes, 8 px input, image scales 1 and 2, the best 10
# (anchor, class) pairs into NMS (IoU 0.5), 2 detections kept. Its rows, [image id, xmin,
# ymin, xmax, ymax, score, class] in original pixels, are the reference's evaluation path,
# which never clips; clipped here to the images (8 and 16 px) they are this package's.
REFERENCE_ROWS = [
    [[0., -1.177383, 1.793507, 8.340945, 4.418388, 0.901576, 2.],
     [0., 5.676410, 6.102146, 7.785691, 8.537168, 0.888125, 1.]],
    [[1., 5.885427, 13.529362, 11.410081, 14.154047, 0.884544, 1.],
     [1., 8.145872, -9.660868, 14.173973, 10.41237, 0.815883, 2.]]]


def reference_case_outputs():
    tf.random.set_seed(1111)
    class_outputs = [tf.random.normal([2, 4, 4, 2]), tf.random.normal([2, 2, 2, 2])]
    box_outputs = [tf.random.normal([2, 4, 4, 4]), tf.random.normal([2, 2, 2, 4])]
    config = tiny_config().override(dict(
        min_level=1, max_level=2, aspect_ratios=[1.0], num_scales=1, anchor_scale=1.0,
        image_size=8, num_classes=2, nms_configs=dict(iou_thresh=0.5, score_thresh=0.0,
                                                      max_nms_inputs=10, max_output_size=2)))
    return config, class_outputs, box_outputs


@pytest.mark.parametrize("method", ["hard", "combined", "gaussian", "global"])
def test_the_reference_postprocessing_rows(method):
    config, class_outputs, box_outputs = reference_case_outputs()
    config.nms_configs.method = method
    found = postprocess_detections(config, class_outputs, box_outputs, tf.constant([1.0, 2.0]))
    rows = np.array(REFERENCE_ROWS)
    sizes = np.array([8.0, 16.0])[:, np.newaxis, np.newaxis]
    expected_boxes = np.clip(rows[..., [2, 1, 4, 3]], 0.0, sizes)  # ymin, xmin, ymax, xmax
    np.testing.assert_array_equal(found.valid, [2, 2])
    np.testing.assert_allclose(found.boxes, expected_boxes, atol=1e-5)
    np.testing.assert_allclose(found.scores, rows[..., 5], atol=1e-6)
    np.testing.assert_array_equal(found.classes, rows[..., 6])


def test_global_nms_suppresses_across_classes():
    # Two classes on nearly the same box (IoU 0.9): per class both stay, across classes the
    # lower-scoring one goes; a third box elsewhere stays either way.
    config = tiny_config(num_classes=3, image_size=128)
    outputs = level_outputs(config, {
        100: (np.array([10.0, 10.0, 60.0, 60.0]), 0, 4.0),
        101: (np.array([10.0, 10.0, 60.0, 55.0]), 1, 3.0),
        900: (np.array([70.0, 70.0, 120.0, 120.0]), 2, 2.0)})
    for method, expected_classes in (("hard", [1, 2, 3]), ("global", [1, 3])):
        config.nms_configs.method = method
        found = postprocess_detections(config, *outputs)
        count = int(found.valid[0])
        assert list(found.classes[0, :count].numpy()) == expected_classes, method
