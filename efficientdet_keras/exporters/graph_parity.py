"""Parity check of an exported graph file (.onnx or OpenVINO IR) against the detection
SavedModel's serving function.

`detection_parity` runs the file with its runtime (`graph_file_runner`: ONNX Runtime or
OpenVINO) and the SavedModel's serving_default function (the same pre-processing, network and
NMS in TensorFlow, with the NMS the file's sidecar names) on the same uint8 images, images of
one size as one batch, and compares each image's detections: the same number of them, and
each detection of one side paired with its own detection of the other side of the same class,
a score within 1e-4 and all four box coordinates within 1 pixel of the original image (the
classes and boxes of detections whose score ties with another's are not compared: see
`match_detections`). A float16 or int8 IR is checked as a quantized .tflite is, by its
largest score error and the share of its boxes found where the SavedModel's lie
(`quantized_error`). Each result is a `CheckResult` of parity.py, with a one-line summary.
"""

from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from efficientdet_keras.exporters.parity import (BOX_TOLERANCE_PIXELS, QUANTIZED_SCORE_TOLERANCE,
                                              SCORE_THRESHOLD, CheckResult, judge_misplaced,
                                              misplaced_boxes, saved_model_batch_detect)
from efficientdet_keras.inference.graph_file_runner import split_outputs
from efficientdet_keras.inference.loading import graph_file_runner
from efficientdet_keras.inference.images import group_by_shape

SCORE_TOLERANCE = 1e-4
# Soft-NMS files are compared above this score: below it an untrained model's candidates tie
# by the hundred, and soft-NMS, which rescores each remaining box after every pick, then
# depends on which tied box a runtime picks first.
SOFT_NMS_MIN_SCORE = 0.05


def match_detections(found: Dict[str, np.ndarray], reference: Dict[str, np.ndarray],
                     score_tolerance: float, pixel_tolerance: float) -> Dict[str, float]:
    """Pairs each detection of `found` with its own detection of `reference`: the same
    class, the score within score_tolerance and every box coordinate within
    pixel_tolerance (the closest box of those). Near-equal scores may come in either order.

    A detection left without such a partner whose score ties (within score_tolerance) with
    another detection's is then paired with a detection of that score, its class and box
    not compared: which of equally scored (anchor, class) candidates top-k and NMS keep is
    each runtime's own tie-break (an untrained model scores most anchors and classes alike).

    Returns:
      {"unmatched": detections of `found` without a partner, "tied": those paired by
      score alone, "max_score_difference" (over all pairs) and "max_box_difference" (over
      the pairs whose boxes were compared)}.
    """
    available = np.ones(len(reference["scores"]), bool)
    result = {"unmatched": 0, "tied": 0, "max_score_difference": 0.0,
              "max_box_difference": 0.0}

    def pair(index, score_error, box_error=None):
        available[index] = False
        result["max_score_difference"] = max(result["max_score_difference"],
                                             float(score_error))
        if box_error is not None:
            result["max_box_difference"] = max(result["max_box_difference"], float(box_error))

    left = []
    for i, (box, score, cls) in enumerate(zip(found["boxes"], found["scores"],
                                              found["classes"])):
        box_error = np.max(np.abs(reference["boxes"] - box), axis=-1, initial=0.0)
        score_error = np.abs(reference["scores"] - score)
        candidates = np.flatnonzero(available & (reference["classes"] == cls) &
                                    (score_error <= score_tolerance) &
                                    (box_error <= pixel_tolerance))
        if candidates.size:
            best = candidates[np.argmin(box_error[candidates])]
            pair(best, score_error[best], box_error[best])
        else:
            left.append(i)
    # Ties second, so that they cannot take a detection another one matches exactly.
    for i in left:
        score_error = np.abs(reference["scores"] - found["scores"][i])
        same_score = score_error <= score_tolerance
        tied = np.sum(same_score) > 1 or np.sum(
            np.abs(found["scores"] - found["scores"][i]) <= score_tolerance) > 1
        candidates = np.flatnonzero(available & same_score)
        if tied and candidates.size:
            pair(candidates[0], score_error[candidates[0]])
            result["tied"] += 1
        else:
            result["unmatched"] += 1
    return result


def _compared(outputs: Dict[str, np.ndarray], runner, size, min_score: float):
    found = runner.detections_from_outputs(outputs, image_size=size)
    keep = found["scores"] > min_score
    return {key: value[keep] for key, value in found.items()}


def _batches(runner, images: Sequence[np.ndarray], reference_detect: Callable):
    """(image index, the file's outputs, the SavedModel's outputs) per image, one batch per
    image size."""
    for indices in group_by_shape(images):
        batch = np.stack([images[i] for i in indices])
        got, expected = runner.run(batch), reference_detect(batch)
        yield from zip(indices, split_outputs(got), split_outputs(expected))


def detection_parity(model, path: str, images: Sequence[np.ndarray],
                     score_tolerance: float = SCORE_TOLERANCE,
                     pixel_tolerance: float = BOX_TOLERANCE_PIXELS,
                     reference_detect: Optional[Callable] = None,
                     min_score: Optional[float] = None) -> CheckResult:
    """Detections of the file vs the detection SavedModel's on uint8 [h, w, 3] `images` (see
    the module doc and `match_detections`), with the NMS the file runs (its sidecar's).

    reference_detect: uint8 [B, h, w, 3] -> SavedModel outputs (a loaded SavedModel's
    signature running that NMS, say); default: `saved_model_batch_detect`. min_score: only
    detections above it are compared (default: SOFT_NMS_MIN_SCORE for soft-NMS, else all).
    """
    runner = graph_file_runner(path)
    nms_method = runner.config.nms_configs.method
    reference_detect = reference_detect or saved_model_batch_detect(model, nms_method)
    if min_score is None:
        min_score = SOFT_NMS_MIN_SCORE if nms_method == "gaussian" else 0.0
    totals = {"compared": 0, "unmatched": 0, "tied": 0, "other_counts": 0,
              "max_score_difference": 0.0, "max_box_difference": 0.0}
    for index, one_got, one_expected in _batches(runner, images, reference_detect):
        size = images[index].shape[:2]
        found = _compared(one_got, runner, size, min_score)
        reference = _compared(one_expected, runner, size, min_score)
        totals["compared"] += len(reference["scores"])
        totals["other_counts"] += int(len(found["scores"]) != len(reference["scores"]))
        matched = match_detections(found, reference, score_tolerance, pixel_tolerance)
        for key, value in matched.items():
            if key.startswith("max_"):
                totals[key] = max(totals[key], value)
            else:
                totals[key] += value
    passed = totals["unmatched"] == 0 and totals["other_counts"] == 0
    verdict = "ok" if passed else "FAILED"
    if totals["compared"] == 0:
        verdict += " (nothing to compare: no detections on these images)"
    tied = ""
    if totals["tied"]:
        tied = ("; %d tie in score with another detection, their classes and boxes not "
                "compared" % totals["tied"])
    above = " above %g" % min_score if min_score else ""
    summary = ("detections vs SavedModel (%s NMS): %d of %d detections%s unmatched (same "
               "class, score within %g, box within %g px%s), %d of %d image(s) with another "
               "count; max difference %.2g (scores), %.2g px (boxes): %s"
               % (nms_method, totals["unmatched"], totals["compared"], above, score_tolerance,
                  pixel_tolerance, tied, totals["other_counts"], len(images),
                  totals["max_score_difference"], totals["max_box_difference"], verdict))
    return CheckResult("detection_parity", passed, summary, totals)


def quantized_error(model, path: str, images: Sequence[np.ndarray],
                    precision: str) -> CheckResult:
    """A float16 or int8 file against the float32 SavedModel (same NMS), image by image: the
    max abs difference between the sorted detection scores, and the detections above
    SCORE_THRESHOLD without a SavedModel box of their class at IoU >= MIN_QUANTIZED_IOU
    (parity.misplaced_boxes). Passes when the scores' error is within
    QUANTIZED_SCORE_TOLERANCE[precision] and at most MAX_MISPLACED of the detections are
    misplaced, as for a quantized .tflite."""
    runner = graph_file_runner(path)
    reference_detect = saved_model_batch_detect(model, runner.config.nms_configs.method)
    tolerance = QUANTIZED_SCORE_TOLERANCE[precision]
    worst, detections, misplaced = 0.0, 0, 0
    for index, one_got, one_expected in _batches(runner, images, reference_detect):
        size = images[index].shape[:2]
        got = runner.detections_from_outputs(one_got, image_size=size)
        expected = runner.detections_from_outputs(one_expected, image_size=size)
        count = min(len(got["scores"]), len(expected["scores"]))
        worst = max(worst, float(np.max(np.abs(
            np.sort(got["scores"])[::-1][:count] - np.sort(expected["scores"])[::-1][:count]),
            initial=0.0)))
        found, missing = misplaced_boxes(got, expected, SCORE_THRESHOLD)
        detections, misplaced = detections + found, misplaced + missing
    placed_well, placement = judge_misplaced(detections, misplaced)
    passed = worst <= tolerance and placed_well
    summary = ("%s vs float32 SavedModel: max abs difference %.3g (scores) on %d image(s), "
               "score tolerance %g; %s: %s"
               % (precision, worst, len(images), tolerance, placement,
                  "ok" if passed else "FAILED"))
    return CheckResult("%s_error" % precision, passed, summary,
                       {"scores": worst, "detections": detections, "misplaced": misplaced})


def standard_checks(model, path: str, images: Sequence[np.ndarray],
                    fold_batch_norm: bool = True) -> List[CheckResult]:
    """The check of the file's kind (`detection_parity`, or `quantized_error` for a float16
    or int8 file) against the network the export converted: the model stripped of pruning
    wrappers, its EMA weights swapped in, BatchNorm folded as asked."""
    from efficientdet_keras.exporters.strip import strip_for_export
    from efficientdet_keras.inference.serving_graph import float32_serving_network
    from efficientdet_keras.inference.sidecar import read_sidecar
    from efficientdet_keras.model.weights import averaged_weights
    precision = read_sidecar(path, "onnx" if path.endswith(".onnx") else "openvino").get(
        "precision", "float32")
    model = strip_for_export(model)
    with averaged_weights(model):
        network = float32_serving_network(model, fold_batch_norm)
        if precision == "float32":
            return [detection_parity(network, path, images)]
        return [quantized_error(network, path, images, precision)]
