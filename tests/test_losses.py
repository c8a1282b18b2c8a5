import math

import numpy as np
import pytest
import tensorflow as tf

from efficientdet_keras.detection.anchors import encode_boxes
from efficientdet_keras.detection.losses import BoxLoss, FocalLoss, IoULoss, box_iou_terms

pytestmark = pytest.mark.quick  # All of this file is in the inner-loop set.


def numpy_focal(logits, targets, num_classes, alpha, gamma, smoothing):
    """Straight from the focal-loss formula, one anchor and class at a time."""
    total = 0.0
    logits = logits.reshape(targets.shape + (num_classes,))
    for index in np.ndindex(targets.shape):
        target = targets[index]
        if target == -2:
            continue
        for c in range(num_classes):
            y = 1.0 if c == target else 0.0
            x = float(logits[index + (c,)])
            p = 1 / (1 + math.exp(-x))
            p_t = p if y else 1 - p
            alpha_t = alpha if y else 1 - alpha
            y_smooth = y * (1 - smoothing) + 0.5 * smoothing
            ce = -(y_smooth * math.log(p) + (1 - y_smooth) * math.log(1 - p))
            total += alpha_t * (1 - p_t) ** gamma * ce
    return total


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_focal_loss_against_numpy(smoothing):
    rng = np.random.default_rng(1)
    num_classes, anchors = 3, 2
    logits = rng.normal(0, 2, [2, 2, 3, anchors * num_classes]).astype(np.float32)
    targets = rng.integers(-2, num_classes, [2, 2, 3, anchors]).astype(np.int32)
    num_positives = np.array([3.0, 4.0], np.float32)
    loss = FocalLoss(num_classes, alpha=0.25, gamma=1.5, label_smoothing=smoothing)
    value = loss((tf.constant(targets), tf.constant(num_positives)), tf.constant(logits))
    expected = numpy_focal(logits, targets, num_classes, 0.25, 1.5, smoothing) / (7.0 + 1.0)
    assert value.dtype == tf.float32
    np.testing.assert_allclose(float(value), expected, rtol=1e-5)


def test_focal_loss_ignores_minus_two_targets():
    logits = tf.constant([[[[5.0, -5.0]]]])
    ignored = FocalLoss(2)((tf.constant([[[[-2]]]]), tf.constant(0.0)), logits)
    background = FocalLoss(2)((tf.constant([[[[-1]]]]), tf.constant(0.0)), logits)
    assert float(ignored) == 0.0 and float(background) > 0.0


def numpy_huber(error, delta):
    error = abs(error)
    return 0.5 * error ** 2 if error <= delta else delta * (error - 0.5 * delta)


def test_box_loss_against_numpy():
    rng = np.random.default_rng(2)
    outputs = rng.normal(0, 0.2, [2, 2, 2, 8]).astype(np.float32)
    targets = rng.normal(0, 0.2, [2, 2, 2, 8]).astype(np.float32)
    targets[0, 0, 0, 0] = 0.0  # An exactly-zero target of a positive still counts.
    class_targets = rng.integers(-2, 3, [2, 2, 2, 2]).astype(np.int32)
    class_targets[0, 0, 0, 0] = 1
    num_positives = float((class_targets >= 0).sum())
    expected = 0.0
    for index in np.ndindex(class_targets.shape):
        if class_targets[index] >= 0:
            b, y, x, a = index
            for k in range(4):
                expected += numpy_huber(outputs[b, y, x, a * 4 + k] - targets[b, y, x, a * 4 + k], 0.1)
    expected /= 4.0 * (num_positives + 1.0)
    value = BoxLoss(delta=0.1)((tf.constant(targets), tf.constant(class_targets),
                                tf.constant([num_positives])), tf.constant(outputs))
    np.testing.assert_allclose(float(value), expected, rtol=1e-5)


def numpy_iou_terms(p, t):
    """IoU, GIoU, DIoU and CIoU of two [ymin, xmin, ymax, xmax] boxes, from the definitions."""
    ih = max(0.0, min(p[2], t[2]) - max(p[0], t[0]))
    iw = max(0.0, min(p[3], t[3]) - max(p[1], t[1]))
    inter = ih * iw
    ph, pw, th, tw = p[2] - p[0], p[3] - p[1], t[2] - t[0], t[3] - t[1]
    union = ph * pw + th * tw - inter
    iou = inter / union
    eh = max(p[2], t[2]) - min(p[0], t[0])
    ew = max(p[3], t[3]) - min(p[1], t[1])
    giou = iou - (eh * ew - union) / (eh * ew)
    rho2 = ((p[0] + p[2]) / 2 - (t[0] + t[2]) / 2) ** 2 + ((p[1] + p[3]) / 2 - (t[1] + t[3]) / 2) ** 2
    diou = iou - rho2 / (eh ** 2 + ew ** 2)
    v = 4 / math.pi ** 2 * (math.atan(tw / th) - math.atan(pw / ph)) ** 2
    ciou = diou - (v / (1 - iou + v) * v if v > 0 else 0.0)
    return {"iou": iou, "giou": giou, "diou": diou, "ciou": ciou}


@pytest.mark.parametrize("iou_type", ["iou", "giou", "diou", "ciou"])
def test_iou_terms_against_definitions(iou_type):
    pairs = [([0, 0, 10, 10], [5, 5, 15, 15]), ([0, 0, 10, 20], [0, 0, 10, 20]),
             ([0, 0, 4, 4], [10, 10, 20, 30]), ([2, 3, 12, 9], [1, 1, 11, 15])]
    pred = tf.constant([p for p, _ in pairs], tf.float32)
    target = tf.constant([t for _, t in pairs], tf.float32)
    got = box_iou_terms(pred, target, iou_type).numpy()
    expected = [numpy_iou_terms(np.array(p, float), np.array(t, float))[iou_type] for p, t in pairs]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_iou_loss_on_positive_anchors():
    anchors = tf.constant([[[[0.0, 0.0, 10.0, 10.0, 20.0, 20.0, 30.0, 30.0]]]])  # [1, 1, 1, 8]
    target_boxes = tf.constant([[0.0, 0.0, 10.0, 10.0], [22.0, 22.0, 30.0, 30.0]])
    pred_boxes = tf.constant([[5.0, 5.0, 15.0, 15.0], [0.0, 0.0, 1.0, 1.0]])
    flat_anchors = tf.reshape(anchors, [2, 4])
    targets = tf.reshape(encode_boxes(target_boxes, flat_anchors), [1, 1, 1, 8])
    outputs = tf.reshape(encode_boxes(pred_boxes, flat_anchors), [1, 1, 1, 8])
    class_targets = tf.constant([[[[0, -1]]]])  # Only the first anchor is positive.
    loss = IoULoss("iou")((targets, class_targets, tf.constant([1.0]), anchors), outputs)
    expected_iou = 25.0 / 175.0
    # Divided by 4 * (positives + 1) = 8, as the released recipe does.
    np.testing.assert_allclose(float(loss), (1 - expected_iou) / 8.0, rtol=1e-4)
    with pytest.raises(ValueError, match="giou"):
        IoULoss("aiou")


def test_iou_loss_normalised_like_the_box_loss():
    # Two images, one anchor each, one positive each. IoU 50/100 and 25/100 by hand;
    # GIoU equals IoU here (the predictions lie inside the targets).
    anchors = tf.constant([[[[0.0, 0.0, 10.0, 10.0]]]])  # [1, 1, 1, 4]
    flat_anchors = tf.reshape(anchors, [1, 4])
    target = encode_boxes(tf.constant([[0.0, 0.0, 10.0, 10.0]]), flat_anchors)
    preds = [encode_boxes(tf.constant([box]), flat_anchors)
             for box in ([0.0, 0.0, 10.0, 5.0], [0.0, 0.0, 5.0, 5.0])]
    targets = tf.reshape(tf.concat([target, target], 0), [2, 1, 1, 4])
    outputs = tf.reshape(tf.concat(preds, 0), [2, 1, 1, 4])
    class_targets = tf.constant([[[[1]]], [[[0]]]])
    y_true = (targets, class_targets, tf.constant([1.0, 1.0]), anchors)
    expected = ((1 - 0.5) + (1 - 0.25)) / (4.0 * (2 + 1))  # = 1.25 / 12
    for iou_type in ("iou", "giou"):
        np.testing.assert_allclose(float(IoULoss(iou_type)(y_true, outputs)), expected, rtol=1e-5)
    # The same divisor as the Huber box loss: 4 * (positives + 1).
    huber_one_coordinate = 0.5 * 0.1 ** 2  # |error| = delta = 0.1 on one coordinate.
    box_outputs = tf.constant([[[[0.1, 0.0, 0.0, 0.0]]], [[[0.0, 0.0, 0.0, 0.0]]]])
    box = BoxLoss(delta=0.1)((tf.zeros([2, 1, 1, 4]), class_targets, tf.constant([1.0, 1.0])),
                             box_outputs)
    np.testing.assert_allclose(float(box), huber_one_coordinate / 12.0, rtol=1e-5)


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16])
def test_losses_take_half_precision_and_return_float32(dtype):
    rng = np.random.default_rng(3)
    logits = rng.normal(0, 1, [1, 2, 2, 6]).astype(np.float32)
    targets = np.array([[[[0, -1], [1, -2]], [[-1, -1], [0, 1]]]], np.int32)
    full = FocalLoss(3)((targets, 4.0), tf.constant(logits))
    half = FocalLoss(3)((targets, 4.0), tf.cast(logits, dtype))
    assert half.dtype == tf.float32
    np.testing.assert_allclose(float(half), float(full), rtol=2e-2)
    boxes = rng.normal(0, 0.1, [1, 2, 2, 8]).astype(np.float32)
    box = BoxLoss()((tf.zeros([1, 2, 2, 8]), targets, 4.0), tf.cast(boxes, dtype))
    assert box.dtype == tf.float32 and float(box) > 0


def test_detection_loss_sums_levels_with_weights():
    """DetectionLoss runs each loss once over all levels concatenated; it must equal the sum
    of the per-level losses, each level with its own anchors. Two anchor shapes per position
    and CIoU (IoU and GIoU do not change when both boxes share an anchor; CIoU's aspect term
    does) make a wrong anchor order show."""
    from helpers import tiny_config
    from efficientdet_keras.detection.anchors import Anchors
    from efficientdet_keras.detection.losses import DetectionLoss
    config = tiny_config(num_classes=2, min_level=3, max_level=4, num_scales=1,
                         aspect_ratios=[1.0, 2.0], image_size=32, iou_loss_type="ciou",
                         iou_loss_weight=2.0, box_loss_weight=10.0)
    rng = np.random.default_rng(7)
    labels = {"num_positives": tf.constant([3.0, 2.0])}
    class_outputs, box_outputs = [], []
    for level, size in ((3, 4), (4, 2)):
        labels["class_targets_%d" % level] = tf.constant(rng.integers(-2, 2, [2, size, size, 2]),
                                                         tf.int32)
        labels["box_targets_%d" % level] = tf.constant(rng.normal(0, 0.1, [2, size, size, 8]),
                                                       tf.float32)
        class_outputs.append(tf.constant(rng.normal(0, 1, [2, size, size, 4]), tf.float32))
        box_outputs.append(tf.constant(rng.normal(0, 0.1, [2, size, size, 8]), tf.float32))
    losses = DetectionLoss(config)(labels, class_outputs, box_outputs)
    anchors = Anchors(config, (32, 32))
    level_anchors = np.split(anchors.boxes, np.cumsum(anchors.level_counts())[:-1])
    focal = box = iou = 0.0
    for i, (level, size) in enumerate(((3, 4), (4, 2))):
        targets = labels["class_targets_%d" % level]
        box_targets = labels["box_targets_%d" % level]
        focal += float(FocalLoss(2)((targets, labels["num_positives"]), class_outputs[i]))
        box += float(BoxLoss()((box_targets, targets, labels["num_positives"]), box_outputs[i]))
        iou += float(IoULoss("ciou")((box_targets, targets, labels["num_positives"],
                                      level_anchors[i].reshape(size, size, 8)), box_outputs[i]))
    np.testing.assert_allclose(float(losses["cls_loss"]), focal, rtol=1e-6)
    np.testing.assert_allclose(float(losses["box_loss"]), box, rtol=1e-6)
    np.testing.assert_allclose(float(losses["iou_loss"]), iou, rtol=1e-6)
    assert iou > 0
    np.testing.assert_allclose(float(losses["det_loss"]), focal + 10.0 * box + 2.0 * iou,
                               rtol=1e-6)
