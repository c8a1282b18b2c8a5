"""Config keys of the detection loss: focal loss, box losses, weight decay."""

from efficientdet_keras.config.keys.checks import ANY_VALUE, NON_NEGATIVE_NUMBER, number_in, one_of
from efficientdet_keras.config.keys.choices import IOU_LOSS_TYPES
from efficientdet_keras.config.keys.row import ConfigKey

TITLE = "Loss"

KEYS = (
    ConfigKey(
        "alpha", 0.25, "float", ANY_VALUE,
        "Focal loss: weight of the positive terms; negative terms get 1 - alpha."),
    ConfigKey(
        "gamma", 1.5, "float", ANY_VALUE,
        "Focal loss focusing exponent: (1 - p_t)^gamma down-weights well-classified "
        "anchors."),
    ConfigKey(
        "label_smoothing", 0.0, "float", number_in(0.0, 1.0),
        "Class targets move towards 0.5 by this fraction: 1 becomes 1 - s / 2, 0 becomes "
        "s / 2."),
    ConfigKey(
        "delta", 0.1, "float", ANY_VALUE,
        "Huber threshold of the box loss, in encoded box-offset units: quadratic below, "
        "linear above."),
    ConfigKey(
        "box_loss_weight", 50.0, "float", NON_NEGATIVE_NUMBER,
        "det_loss = cls_loss + box_loss_weight x box_loss (+ iou_loss_weight x iou_loss)."),
    ConfigKey(
        "iou_loss_type", None, "str or null", one_of(None, "", *IOU_LOSS_TYPES),
        "An extra loss on the decoded boxes of positive anchors, 1 - IoU (or GIoU, DIoU, "
        "CIoU); null or an empty string: off."),
    ConfigKey(
        "iou_loss_weight", 1.0, "float", NON_NEGATIVE_NUMBER,
        "Weight of the IoU loss in det_loss when iou_loss_type is set."),
    ConfigKey(
        "weight_decay", 4e-5, "float", NON_NEGATIVE_NUMBER,
        "L2 penalty weight_decay x sum(w^2) / 2 over the trained convolution kernels, added to "
        "the loss; 0: none."),
)
