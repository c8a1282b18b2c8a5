"""Which classes are found as which: a confusion matrix of a COCO evaluation's detections.

    matrix = confusion_matrix(evaluator.groundtruth_dataset(), evaluator.detection_results())
    matrix.summary()          # {"false_positives": 12, "missed": 7, "confused": 3}
    write_confusion_matrix(matrix, "runs/demo/confusion_matrix", "epoch-3", "epoch 3")

counts[t, p] counts the boxes of true class t detected as class p. Rows are the K classes in
the order of the ground truth's categories, then "background"; columns likewise. A detection
scoring at least the score threshold is matched, whatever its class, to a ground-truth box it
overlaps with IoU >= the IoU threshold, so a cat detected as a dog counts at [cat, dog].
Matching is greedy and one-to-one, as in COCO: detections in order of score, each takes the
free box it overlaps most. A detection left over is a false positive at [background, p]; a
box left over is a miss at [t, background]. A crowd box (iscrowd 1) is never a miss, and a
left-over detection that overlaps one at the threshold is ignored; that overlap is measured
as COCO does, the intersection over the detection's own area. Detections and boxes of a
category the ground truth does not list are left out, as COCO scoring leaves them out.

The defaults:
  SCORE_THRESHOLD 0.3  the evaluation keeps detections down to a score of 0.001 for AP,
                       which would bury the matrix in false positives no one acts on; 0.3
                       is also the score from which the evaluation images draw a detection
                       (image_score_threshold), so the matrix counts what the pictures show.
  IOU_THRESHOLD 0.5    AP50's threshold: a pair that counts as found for AP50 counts here.
"""

import csv
import dataclasses
import io
import os
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from efficientdet_keras.utils.fileio import write_text_atomically
from efficientdet_keras.utils.figures import matplotlib_available, new_figure, save_figure

CONFUSION_MATRIX_DIR = "confusion_matrix"
SCORE_THRESHOLD = 0.3
IOU_THRESHOLD = 0.5
BACKGROUND = "background"
# Above this many rows the cells are too small to hold their counts legibly.
_MAX_WRITTEN_ROWS = 30
# Inches of figure per row of the matrix, within these bounds of the figure's side (90
# classes at 100 dpi still fit a 1600-pixel picture).
_INCHES_PER_ROW = 0.45
_MIN_SIDE, _MAX_SIDE = 5.0, 16.0


@dataclasses.dataclass
class ConfusionMatrix:
    """counts: int64 [K + 1, K + 1], rows the true class, columns the predicted one, the
    last of each "background". names: the K class names, then "background". category_ids:
    [K] the category of each row and column."""
    counts: np.ndarray
    names: List[str]
    category_ids: List[int]
    score_threshold: float
    iou_threshold: float

    def summary(self) -> Dict[str, int]:
        """Three numbers for a log line: unmatched detections, unmatched boxes, and boxes
        found with a wrong class."""
        classes = self.counts[:-1, :-1]
        return {"false_positives": int(self.counts[-1, :-1].sum()),
                "missed": int(self.counts[:-1, -1].sum()),
                "confused": int(classes.sum() - np.trace(classes))}

    def to_csv(self, path: str) -> str:
        """Writes the matrix as CSV, crash-safely: a header of the predicted names, then a
        row per true class led by its name. Returns `path`."""
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(["true \\ predicted"] + self.names)
        for name, row in zip(self.names, self.counts.tolist()):
            writer.writerow([name] + row)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        return write_text_atomically(path, buffer.getvalue())

    def to_text(self) -> str:
        """The matrix as an aligned text table (rows: true class, columns: predicted)."""
        header = ["true \\ predicted"] + self.names
        rows = [[name] + [str(n) for n in row]
                for name, row in zip(self.names, self.counts.tolist())]
        widths = [max(len(line[i]) for line in [header] + rows) for i in range(len(header))]
        lines = [header] + rows
        return "\n".join(
            "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                      for i, (cell, w) in enumerate(zip(line, widths))).rstrip()
            for line in lines)


def confusion_matrix(groundtruth: dict, results: Sequence[dict],
                     score_threshold: float = SCORE_THRESHOLD,
                     iou_threshold: float = IOU_THRESHOLD) -> ConfusionMatrix:
    """The confusion matrix of COCO results against COCO ground truth (see the module doc).

    Args:
      groundtruth: a COCO dict: "annotations" (image_id, bbox [x, y, w, h], category_id,
        iscrowd) and "categories" (id, name), e.g. COCOEvaluator.groundtruth_dataset().
      results: COCO results (image_id, bbox [x, y, w, h], score, category_id), e.g.
        COCOEvaluator.detection_results().
      score_threshold: the lowest score of a counted detection, in [0, 1].
      iou_threshold: the lowest IoU of a matched pair, in (0, 1].
    Raises:
      ValueError for a threshold out of range.
    """
    check_thresholds(score_threshold, iou_threshold)
    categories = groundtruth.get("categories") or []
    category_ids = [int(c["id"]) for c in categories]
    names = [str(c.get("name", c["id"])) for c in categories] + [BACKGROUND]
    index = {category_id: k for k, category_id in enumerate(category_ids)}
    background = len(category_ids)

    truth = _Boxes.of(groundtruth.get("annotations") or [], index)
    scores = np.fromiter((r["score"] for r in results), np.float64, len(results))
    detections = _Boxes.of([r for r, kept in zip(results, scores >= score_threshold) if kept],
                           index, scores=True)
    true_rows, predicted_columns = [], []
    for image_id in np.union1d(truth.image_ids, detections.image_ids):
        rows, columns = _match_image(truth.of_image(image_id), detections.of_image(image_id),
                                     iou_threshold, background)
        true_rows.append(rows)
        predicted_columns.append(columns)
    size = background + 1
    cells = (np.concatenate(true_rows) * size + np.concatenate(predicted_columns)
             if true_rows else np.zeros(0, np.int64))
    counts = np.bincount(cells, minlength=size * size).astype(np.int64).reshape(size, size)
    return ConfusionMatrix(counts, names, category_ids, float(score_threshold),
                           float(iou_threshold))


def check_thresholds(score_threshold: float, iou_threshold: float) -> None:
    """ValueError unless 0 <= score_threshold <= 1 and 0 < iou_threshold <= 1."""
    if not 0.0 <= score_threshold <= 1.0:
        raise ValueError("the confusion matrix's score threshold must be in [0, 1], got %s"
                         % score_threshold)
    if not 0.0 < iou_threshold <= 1.0:
        raise ValueError("the confusion matrix's IoU threshold must be in (0, 1], got %s"
                         % iou_threshold)


def write_confusion_matrix(matrix: ConfusionMatrix, directory: str, name: str,
                           title: str) -> Tuple[str, Optional[str]]:
    """Writes <directory>/<name>.csv and, with matplotlib, <name>.png; returns both paths
    (the PNG's None without matplotlib)."""
    csv_path = matrix.to_csv(os.path.join(directory, name + ".csv"))
    return csv_path, plot_confusion_matrix(matrix, os.path.join(directory, name + ".png"), title)


def plot_confusion_matrix(matrix: ConfusionMatrix, path: str, title: str,
                          normalize: bool = True) -> Optional[str]:
    """A PNG heat map, the counts written in the cells (up to 30 rows); returns `path`, or
    None without matplotlib.

    normalize: colour each row by its share of the row's total, so that rare classes show
      as clearly as common ones (the written numbers stay counts).
    """
    if not matplotlib_available():
        return None
    counts = matrix.counts
    if normalize:
        totals = counts.sum(axis=1, keepdims=True)
        shade = counts / np.maximum(totals, 1)
    else:
        shade = counts.astype(np.float64)
    size = len(matrix.names)
    side = min(max(_MIN_SIDE, _INCHES_PER_ROW * size + 2.0), _MAX_SIDE)
    figure = new_figure()
    figure.set_size_inches(side + 1.0, side)
    axes = figure.subplots()
    image = axes.imshow(shade, cmap="Blues", vmin=0.0,
                        vmax=1.0 if normalize else max(float(shade.max()), 1.0))
    figure.colorbar(image, ax=axes, shrink=0.8, aspect=30,
                    label="share of the row" if normalize else "count")
    if size <= _MAX_WRITTEN_ROWS:
        # Dark text on light cells, light text on dark ones.
        middle = 0.5 * (1.0 if normalize else max(float(shade.max()), 1.0))
        for (row, column), count in np.ndenumerate(counts):
            if count:
                axes.text(column, row, str(count), ha="center", va="center",
                          fontsize="small" if size <= 15 else "x-small",
                          color="white" if shade[row, column] > middle else "black")
    font = "small" if size <= 15 else "x-small"
    axes.set_xticks(range(size), matrix.names, rotation=90, fontsize=font)
    axes.set_yticks(range(size), matrix.names, fontsize=font)
    axes.set_xlabel("predicted")
    axes.set_ylabel("true")
    axes.set_title("Confusion matrix, %s (score >= %.2f, IoU >= %.2f)"
                   % (title, matrix.score_threshold, matrix.iou_threshold), fontsize="medium")
    return save_figure(figure, path)


@dataclasses.dataclass
class _Boxes:
    """Boxes grouped by image: image_ids sorted, boxes [N, 4] (x1, y1, x2, y2), classes [N]
    (row or column indices), and crowd flags (ground truth) or scores (detections); within
    an image detections run from the highest score down."""
    image_ids: np.ndarray
    boxes: np.ndarray
    classes: np.ndarray
    crowd: np.ndarray
    starts: Dict[int, Tuple[int, int]]

    @classmethod
    def of(cls, entries: Sequence[dict], index: Dict[int, int], scores: bool = False):
        entries = [e for e in entries if int(e["category_id"]) in index]
        n = len(entries)
        image_ids = np.fromiter((e["image_id"] for e in entries), np.int64, n)
        boxes = np.array([e["bbox"] for e in entries], np.float64).reshape(n, 4)
        boxes[:, 2:] += boxes[:, :2]
        classes = np.fromiter((index[int(e["category_id"])] for e in entries), np.int64, n)
        if scores:  # By image, then score from high to low (lexsort is stable: ties keep order).
            crowd = np.zeros(n, bool)
            order = np.lexsort((-np.fromiter((e["score"] for e in entries), np.float64, n),
                                image_ids))
        else:
            crowd = np.fromiter((bool(e.get("iscrowd", 0)) for e in entries), bool, n)
            order = np.argsort(image_ids, kind="stable")
        image_ids, boxes, classes, crowd = (image_ids[order], boxes[order], classes[order],
                                            crowd[order])
        unique, first, number = np.unique(image_ids, return_index=True, return_counts=True)
        starts = {int(i): (int(s), int(s + c)) for i, s, c in zip(unique, first, number)}
        return cls(unique, boxes, classes, crowd, starts)

    def of_image(self, image_id) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        start, end = self.starts.get(int(image_id), (0, 0))
        return self.boxes[start:end], self.classes[start:end], self.crowd[start:end]


def _match_image(truth, detections, iou_threshold: float,
                 background: int) -> Tuple[np.ndarray, np.ndarray]:
    """The (true row, predicted column) of every count one image adds."""
    truth_boxes, truth_classes, crowd = truth
    boxes, classes, _ = detections
    crowd_boxes = truth_boxes[crowd]
    truth_boxes, truth_classes = truth_boxes[~crowd], truth_classes[~crowd]
    taken = np.zeros(len(truth_boxes), bool)
    matched = np.full(len(boxes), -1, np.int64)  # The box each detection took.
    if len(boxes) and len(truth_boxes):
        iou = _iou(boxes, truth_boxes)
        close = iou >= iou_threshold
        # Only detections near some box need the greedy walk, in score order.
        for d in np.flatnonzero(close.any(axis=1)):
            free = np.where(close[d] & ~taken, iou[d], -1.0)
            t = int(free.argmax())
            if free[t] >= 0.0:
                taken[t] = True
                matched[d] = t
    left = matched < 0
    if len(crowd_boxes) and left.any():
        left[left] = _covered(boxes[left], crowd_boxes).max(axis=1) < iou_threshold
    pairs = matched >= 0
    rows = np.concatenate([truth_classes[matched[pairs]],
                           np.full(int(left.sum()), background),
                           truth_classes[~taken]])
    columns = np.concatenate([classes[pairs], classes[left],
                              np.full(int((~taken).sum()), background)])
    return rows.astype(np.int64), columns.astype(np.int64)


def _intersection(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """[N, M] intersection areas of boxes a [N, 4] and b [M, 4] (x1, y1, x2, y2)."""
    width = np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0])
    height = np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1])
    return np.clip(width, 0.0, None) * np.clip(height, 0.0, None)


def _area(boxes: np.ndarray) -> np.ndarray:
    return np.clip(boxes[:, 2] - boxes[:, 0], 0.0, None) * np.clip(boxes[:, 3] - boxes[:, 1],
                                                                   0.0, None)


def _iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """[N, M] IoU; 0 where both boxes are empty."""
    inter = _intersection(a, b)
    union = _area(a)[:, None] + _area(b)[None, :] - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)


def _covered(a: np.ndarray, crowd: np.ndarray) -> np.ndarray:
    """[N, M] share of each box of `a` inside each crowd box (COCO's IoU with a crowd)."""
    inter = _intersection(a, crowd)
    area = _area(a)[:, None]
    return np.divide(inter, area, out=np.zeros_like(inter), where=area > 0)
