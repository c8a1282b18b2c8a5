"""What the parity checks of every exported file share: the images they run on, the reference
detections of the detection SavedModel, the result of one check and the tolerances.

A check (tflite_parity.py for .tflite files, graph_parity.py for .onnx and OpenVINO files)
runs the file with its runtime and the Keras model or the SavedModel's serving function on the
same uint8 images (`check_images`) and returns a `CheckResult`: its verdict, the measured
figures and a one-line summary. A quantized file is judged by its score error and by how many
of its boxes lie where the float32 model's do (`misplaced_boxes`, `judge_misplaced`).
"""

from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

import numpy as np

BOX_TOLERANCE_PIXELS = 1.0
SCORE_THRESHOLD = 0.3
# Max abs score error of a quantized file vs float32 that the checks accept (the export guide's
# parity section has the errors seen on trained models).
QUANTIZED_SCORE_TOLERANCE = {"float16": 0.05, "int8": 0.25}
# A quantized file's detections above SCORE_THRESHOLD must mostly lie where float32 ones do:
# at most MAX_MISPLACED of them without a float32 box of their class at IoU >= MIN_QUANTIZED_IOU.
MIN_QUANTIZED_IOU = 0.5
MAX_MISPLACED = 0.25
# Enough images that a trained model shows tens of detections above SCORE_THRESHOLD.
NUM_CHECK_IMAGES = 8


class CheckResult(NamedTuple):
    """name: the check; passed: its verdict; summary: one line with the measured figures;
    measured: {figure: value}."""
    name: str
    passed: bool
    summary: str
    measured: Dict[str, float]


def failed(results: List[CheckResult]) -> List[CheckResult]:
    """The checks that did not pass."""
    return [r for r in results if not r.passed]


def check_images(config, file_pattern: Optional[str] = None,
                 count: int = NUM_CHECK_IMAGES) -> List[np.ndarray]:
    """uint8 [h, w, 3] images for the checks: the first `count` of the TFRecords matching
    `file_pattern` (letterboxed by the input pipeline), else synthetic shapes on textured
    backgrounds (efficientdet_keras.data.synthetic) in a non-square size, so that the
    letterboxing is exercised too."""
    from efficientdet_keras.exporters.tflite import calibration_images
    if file_pattern:
        return [batch[0][0] for batch in calibration_images(config, file_pattern, count)]
    from efficientdet_keras.data.synthetic import generate_examples
    height, width = config.image_size
    return [image for _, image in generate_examples(
        count, height=max(16, height * 3 // 4), width=max(16, width * 5 // 4), seed=0)]


def saved_model_batch_detect(model, nms_method: str = "hard"
                             ) -> Callable[[np.ndarray], Dict[str, np.ndarray]]:
    """The detection SavedModel's serving_default function (exporters/saved_model.py) for
    `model`, with NMS `nms_method` (postprocess.NMS_METHODS): uint8 [B, h, w, 3] -> its
    outputs (numpy)."""
    from efficientdet_keras.inference.serving_graph import DetectionModule
    config = model.config.copy()
    config.override({"nms_configs": {"method": nms_method}})
    module = DetectionModule(model, config)
    return lambda images: {k: v.numpy() for k, v in module.detect_images(images).items()}


def _iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """IoU of one [4] box with each of [n, 4] boxes (ymin, xmin, ymax, xmax)."""
    height = np.clip(np.minimum(box[2], boxes[:, 2]) - np.maximum(box[0], boxes[:, 0]), 0, None)
    width = np.clip(np.minimum(box[3], boxes[:, 3]) - np.maximum(box[1], boxes[:, 1]), 0, None)
    area = lambda b: (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])  # noqa: E731
    union = area(box) + area(boxes) - height * width
    return np.where(union > 0, height * width / np.maximum(union, 1e-12), 0.0)


def misplaced_boxes(found: Dict[str, np.ndarray], reference: Dict[str, np.ndarray],
                    score_threshold: float, min_iou: float = MIN_QUANTIZED_IOU):
    """(how many detections of `found` above score_threshold, how many of them have no
    `reference` detection of the same class with IoU >= min_iou)."""
    count = missing = 0
    for box, score, cls in zip(found["boxes"], found["scores"], found["classes"]):
        if score <= score_threshold:
            continue
        count += 1
        same_class = reference["classes"] == cls
        if not np.any(_iou(box, reference["boxes"][same_class]) >= min_iou):
            missing += 1
    return count, missing


def judge_misplaced(detections: int, misplaced: int) -> Tuple[bool, str]:
    """(whether at most MAX_MISPLACED of the `detections` above SCORE_THRESHOLD are
    `misplaced`, the summary's words for it), with the counts of `misplaced_boxes`."""
    return (misplaced <= MAX_MISPLACED * detections,
            "%d of %d detections above %g without a float32 box of their class at IoU >= %g "
            "(at most %d%%)" % (misplaced, detections, SCORE_THRESHOLD, MIN_QUANTIZED_IOU,
                                MAX_MISPLACED * 100))
