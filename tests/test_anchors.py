import numpy as np
import pytest
import tensorflow as tf

from helpers import tiny_config
from efficientdet_keras import get_efficientdet_config
from efficientdet_keras.detection.anchors import (BACKGROUND, IGNORE, AnchorLabeler, Anchors, decode_boxes,
                                        encode_boxes, pairwise_iou)

pytestmark = pytest.mark.quick  # All of this file is in the inner-loop set.


def test_d0_anchor_count_and_known_coordinates():
    anchors = Anchors(get_efficientdet_config("efficientdet-d0"))
    assert anchors.num_anchors == 49104  # 9 * (64^2 + 32^2 + 16^2 + 8^2 + 4^2)
    boxes = anchors.boxes
    # First anchor: level 3 (stride 8), centre (4, 4), size 4 * 8 = 32, ratio 1.
    np.testing.assert_allclose(boxes[0], [4 - 16, 4 - 16, 4 + 16, 4 + 16])
    # Second: same centre, ratio 2 (w/h): w = 32 * sqrt(2), h = 32 / sqrt(2).
    h, w = 32 / np.sqrt(2), 32 * np.sqrt(2)
    np.testing.assert_allclose(boxes[1], [4 - h / 2, 4 - w / 2, 4 + h / 2, 4 + w / 2], rtol=1e-6)
    # Fourth: next octave 2^(1/3), ratio 1.
    s = 32 * 2 ** (1 / 3)
    np.testing.assert_allclose(boxes[3], [4 - s / 2, 4 - s / 2, 4 + s / 2, 4 + s / 2], rtol=1e-6)
    # Ninth + 1: the next location to the right, x centre 12.
    np.testing.assert_allclose(boxes[9], [-12, -4, 20, 28])
    # Last anchor: level 7 (stride 128), location (3, 3), centre 448, octave 2, ratio 0.5.
    s7 = 4 * 128 * 2 ** (2 / 3)
    h7, w7 = s7 * np.sqrt(2), s7 / np.sqrt(2)
    np.testing.assert_allclose(boxes[-1], [448 - h7 / 2, 448 - w7 / 2, 448 + h7 / 2, 448 + w7 / 2],
                               rtol=1e-6)


def test_non_square_anchors():
    config = get_efficientdet_config("efficientdet-d0")
    anchors = Anchors(config, (384, 640))
    assert anchors.level_shapes[3] == (48, 80) and anchors.level_shapes[7] == (3, 5)
    assert anchors.num_anchors == 9 * sum(h * w for h, w in anchors.level_shapes.values())
    # Centres of the last location of level 3 sit at the last stride centre.
    last_level3 = anchors.boxes[48 * 80 * 9 - 9]
    np.testing.assert_allclose((last_level3[0] + last_level3[2]) / 2, 384 - 4)
    np.testing.assert_allclose((last_level3[1] + last_level3[3]) / 2, 640 - 4)


def test_anchors_are_cached_per_shape():
    config = get_efficientdet_config("efficientdet-d0")
    assert Anchors(config).boxes is Anchors(config).boxes
    assert Anchors(config, (256, 256)).boxes is not Anchors(config).boxes


def test_encode_decode_round_trip_and_known_values():
    anchors = tf.constant([[0.0, 0.0, 10.0, 20.0], [5.0, 5.0, 6.0, 6.0]])
    boxes = tf.constant([[1.0, 2.0, 11.0, 42.0], [5.0, 5.0, 5.0, 5.0]])  # The second is empty.
    codes = encode_boxes(boxes, anchors)
    # ty = (6 - 5) / 10, tx = (22 - 10) / 20, th = log(10/10), tw = log(40/20).
    np.testing.assert_allclose(codes[0], [0.1, 0.6, 0.0, np.log(2.0)], rtol=1e-5, atol=1e-6)
    assert np.isfinite(codes.numpy()).all()
    np.testing.assert_allclose(decode_boxes(codes, anchors), boxes, atol=1e-4)
    random_boxes = tf.random.uniform([100, 2], 0, 100)
    random_boxes = tf.concat([random_boxes, random_boxes + tf.random.uniform([100, 2], 0.5, 60)], 1)
    sizes = random_boxes[:, 2:] - random_boxes[:, :2]
    random_anchors = tf.concat([random_boxes[:, :2] + 3, random_boxes[:, :2] + 3 + sizes * 1.7], 1)
    np.testing.assert_allclose(
        decode_boxes(encode_boxes(random_boxes, random_anchors), random_anchors), random_boxes,
        atol=1e-3)


def test_decode_stays_finite_for_wild_codes_and_inverted_boxes():
    decoded = decode_boxes(tf.constant([[0.0, 0.0, 80.0, -80.0]]), tf.constant([[0.0, 0.0, 8.0, 8.0]]))
    assert np.isfinite(decoded.numpy()).all()
    codes = encode_boxes(tf.constant([[5.0, 5.0, 1.0, 1.0]]), tf.constant([[0.0, 0.0, 8.0, 8.0]]))
    assert np.isfinite(codes.numpy()).all()


def numpy_iou(a, b):
    out = np.zeros([len(a), len(b)])
    for i, p in enumerate(a):
        for j, q in enumerate(b):
            ih = max(0, min(p[2], q[2]) - max(p[0], q[0]))
            iw = max(0, min(p[3], q[3]) - max(p[1], q[1]))
            inter = ih * iw
            union = (p[2] - p[0]) * (p[3] - p[1]) + (q[2] - q[0]) * (q[3] - q[1]) - inter
            out[i, j] = inter / union if union > 0 else 0
    return out


def test_pairwise_iou_against_numpy():
    rng = np.random.default_rng(0)
    a = rng.uniform(0, 50, [20, 2])
    a = np.concatenate([a, a + rng.uniform(1, 30, [20, 2])], 1).astype(np.float32)
    b = rng.uniform(0, 50, [7, 2])
    b = np.concatenate([b, b + rng.uniform(1, 30, [7, 2])], 1).astype(np.float32)
    np.testing.assert_allclose(pairwise_iou(tf.constant(a), tf.constant(b)), numpy_iou(a, b),
                               rtol=1e-5, atol=1e-6)


def small_labeler(**overrides):
    config = tiny_config(**dict(dict(num_classes=3, min_level=3, max_level=4, num_scales=1,
                                     aspect_ratios=[1.0], anchor_scale=1.0), **overrides))
    return AnchorLabeler(config, (32, 32))


def flat(targets):
    return np.concatenate([t.numpy().reshape(-1) for t in targets.values()])


def test_labeler_match_force_match_and_background():
    labeler = small_labeler()  # Level 3: 4x4 anchors of 8 px; level 4: 2x2 of 16 px.
    anchors = labeler.anchors.boxes
    assert anchors.shape == (20, 4)
    boxes = tf.constant([[0.0, 0.0, 8.0, 8.0],     # Exactly anchor 0 (IoU 1).
                         [16.0, 16.0, 32.0, 32.0],  # Exactly the last level-4 anchor.
                         [9.0, 25.0, 13.0, 29.0]])  # Small: best IoU 0.25 < 0.5, force-matched.
    classes = tf.constant([1, 3, 2])
    class_targets, box_targets, num_positives = labeler.label(boxes, classes)
    assert set(class_targets) == {3, 4}
    assert class_targets[3].shape == (4, 4, 1) and box_targets[4].shape == (2, 2, 4)
    flat_classes = flat(class_targets)
    expected = np.full(20, BACKGROUND)
    expected[0] = 0        # Class id 1 -> target 0.
    expected[19] = 2       # Class id 3.
    expected[1 * 4 + 3] = 1  # Anchor [8, 24, 16, 32] holds the small box best.
    np.testing.assert_array_equal(flat_classes, expected)
    assert float(num_positives) == 3.0
    flat_boxes = np.concatenate([b.numpy().reshape(-1, 4) for b in box_targets.values()])
    np.testing.assert_allclose(flat_boxes[0], 0.0, atol=1e-6)  # Identical box: zero code.
    np.testing.assert_allclose(
        flat_boxes[7], encode_boxes(tf.constant([9.0, 25.0, 13.0, 29.0]), tf.constant(anchors[7])),
        rtol=1e-5)
    assert not flat_boxes[[i for i in range(20) if expected[i] < 0]].any()


def test_labeler_crowd_boxes_are_ignored_and_padding_skipped():
    labeler = small_labeler()
    boxes = tf.constant([[0.0, 0.0, 8.0, 8.0], [0.0, 16.0, 16.0, 32.0], [0.0, 0.0, 0.0, 0.0]])
    classes = tf.constant([2, 1, -1])  # The last row is padding.
    crowd = tf.constant([False, True, False])
    class_targets, _, num_positives = labeler.label(boxes, classes, crowd)
    flat_classes = flat(class_targets)
    assert flat_classes[0] == 1 and float(num_positives) == 1.0
    # Anchors inside the crowd region (level 3 x 16-32, y 0-16; level-4 anchor 1) are ignored.
    ignored = sorted(np.flatnonzero(flat_classes == IGNORE))
    assert ignored == [2, 3, 6, 7, 17]
    assert (np.delete(flat_classes, ignored + [0]) == BACKGROUND).all()


def test_labeler_empty_image():
    labeler = small_labeler()
    for boxes, classes in [(tf.zeros([0, 4]), tf.zeros([0], tf.int32)),
                           (tf.zeros([5, 4]), -tf.ones([5], tf.int32))]:
        class_targets, box_targets, num_positives = labeler.label(boxes, classes)
        assert (flat(class_targets) == BACKGROUND).all()
        assert not flat(box_targets).any() and float(num_positives) == 0.0


def test_labeler_runs_in_tf_data_graph_mode():
    labeler = small_labeler()
    dataset = tf.data.Dataset.from_tensor_slices(
        (tf.constant([[[0.0, 0.0, 8.0, 8.0]], [[16.0, 16.0, 32.0, 32.0]]]), tf.constant([[1], [3]])))
    results = list(dataset.map(lambda b, c: labeler.label(b, c)[2]))
    assert [float(r) for r in results] == [1.0, 1.0]


def test_labeler_rejects_out_of_range_class_ids():
    labeler = small_labeler()
    with pytest.raises(tf.errors.InvalidArgumentError) as e:
        labeler.label(tf.constant([[0.0, 0.0, 8.0, 8.0]]), tf.constant([7]))
    assert "1..3" in str(e.value) and "7" in str(e.value)


def numpy_labels(anchors, boxes, classes, ignore, threshold=0.5):
    """The matching rules of AnchorLabeler, written out per anchor and per box in numpy (float64):
    an independent reading of its docstring."""
    num_anchors = len(anchors)
    class_targets = np.full(num_anchors, BACKGROUND)
    box_of = np.full(num_anchors, -1)
    candidates = [k for k in range(len(boxes)) if classes[k] > 0 and not ignore[k]]
    regions = [k for k in range(len(boxes)) if classes[k] > 0 and ignore[k]]
    a, b = anchors.astype(np.float64)[:, None, :], boxes.astype(np.float64)[None, :, :]
    inter = (np.clip(np.minimum(a[..., 2], b[..., 2]) - np.maximum(a[..., 0], b[..., 0]), 0, None)
             * np.clip(np.minimum(a[..., 3], b[..., 3]) - np.maximum(a[..., 1], b[..., 1]), 0, None))
    union = ((a[..., 2] - a[..., 0]) * (a[..., 3] - a[..., 1])
             + (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1]) - inter)
    iou = np.where(union > 0, inter / np.maximum(union, 1e-12), 0.0)  # [anchors, boxes]
    for k in candidates:  # Each box claims its best anchor; later boxes win a shared one.
        if iou[:, k].max() > 0:
            box_of[int(np.argmax(iou[:, k]))] = k
    best = iou[:, candidates].max(axis=1) if candidates else np.full(num_anchors, -1.0)
    for a in np.flatnonzero(box_of < 0):
        if best[a] >= threshold:
            box_of[a] = candidates[int(np.argmax(iou[a, candidates]))]
    area = (anchors[:, 2] - anchors[:, 0]) * (anchors[:, 3] - anchors[:, 1])
    for k in regions:
        inter_h = np.clip(np.minimum(anchors[:, 2], boxes[k, 2])
                          - np.maximum(anchors[:, 0], boxes[k, 0]), 0, None)
        inter_w = np.clip(np.minimum(anchors[:, 3], boxes[k, 3])
                          - np.maximum(anchors[:, 1], boxes[k, 1]), 0, None)
        class_targets[(inter_h * inter_w / area >= threshold) & (box_of < 0)] = IGNORE
    class_targets[(best >= threshold) & (box_of < 0)] = IGNORE  # Never reached at 0.5 / 0.5.
    positive = box_of >= 0
    class_targets[positive] = classes[box_of[positive]] - 1
    return class_targets, positive, box_of


def test_labeler_matches_a_per_anchor_numpy_reading_on_d0_anchors():
    """Random images of 0-12 boxes (crowds, padding rows, repeated boxes that tie) on D0's
    49,104 anchors at 512: classes and positives equal, box codes of the positives close."""
    config = get_efficientdet_config("efficientdet-d0")
    labeler = AnchorLabeler(config, (512, 512))
    anchors = labeler.anchors.boxes
    rng = np.random.default_rng(3)
    for trial in range(6):
        count = [0, 1, 3, 12, 7, 5][trial]
        corner = rng.uniform(0, 480, (count, 2))
        size = rng.uniform(4, 400, (count, 2)) * rng.choice([0.1, 1.0], (count, 1))
        boxes = np.concatenate([corner, np.minimum(corner + size, 512)], 1).astype(np.float32)
        if count >= 3:
            boxes[1] = boxes[0]  # A tie: the first box of best IoU wins.
        classes = rng.integers(1, config.num_classes + 1, count)
        if count >= 5:
            classes[-1] = 0  # Padding.
        ignore = rng.random(count) < 0.25
        class_targets, box_targets, num_positives = labeler.label(boxes, classes, ignore)
        expected, positive, box_of = numpy_labels(anchors, boxes, classes, ignore)
        np.testing.assert_array_equal(flat(class_targets), expected)
        assert float(num_positives) == positive.sum()
        codes = flat(box_targets).reshape(-1, 4)
        assert not codes[~positive].any()
        np.testing.assert_allclose(
            codes[positive], encode_boxes(tf.constant(boxes[box_of[positive]]),
                                          tf.constant(anchors[positive])), rtol=1e-5, atol=1e-5)
