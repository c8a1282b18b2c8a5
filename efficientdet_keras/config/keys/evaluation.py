"""Config keys of evaluation and post-processing: evaluation frequency, NMS, the TFLite
detection op."""

from efficientdet_keras.config.keys.checks import ANY_VALUE, integer_at_least, number_in, one_of
from efficientdet_keras.config.keys.choices import NMS_METHODS
from efficientdet_keras.config.keys.row import ConfigKey

TITLE = "Evaluation and post-processing"

KEYS = (
    ConfigKey(
        "map_freq", 5, "int", integer_at_least(1),
        "COCO evaluation during training every this many epochs; the last epoch is always "
        "evaluated."),
    ConfigKey(
        "nms_configs.method", "gaussian", "str", one_of(None, "", *NMS_METHODS),
        "Non-max suppression per class: gaussian (soft-NMS: overlapping scores decay by "
        "exp(-IoU^2 / sigma)), hard, or combined (hard, by TensorFlow's "
        "combined_non_max_suppression); or global: hard NMS across classes, one box per place "
        "whatever its class; null: hard."),
    ConfigKey(
        "nms_configs.iou_thresh", 0.5, "float", number_in(0.0, 1.0, high_open=False),
        "hard, combined and global NMS drop a box whose IoU with a higher-scoring box (of its "
        "class, but for global) is above this; 0: 0.5."),
    ConfigKey(
        "nms_configs.score_thresh", 0.001, "float", number_in(0.0, 1.0, high_open=False),
        "Detections scoring below this are dropped."),
    ConfigKey(
        "nms_configs.sigma", 0.5, "float", ANY_VALUE,
        "gaussian NMS: width of the score decay exp(-IoU^2 / sigma); 0 or null: 0.5."),
    ConfigKey(
        "nms_configs.max_nms_inputs", 5000, "int", integer_at_least(0, note="0 keeps all"),
        "Top-scoring (anchor, class) candidates per image that enter NMS; 0 keeps all."),
    ConfigKey(
        "nms_configs.max_output_size", 100, "int", integer_at_least(1),
        "Detections per image after NMS."),
    ConfigKey(
        "tflite_max_detections", 25, "int", integer_at_least(1),
        "Detections per image of a .tflite exported with outputs=detections "
        "(TFLite_Detection_PostProcess)."),
    ConfigKey(
        "tflite_max_classes_per_detection", 1, "int", integer_at_least(1),
        "TFLite detection op, fast NMS: classes kept per box (1: its best class only)."),
    ConfigKey(
        "tflite_detections_per_class", 100, "int", integer_at_least(1),
        "TFLite detection op, regular NMS: detections kept per class before the best "
        "tflite_max_detections are taken."),
    ConfigKey(
        "tflite_use_regular_nms", False, "bool", ANY_VALUE,
        "TFLite detection op: false, fast class-agnostic NMS (what on-device runtimes use; "
        "nms_configs.method=global in the package); true, NMS per class (method=hard)."),
)
