"""Precision-recall curves per class from a COCO evaluation's precision table.

pycocotools (and faster-coco-eval) accumulate precision at 101 recall thresholds for each
IoU threshold, class, area range and detection limit; AP is the mean of those values. A
class's curve here is that row at one IoU threshold, all areas, 100 detections: exactly
what its AP50 (at IoU 0.5) averages.

    evaluator.result()
    curves = precision_recall_curves(evaluator.last_precision)         # at IoU 0.5
    plot_precision_recall(curves, "runs/demo/pr_curves/epoch-3.png", "epoch 3")
"""

import dataclasses
from typing import List, Optional

import numpy as np

from efficientdet_keras.detection.precision_table import AccumulatedPrecision
from efficientdet_keras.utils.figures import matplotlib_available, new_figure, save_figure

PR_CURVES_DIR = "pr_curves"


@dataclasses.dataclass
class ClassCurve:
    """One class's precision [R] at the recall thresholds recall [R], and their mean `ap`."""
    name: str
    category_id: int
    recall: np.ndarray
    precision: np.ndarray
    ap: float


def precision_recall_curves(accumulated: AccumulatedPrecision,
                            iou_threshold: float = 0.5) -> List[ClassCurve]:
    """The curve of each class with ground truth, at one of the evaluation's IoU thresholds.

    Raises:
      ValueError when `iou_threshold` is not one of accumulated.iou_thresholds.
    """
    matches = np.flatnonzero(np.isclose(accumulated.iou_thresholds, iou_threshold))
    if not len(matches):
        raise ValueError("IoU threshold %s is not one of the evaluation's (%s)" % (
            iou_threshold, ", ".join("%.2f" % t for t in accumulated.iou_thresholds)))
    curves = []
    for k, (category_id, name) in enumerate(zip(accumulated.category_ids, accumulated.names)):
        precision = accumulated.precision[matches[0], :, k, 0, -1]  # All areas, 100 detections.
        if np.all(precision == -1):  # No ground truth of this class.
            continue
        curves.append(ClassCurve(name, category_id, accumulated.recall_thresholds.copy(),
                                 precision.copy(), float(precision.mean())))
    return curves


def plot_precision_recall(curves: List[ClassCurve], path: str, title: str,
                          iou_threshold: float = 0.5) -> Optional[str]:
    """One PNG, a line per class labelled "<name> (AP50 0.812)"; returns `path`, or None
    without matplotlib or curves."""
    if not curves or not matplotlib_available():
        return None
    figure = new_figure()
    axes = figure.subplots()
    ap_name = "AP%d" % round(iou_threshold * 100)
    for curve in curves:
        axes.plot(curve.recall, curve.precision, label="%s (%s %.3f)" % (
            curve.name, ap_name, curve.ap))
    axes.set_xlim(0, 1)
    axes.set_ylim(0, 1.02)
    axes.set_xlabel("recall")
    axes.set_ylabel("precision")
    axes.set_title("Precision-recall at IoU %.2f, %s" % (iou_threshold, title))
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize="small", loc="lower left")
    return save_figure(figure, path)
