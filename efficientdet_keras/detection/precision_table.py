"""The precision table of a COCO evaluation: what COCOEvaluator accumulates and the
precision-recall curves are drawn from."""

import dataclasses
from typing import List

import numpy as np


@dataclasses.dataclass
class AccumulatedPrecision:
    """The precision table of one COCO evaluation (pycocotools' `eval["precision"]`).

    precision: [T, R, K, A, M] precision at IoU threshold t, recall threshold r, category k,
      area range a (0: all) and detection limit m (-1: 100); -1 where category k has no
      ground truth.
    iou_thresholds: [T] (0.5, 0.55, ..., 0.95). recall_thresholds: [R] (0, 0.01, ..., 1).
    category_ids: [K] the category of each k. names: [K] their names (the label map's, else
      the id as text).
    """
    precision: np.ndarray
    iou_thresholds: np.ndarray
    recall_thresholds: np.ndarray
    category_ids: List[int]
    names: List[str]
