"""Parity check of an exported .onnx against the detection SavedModel's serving function.

`detection_parity` runs the .onnx with ONNX Runtime (`ONNXDetector`) and the SavedModel's
serving_default function (the same pre-processing, network and NMS in TensorFlow) on
the same uint8 images, images of one size as one batch, and compares each image's
detections: the same number of them, and each detection of one side paired with its own
detection of the other side of the same class, a score within 1e-4 and all four box
coordinates within 1 pixel of the original image (the classes and boxes of detections whose
score ties with another's are not compared: see `match_detections`). The result is a
`CheckResult` of tflite_parity, with a one-line summary.
"""

from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from efficientdet_keras.export.tflite_parity import (BOX_TOLERANCE_PIXELS, CheckResult,
                                                     saved_model_batch_detect)
from efficientdet_keras.inference.images import group_by_shape

SCORE_TOLERANCE = 1e-4


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


def detection_parity(model, onnx_path: str, images: Sequence[np.ndarray],
                     score_tolerance: float = SCORE_TOLERANCE,
                     pixel_tolerance: float = BOX_TOLERANCE_PIXELS,
                     reference_detect: Optional[Callable] = None) -> CheckResult:
    """Detections of the .onnx vs the detection SavedModel's on uint8 [h, w, 3] `images`
    (see the module doc and `match_detections`), with the NMS the file runs (its sidecar's).

    reference_detect: uint8 [B, h, w, 3] -> SavedModel outputs (a loaded SavedModel's
    signature running that NMS, say); default: `saved_model_batch_detect`.
    """
    from efficientdet_keras.inference.onnx_runner import ONNXDetector, split_outputs
    runner = ONNXDetector(onnx_path)
    nms_method = runner.config.nms_configs.method
    reference_detect = reference_detect or saved_model_batch_detect(model, nms_method)
    totals = {"compared": 0, "unmatched": 0, "tied": 0, "other_counts": 0,
              "max_score_difference": 0.0, "max_box_difference": 0.0}
    for indices in group_by_shape(images):
        batch = np.stack([images[i] for i in indices])
        got, expected = runner.run(batch), reference_detect(batch)
        for index, one_got, one_expected in zip(indices, split_outputs(got),
                                                split_outputs(expected)):
            size = images[index].shape[:2]
            found = runner.detections_from_outputs(one_got, image_size=size)
            reference = runner.detections_from_outputs(one_expected, image_size=size)
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
    summary = ("detections vs SavedModel (%s NMS): %d of %d detections unmatched (same class, "
               "score within %g, box within %g px%s), %d of %d image(s) with another count; "
               "max difference %.2g (scores), %.2g px (boxes): %s"
               % (nms_method, totals["unmatched"], totals["compared"], score_tolerance, pixel_tolerance,
                  tied, totals["other_counts"], len(images), totals["max_score_difference"],
                  totals["max_box_difference"], verdict))
    return CheckResult("detection_parity", passed, summary, totals)


def standard_checks(model, onnx_path: str, images: Sequence[np.ndarray],
                    fold_batch_norm: bool = True) -> List[CheckResult]:
    """`detection_parity` against the network the export converted: the model stripped of
    pruning wrappers, its EMA weights swapped in, BatchNorm folded as asked."""
    from efficientdet_keras.export.onnx import serving_network
    from efficientdet_keras.export.strip import strip_for_export
    from efficientdet_keras.model.weights import averaged_weights
    model = strip_for_export(model)
    with averaged_weights(model):
        return [detection_parity(serving_network(model, fold_batch_norm), onnx_path, images)]
