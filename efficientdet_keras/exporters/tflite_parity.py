"""Parity checks of an exported .tflite against the Keras model and the detection SavedModel.

Each check runs the .tflite with the ai-edge-litert interpreter (`TFLiteRunner`) on
the same letterboxed uint8 images as the reference and returns a `CheckResult` (parity.py,
with the images, tolerances and reference every format's checks share) with a one-line
summary:
  raw_parity        "raw" .tflite vs the Keras model: max abs difference of the class
                    logits and box codes of every anchor (float32 passes within 1e-4 of
                    each output's largest magnitude, at least 1).
  detection_parity  "detections" .tflite (TFLite_Detection_PostProcess) vs the detection
                    SavedModel's serving function running the op's own algorithm
                    (`op_nms_method`: hard NMS across classes for the default fast NMS,
                    per class with tflite_use_regular_nms): every detection above the
                    score threshold on one side has one on the other side with the same
                    class and all four box coordinates within 1 pixel (original image
                    pixels), among the top tflite_max_detections. Both are fed the same
                    letterboxed uint8 image.
  quantized_error   an int8 or float16 .tflite vs the float32 model: max abs difference
                    of raw outputs and scores (vs Keras) or of the sorted detection
                    scores (vs the SavedModel in the op's mode), against a stated
                    tolerance.
"""

from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
import tensorflow as tf

from efficientdet_keras.detection.box_scales import image_box_factors
from efficientdet_keras.detection.postprocess import flatten_outputs
from efficientdet_keras.exporters.parity import (BOX_TOLERANCE_PIXELS, QUANTIZED_SCORE_TOLERANCE,
                                              SCORE_THRESHOLD, CheckResult, judge_misplaced,
                                              misplaced_boxes, saved_model_batch_detect)
from efficientdet_keras.exporters.tflite import op_nms_method

RAW_TOLERANCE = 1e-4
# Scores this close count as tied (the runtimes' float sums differ by about 1e-6).
_TIE_TOLERANCE = 1e-5
# Detections this close to the score threshold may fall on either side of it.
_THRESHOLD_MARGIN = 1e-3


def _runner(tflite_path: str):
    """The runner, padding with the model's own mean_rgb (from the sidecar)."""
    from efficientdet_keras.inference.tflite_runner import TFLiteRunner, read_sidecar
    info = read_sidecar(tflite_path)
    overrides = {key: info[key] for key in ("mean_rgb", "stddev_rgb") if key in info}
    return TFLiteRunner(tflite_path, config_overrides=overrides)


def keras_raw_outputs(model, letterboxed: np.ndarray) -> Dict[str, np.ndarray]:
    """The Keras model's outputs on one letterboxed uint8 [H, W, 3] image, in the raw
    .tflite layout: class_outputs [1, A, C] logits, box_outputs [1, A, 4]."""
    config = model.config
    images = tf.cast(letterboxed[np.newaxis], tf.float32)
    normalised = (images - tf.constant(config.mean_rgb, tf.float32)) / tf.constant(
        config.stddev_rgb, tf.float32)
    class_outputs, box_outputs = model(normalised, training=False)
    logits, codes = flatten_outputs(class_outputs, box_outputs, config.num_classes)
    return {"class_outputs": logits.numpy(), "box_outputs": codes.numpy()}


def max_abs_differences(got: Dict[str, np.ndarray], expected: Dict[str, np.ndarray],
                        keys: Sequence[str]) -> Dict[str, float]:
    """{key: max |got[key] - expected[key]|}, float64."""
    return {key: float(np.max(np.abs(np.asarray(got[key], np.float64) -
                                      np.asarray(expected[key], np.float64))))
            for key in keys}


def raw_parity(model, tflite_path: str, images: Sequence[np.ndarray],
               tolerance: float = RAW_TOLERANCE) -> CheckResult:
    """Raw outputs of a float "raw" .tflite vs the Keras model (EMA weights swapped in by
    the caller when the export used them) on uint8 [h, w, 3] `images`.

    Each output passes when its max abs difference is within `tolerance` times its largest
    magnitude (at least 1): float32 rounding grows with the values, and the logits of a
    confident model reach +-15, where TFLite and TensorFlow differ by 1e-5 to 1e-4."""
    runner = _runner(tflite_path)
    worst = {"class_outputs": 0.0, "box_outputs": 0.0}
    scale = {"class_outputs": 1.0, "box_outputs": 1.0}
    for image in images:
        letterboxed, _ = runner.letterbox(image)
        expected = keras_raw_outputs(model, letterboxed)
        differences = max_abs_differences(runner.run(letterboxed), expected, worst)
        worst = {key: max(worst[key], differences[key]) for key in worst}
        scale = {key: max(scale[key], float(np.max(np.abs(expected[key])))) for key in scale}
    passed = all(worst[key] <= tolerance * scale[key] for key in worst)
    summary = ("raw outputs vs Keras: max abs difference %.2g (class logits, largest %.3g) and "
               "%.2g (box codes, largest %.3g) on %d image(s), tolerance %g x the largest "
               "(at least 1): %s"
               % (worst["class_outputs"], scale["class_outputs"], worst["box_outputs"],
                  scale["box_outputs"], len(images), tolerance, "ok" if passed else "FAILED"))
    return CheckResult("raw_parity", passed, summary, worst)


def saved_model_detect(model, nms_method: Optional[str] = None
                       ) -> Callable[[np.ndarray], Dict[str, np.ndarray]]:
    """`saved_model_batch_detect` for one image, as the TFLite op detects (`op_nms_method`
    of the model's config unless `nms_method` is given): uint8 [h, w, 3] -> the
    SavedModel's outputs, batch 1."""
    detect = saved_model_batch_detect(model, nms_method or op_nms_method(model.config))
    return lambda image: detect(image[np.newaxis])


def best_class_per_box(outputs: Dict[str, np.ndarray], per_box: int) -> Dict[str, np.ndarray]:
    """The op's outputs with only each box's first (best) class row; its num_detections
    counts boxes already."""
    rows = ("detection_boxes", "detection_classes", "detection_scores")
    return {key: value[:, ::per_box] if key in rows else value
            for key, value in outputs.items()}


def _saved_model_detections(outputs: Dict[str, np.ndarray], input_size,
                            scale) -> Dict[str, np.ndarray]:
    """SavedModel outputs for one letterboxed input of `input_size` (its boxes are
    normalised to it) as dict(boxes in original pixels, scores, classes)."""
    count = int(outputs["num_detections"][0])
    height, width = input_size[:2]
    pixels = np.array([height, width, height, width], np.float32) * image_box_factors(scale)
    return {"boxes": outputs["detection_boxes"][0, :count] * pixels,
            "scores": outputs["detection_scores"][0, :count],
            "classes": outputs["detection_classes"][0, :count].astype(np.int64)}


def _clip_to_input(boxes: np.ndarray, input_size, scale) -> np.ndarray:
    """The SavedModel clips boxes to its input; TFLite_Detection_PostProcess does not."""
    height, width = input_size[:2]
    return np.clip(boxes, 0.0, np.array([height, width, height, width], np.float32)
                   * image_box_factors(scale))


def _cut_at(reference: Dict[str, np.ndarray], count: int):
    """The SavedModel's best `count` detections, as the op keeps its best `count`: (those the
    op's may match, those it must match). Detections tied in score with the last one kept
    may be either side of the cut, so ties at the cut are in the first and not the second."""
    scores = reference["scores"]
    if len(scores) <= count:
        return reference, reference
    tied = np.abs(scores - scores[count - 1]) <= _TIE_TOLERANCE
    first_tied = int(np.argmax(tied))
    last_tied = len(tied) - int(np.argmax(tied[::-1]))
    return ({k: v[:last_tied] for k, v in reference.items()},
            {k: v[:first_tied] for k, v in reference.items()})


def unmatched_detections(found: Dict[str, np.ndarray], reference: Dict[str, np.ndarray],
                         score_threshold: float, pixel_tolerance: float) -> int:
    """How many detections of `found` above score_threshold (+ a small margin) have no
    detection in `reference` (above the threshold - margin) of the same class whose four
    coordinates are all within pixel_tolerance. Each reference detection matches once."""
    available = reference["scores"] > score_threshold - _THRESHOLD_MARGIN
    missing = 0
    for box, score, cls in zip(found["boxes"], found["scores"], found["classes"]):
        if score <= score_threshold + _THRESHOLD_MARGIN:
            continue
        close = np.max(np.abs(reference["boxes"] - box), axis=-1) <= pixel_tolerance
        candidates = np.flatnonzero(available & close & (reference["classes"] == cls))
        if candidates.size:
            available[candidates[0]] = False
        else:
            missing += 1
    return missing


def detection_parity(model, tflite_path: str, images: Sequence[np.ndarray],
                     score_threshold: float = SCORE_THRESHOLD,
                     pixel_tolerance: float = BOX_TOLERANCE_PIXELS,
                     reference_detect: Optional[Callable] = None) -> CheckResult:
    """Detections of a "detections" .tflite vs the detection SavedModel's on `images`.

    The SavedModel runs the NMS the op runs (the sidecar's "nms", else `op_nms_method`):
    comparing the op's fast NMS, which suppresses across classes, with NMS per class would
    fail wherever a trained model scores two classes on one object. With several classes
    kept per box, each box's best class is compared. Both get the runner's letterboxed
    uint8 image. reference_detect: uint8 [h, w, 3] -> SavedModel outputs with batch 1 (a
    loaded SavedModel's signature running that NMS, say); default: `saved_model_detect`.
    """
    runner = _runner(tflite_path)
    nms_method = runner.info.get("nms") or op_nms_method(model.config)
    compared_with = "%s NMS, as the op" % nms_method if reference_detect is None else "given"
    reference_detect = reference_detect or saved_model_detect(model, nms_method)
    max_detections = int(runner.info["max_detections"])
    per_box = int(runner.info.get("detections_per_box", 1))
    compared = unmatched = 0
    for image in images:
        # Both get the same letterboxed uint8 input (the SavedModel's own resize is then
        # the identity and its zero padding equals the runner's mean padding), so only
        # the runtimes and the NMS differ, not the rounding of the resized pixels.
        letterboxed, scale = runner.letterbox(image)
        outputs = best_class_per_box(runner.run(letterboxed), per_box)
        found = runner.detections_from_outputs(outputs, scale, detections_per_box=1)
        found["boxes"] = _clip_to_input(found["boxes"], letterboxed.shape, scale)
        reference = _saved_model_detections(reference_detect(letterboxed), letterboxed.shape,
                                            scale)
        may_match, must_match = _cut_at(reference, max_detections)
        compared += int(np.sum(must_match["scores"] > score_threshold + _THRESHOLD_MARGIN))
        unmatched += unmatched_detections(found, may_match, score_threshold, pixel_tolerance)
        unmatched += unmatched_detections(must_match, found, score_threshold, pixel_tolerance)
    passed = unmatched == 0
    verdict = "ok" if passed else "FAILED"
    if compared == 0:  # An untrained model: say that nothing was compared.
        verdict += " (nothing to compare: no score above %g on these images)" % score_threshold
    summary = ("detections vs SavedModel (%s): %d of %d detections with "
               "score > %g unmatched (same class, box within %g px) on %d image(s): %s"
               % (compared_with, unmatched, compared, score_threshold, pixel_tolerance,
                  len(images), verdict))
    return CheckResult("detection_parity", passed, summary,
                       {"compared": compared, "unmatched": unmatched})


def _sorted_scores(scores: np.ndarray, count: int) -> np.ndarray:
    return np.sort(np.asarray(scores, np.float64).reshape(-1)[:count])[::-1]


def quantized_error(model, tflite_path: str, images: Sequence[np.ndarray],
                    tolerance: float) -> CheckResult:
    """Error of a quantized (int8 or float16) .tflite against the float32 model.

    "raw" files: max abs difference of the class logits, box codes and scores
    (sigmoid of the logits) of every anchor against the Keras model. "detections"
    files: max abs difference between the sorted scores of the top detections (each box's
    best class) and the SavedModel's sorted scores, with the op's NMS; and the detections
    above SCORE_THRESHOLD without a float32 box of their class at IoU >= MIN_QUANTIZED_IOU
    (parity.misplaced_boxes). Passes when the scores' error is <= tolerance and, for
    detections files, at most MAX_MISPLACED of the detections are misplaced.
    """
    runner = _runner(tflite_path)
    raw = runner.info["outputs"] == "raw"
    reference_detect = None if raw else saved_model_detect(
        model, runner.info.get("nms") or op_nms_method(model.config))
    per_box = int(runner.info.get("detections_per_box", 1))
    worst: Dict[str, float] = {}
    boxes = [0, 0]  # Detections above SCORE_THRESHOLD, and those misplaced (detection files).
    for image in images:
        letterboxed, scale = runner.letterbox(image)
        got = runner.run(letterboxed)
        if raw:
            expected = keras_raw_outputs(model, letterboxed)
            for outputs in (got, expected):
                outputs["scores"] = tf.sigmoid(outputs["class_outputs"]).numpy()
            differences = max_abs_differences(got, expected,
                                              ("class_outputs", "box_outputs", "scores"))
        else:
            got = best_class_per_box(got, per_box)
            reference = reference_detect(letterboxed)
            count = int(min(got["num_detections"][0], reference["num_detections"][0]))
            differences = {"scores": float(np.max(np.abs(
                _sorted_scores(got["detection_scores"], count) -
                _sorted_scores(reference["detection_scores"], count)), initial=0.0))}
            found = runner.detections_from_outputs(got, scale, detections_per_box=1)
            placed = misplaced_boxes(found, _saved_model_detections(
                reference, letterboxed.shape, scale), SCORE_THRESHOLD)
            boxes = [b + p for b, p in zip(boxes, placed)]
        worst = {key: max(worst.get(key, 0.0), value) for key, value in differences.items()}
    passed = worst["scores"] <= tolerance
    boxes_line = ""
    if not raw:
        placed_well, placement = judge_misplaced(*boxes)
        passed = passed and placed_well
        boxes_line = "; " + placement
        worst.update(detections=boxes[0], misplaced=boxes[1])
    summary = ("%s vs float32 %s: max abs difference %s on %d image(s), score tolerance %g%s: %s"
               % (runner.info["quantization"], "Keras" if raw else "SavedModel",
                  ", ".join("%.3g (%s)" % (v, k) for k, v in worst.items()
                            if k not in ("detections", "misplaced")),
                  len(images), tolerance, boxes_line, "ok" if passed else "FAILED"))
    return CheckResult("%s_error" % runner.info["quantization"], passed, summary, worst)


def standard_checks(model, tflite_path: str, images: Sequence[np.ndarray]) -> List[CheckResult]:
    """The checks for the kind of `tflite_path` (its sidecar): float32 raw -> raw_parity,
    float32 detections -> detection_parity, float16 and int8 -> quantized_error with
    QUANTIZED_SCORE_TOLERANCE. The model's EMA weights are swapped in, as the export did."""
    from efficientdet_keras.exporters.strip import strip_for_export
    from efficientdet_keras.model.weights import averaged_weights
    from efficientdet_keras.inference.tflite_runner import read_sidecar
    info = read_sidecar(tflite_path)
    model = strip_for_export(model)
    with averaged_weights(model):
        if info["quantization"] != "float32":
            return [quantized_error(model, tflite_path, images,
                                    QUANTIZED_SCORE_TOLERANCE[info["quantization"]])]
        if info["outputs"] == "raw":
            return [raw_parity(model, tflite_path, images)]
        return [detection_parity(model, tflite_path, images)]
