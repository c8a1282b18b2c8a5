"""Detection losses as Keras Loss subclasses: focal, Huber box and IoU box losses.

Each takes `y_true` as a tuple that carries the targets and the number of
positive anchors (so it can normalise), and `y_pred` as the network outputs of
one level or all levels concatenated. Predictions may be float16 or bfloat16;
every loss computes and returns float32.

Target conventions (from `anchors.AnchorLabeler`): class targets are
0..num_classes-1 for positives, -1 for background and -2 for ignored anchors.
"""

import math

import tensorflow as tf
import tf_keras as keras

from efficientdet_keras.detection.anchors import IGNORE, Anchors, concat_levels, decode_boxes

IOU_LOSS_TYPES = ("iou", "giou", "diou", "ciou")


def _normaliser(num_positives) -> tf.Tensor:
    """Sum of positives over the batch, plus one so empty batches do not divide by zero."""
    return tf.reduce_sum(tf.cast(num_positives, tf.float32)) + 1.0


def _box_normaliser(num_positives) -> tf.Tensor:
    """4 * (positives + 1): the released recipe divides both box losses by this.

    The Huber loss sums 4 coordinates per positive anchor; the IoU loss has one
    term per anchor but keeps the same divisor, so `iou_loss_weight` means what
    it meant in the released EfficientDet.
    """
    return 4.0 * _normaliser(num_positives)


def focal_loss_per_element(logits, class_targets, num_classes: int, alpha: float, gamma: float,
                           label_smoothing: float = 0.0) -> tf.Tensor:
    """Un-normalised focal loss for every anchor and class.

    Args:
      logits: `[..., A * num_classes]` (or `[..., num_classes]` per anchor).
      class_targets: int `[..., A]` with -1 background and -2 ignored.

    Returns:
      float32 `[..., A, num_classes]`; ignored anchors give zeros.
    """
    logits = tf.cast(logits, tf.float32)
    class_targets = tf.cast(class_targets, tf.int32)
    logits = tf.reshape(logits, tf.concat([tf.shape(class_targets), [num_classes]], axis=0))
    labels = tf.one_hot(class_targets, num_classes, dtype=tf.float32)  # -1 and -2 -> all zeros.
    probs = tf.sigmoid(logits)
    p_t = labels * probs + (1.0 - labels) * (1.0 - probs)
    alpha_t = labels * alpha + (1.0 - labels) * (1.0 - alpha)
    # Smoothing softens the cross-entropy labels only; p_t keeps the hard ones.
    smoothed = labels * (1.0 - label_smoothing) + 0.5 * label_smoothing
    cross_entropy = tf.nn.sigmoid_cross_entropy_with_logits(labels=smoothed, logits=logits)
    loss = alpha_t * tf.pow(1.0 - p_t, gamma) * cross_entropy
    keep = tf.cast(tf.not_equal(class_targets, IGNORE), tf.float32)[..., tf.newaxis]
    return loss * keep


class FocalLoss(keras.losses.Loss):
    """Focal loss on class logits, summed and divided by (number of positives + 1).

    Call as `loss((class_targets, num_positives), logits)` with class_targets
    int `[B, H, W, A]`, num_positives `[B]` or a scalar, logits
    `[B, H, W, A * num_classes]`. Returns a float32 scalar.
    """

    def __init__(self, num_classes: int, alpha: float = 0.25, gamma: float = 1.5,
                 label_smoothing: float = 0.0, name: str = "focal_loss", **kwargs):
        kwargs.setdefault("reduction", keras.losses.Reduction.SUM)
        super().__init__(name=name, **kwargs)
        self.num_classes, self.alpha, self.gamma = num_classes, alpha, gamma
        self.label_smoothing = label_smoothing

    def call(self, y_true, y_pred):
        class_targets, num_positives = y_true
        loss = focal_loss_per_element(y_pred, class_targets, self.num_classes, self.alpha,
                                      self.gamma, self.label_smoothing)
        return tf.reduce_sum(loss) / _normaliser(num_positives)

    def get_config(self):
        return dict(super().get_config(), num_classes=self.num_classes, alpha=self.alpha,
                    gamma=self.gamma, label_smoothing=self.label_smoothing)


def _positive_mask(class_targets) -> tf.Tensor:
    """float32 `[..., A, 1]`: 1 for positive anchors."""
    return tf.cast(tf.cast(class_targets, tf.int32) >= 0, tf.float32)[..., tf.newaxis]


def _per_anchor(x, class_targets) -> tf.Tensor:
    """Reshapes `[..., A * 4]` to `[..., A, 4]` float32."""
    return tf.reshape(tf.cast(x, tf.float32), tf.concat([tf.shape(class_targets), [4]], axis=0))


class BoxLoss(keras.losses.Loss):
    """Huber loss on encoded boxes of positive anchors, divided by 4 * (positives + 1).

    Call as `loss((box_targets, class_targets, num_positives), box_outputs)` with
    box tensors `[B, H, W, A * 4]` and class_targets int `[B, H, W, A]` (which
    anchors are positive). Returns a float32 scalar.
    """

    def __init__(self, delta: float = 0.1, name: str = "box_loss", **kwargs):
        kwargs.setdefault("reduction", keras.losses.Reduction.SUM)
        super().__init__(name=name, **kwargs)
        self.delta = delta

    def call(self, y_true, y_pred):
        box_targets, class_targets, num_positives = y_true
        error = tf.abs(_per_anchor(y_pred, class_targets) - _per_anchor(box_targets, class_targets))
        quadratic = tf.minimum(error, self.delta)
        huber = 0.5 * quadratic ** 2 + self.delta * (error - quadratic)
        loss = tf.reduce_sum(huber * _positive_mask(class_targets))
        return loss / _box_normaliser(num_positives)

    def get_config(self):
        return dict(super().get_config(), delta=self.delta)


def box_iou_terms(pred_boxes: tf.Tensor, target_boxes: tf.Tensor, iou_type: str) -> tf.Tensor:
    """IoU, GIoU, DIoU or CIoU of matching boxes `[..., 4]` ([ymin, xmin, ymax, xmax]).

    Returns `[...]` values in [-1, 1] (1 for identical boxes).
    """
    if iou_type not in IOU_LOSS_TYPES:
        raise ValueError("iou_loss_type must be one of %s, got %r"
                         % (", ".join(IOU_LOSS_TYPES), iou_type))
    eps = 1e-9
    p_ymin, p_xmin, p_ymax, p_xmax = tf.unstack(pred_boxes, axis=-1)
    t_ymin, t_xmin, t_ymax, t_xmax = tf.unstack(target_boxes, axis=-1)
    p_h, p_w = tf.maximum(p_ymax - p_ymin, 0.0), tf.maximum(p_xmax - p_xmin, 0.0)
    t_h, t_w = tf.maximum(t_ymax - t_ymin, 0.0), tf.maximum(t_xmax - t_xmin, 0.0)
    inter_h = tf.maximum(tf.minimum(p_ymax, t_ymax) - tf.maximum(p_ymin, t_ymin), 0.0)
    inter_w = tf.maximum(tf.minimum(p_xmax, t_xmax) - tf.maximum(p_xmin, t_xmin), 0.0)
    intersection = inter_h * inter_w
    union = p_h * p_w + t_h * t_w - intersection
    iou = intersection / (union + eps)
    if iou_type == "iou":
        return iou
    # The smallest box enclosing both.
    enc_h = tf.maximum(p_ymax, t_ymax) - tf.minimum(p_ymin, t_ymin)
    enc_w = tf.maximum(p_xmax, t_xmax) - tf.minimum(p_xmin, t_xmin)
    if iou_type == "giou":
        enclosing = enc_h * enc_w
        return iou - (enclosing - union) / (enclosing + eps)
    centre_distance = (((p_ymin + p_ymax) - (t_ymin + t_ymax)) / 2) ** 2 + \
        (((p_xmin + p_xmax) - (t_xmin + t_xmax)) / 2) ** 2
    diagonal = enc_h ** 2 + enc_w ** 2
    diou = iou - centre_distance / (diagonal + eps)
    if iou_type == "diou":
        return diou
    # CIoU adds an aspect-ratio consistency term.
    v = (4.0 / math.pi ** 2) * (tf.atan(t_w / (t_h + eps)) - tf.atan(p_w / (p_h + eps))) ** 2
    alpha = tf.stop_gradient(v / (1.0 - iou + v + eps))
    return diou - alpha * v


class IoULoss(keras.losses.Loss):
    """1 - IoU (or GIoU, DIoU, CIoU) of decoded boxes of positive anchors, / 4 * (positives + 1).

    Call as `loss((box_targets, class_targets, num_positives, anchors), box_outputs)`;
    box tensors `[B, H, W, A * 4]` (encoded), anchors `[H, W, A * 4]` or
    broadcastable, in pixels. Returns a float32 scalar.
    """

    def __init__(self, iou_type: str = "giou", name: str = "iou_loss", **kwargs):
        if iou_type not in IOU_LOSS_TYPES:
            raise ValueError("iou_loss_type must be one of %s, got %r"
                             % (", ".join(IOU_LOSS_TYPES), iou_type))
        kwargs.setdefault("reduction", keras.losses.Reduction.SUM)
        super().__init__(name=name, **kwargs)
        self.iou_type = iou_type

    def call(self, y_true, y_pred):
        box_targets, class_targets, num_positives, anchors = y_true
        anchors = tf.cast(anchors, tf.float32)
        anchors = tf.reshape(anchors, tf.concat([tf.shape(anchors)[:-1], [-1, 4]], axis=0))
        pred = decode_boxes(_per_anchor(y_pred, class_targets), anchors)
        target = decode_boxes(_per_anchor(box_targets, class_targets), anchors)
        terms = box_iou_terms(pred, target, self.iou_type)
        positive = _positive_mask(class_targets)[..., 0]
        # One term per anchor, yet divided by 4 * (positives + 1) like the box loss,
        # as the released EfficientDet did (see _box_normaliser).
        return tf.reduce_sum((1.0 - terms) * positive) / _box_normaliser(num_positives)

    def get_config(self):
        return dict(super().get_config(), iou_type=self.iou_type)


class DetectionLoss:
    """The EfficientDet detection loss over all levels, from pipeline labels.

    det_loss = cls_loss + box_loss_weight * box_loss (+ iou_loss_weight * iou_loss
    when config.iou_loss_type is set). Positives are counted over the whole batch.

    Call with `labels` (the InputPipeline dict: class_targets_<l>, box_targets_<l>,
    num_positives) and the model's per-level outputs; returns a dict of float32
    scalars: cls_loss, box_loss, det_loss, and iou_loss when enabled.
    """

    def __init__(self, config, image_size=None):
        self.config = config
        self.levels = list(range(config.min_level, config.max_level + 1))
        self.focal = FocalLoss(config.num_classes, config.alpha, config.gamma,
                               config.label_smoothing)
        self.box = BoxLoss(config.delta)
        self.iou = IoULoss(config.iou_loss_type) if config.iou_loss_type else None
        if self.iou is not None:
            # In the order in which concat_levels puts the anchors.
            self.anchors = tf.constant(Anchors(config, image_size or config.image_size).boxes)

    def __call__(self, labels, class_outputs, box_outputs):
        # All levels as one row of anchors (one per position, A = 1), so each loss and its
        # gradient run once instead of once per level: the same sum in far fewer ops.
        num_positives = labels["num_positives"]
        class_targets = concat_levels(
            [labels["class_targets_%d" % level] for level in self.levels], 1)
        box_targets = concat_levels(
            [labels["box_targets_%d" % level] for level in self.levels], 4)
        box_outputs = concat_levels(box_outputs, 4)
        cls_loss = self.focal((class_targets, num_positives),
                              concat_levels(class_outputs, self.config.num_classes))
        box_loss = self.box((box_targets, class_targets, num_positives), box_outputs)
        if self.iou is not None:
            iou_loss = self.iou((box_targets, class_targets, num_positives, self.anchors),
                                box_outputs)
        losses = {"cls_loss": cls_loss, "box_loss": box_loss}
        det_loss = cls_loss + self.config.box_loss_weight * box_loss
        if self.iou is not None:
            losses["iou_loss"] = iou_loss
            det_loss += self.config.iou_loss_weight * iou_loss
        losses["det_loss"] = det_loss
        return losses
