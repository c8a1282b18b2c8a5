"""The confusion matrix of an evaluation (reports.confusion_matrix): counts worked out by
hand on a few boxes, the greedy one-to-one matching, crowds, the CSV and the picture."""

import sys

import numpy as np
import pytest
from PIL import Image

from efficientdet_keras.reports.confusion_matrix import (
    BACKGROUND, CONFUSION_MATRIX_DIR, IOU_THRESHOLD, SCORE_THRESHOLD, confusion_matrix,
    plot_confusion_matrix, write_confusion_matrix)
from efficientdet_keras.utils import figures

pytestmark = pytest.mark.quick  # All of this file is in the inner-loop set.

CATEGORIES = [{"id": 1, "name": "circle"}, {"id": 2, "name": "square"},
              {"id": 3, "name": "triangle"}]
CIRCLE, SQUARE, TRIANGLE, BG = 0, 1, 2, 3  # Rows and columns with CATEGORIES.


def truth(*annotations, categories=CATEGORIES):
    """A COCO ground-truth dict of (image_id, [x, y, w, h], category_id[, iscrowd]) tuples."""
    rows = [{"id": i + 1, "image_id": a[0], "bbox": list(a[1]), "category_id": a[2],
             "iscrowd": a[3] if len(a) > 3 else 0} for i, a in enumerate(annotations)]
    images = sorted({a[0] for a in annotations})
    return {"images": [{"id": i} for i in images], "annotations": rows,
            "categories": categories}


def found(*detections):
    """COCO results of (image_id, [x, y, w, h], score, category_id) tuples."""
    return [{"image_id": d[0], "bbox": list(d[1]), "score": d[2], "category_id": d[3]}
            for d in detections]


def cells(matrix):
    """{(row, column): count} of the non-zero cells."""
    return {(int(r), int(c)): int(matrix.counts[r, c])
            for r, c in zip(*np.nonzero(matrix.counts))}


def test_defaults_are_the_eval_images_score_and_ap50():
    assert (SCORE_THRESHOLD, IOU_THRESHOLD, CONFUSION_MATRIX_DIR) == (0.3, 0.5,
                                                                      "confusion_matrix")


def test_a_found_box_a_confused_one_a_false_positive_and_a_miss():
    groundtruth = truth((1, [0, 0, 10, 10], 1),        # found as a circle
                        (1, [20, 20, 10, 10], 2),      # a square found as a circle
                        (2, [0, 0, 10, 10], 3))        # a triangle nobody found
    results = found((1, [0, 0, 10, 10], 0.9, 1),
                    (1, [21, 20, 10, 10], 0.8, 1),     # IoU 90/110 with the square
                    (2, [50, 50, 10, 10], 0.7, 2))     # a square where there is nothing
    matrix = confusion_matrix(groundtruth, results)
    assert matrix.counts.dtype == np.int64 and matrix.counts.shape == (4, 4)
    assert matrix.names == ["circle", "square", "triangle", BACKGROUND]
    assert matrix.category_ids == [1, 2, 3]
    assert (matrix.score_threshold, matrix.iou_threshold) == (0.3, 0.5)
    assert cells(matrix) == {(CIRCLE, CIRCLE): 1, (SQUARE, CIRCLE): 1, (TRIANGLE, BG): 1,
                             (BG, SQUARE): 1}
    assert matrix.summary() == {"false_positives": 1, "missed": 1, "confused": 1}


def test_the_score_threshold_leaves_weak_detections_out():
    groundtruth = truth((1, [0, 0, 10, 10], 1), (1, [20, 20, 10, 10], 2))
    results = found((1, [0, 0, 10, 10], 0.29, 1),      # below 0.3: the circle is missed
                    (1, [20, 20, 10, 10], 0.3, 2),     # at 0.3: counts
                    (1, [60, 60, 10, 10], 0.1, 3))     # a weak false positive: not counted
    assert cells(confusion_matrix(groundtruth, results)) == {(CIRCLE, BG): 1,
                                                             (SQUARE, SQUARE): 1}
    assert cells(confusion_matrix(groundtruth, results, score_threshold=0.05)) == {
        (CIRCLE, CIRCLE): 1, (SQUARE, SQUARE): 1, (BG, TRIANGLE): 1}


def test_the_iou_threshold_decides_a_match():
    groundtruth = truth((1, [0, 0, 10, 10], 1), (2, [0, 0, 10, 10], 1))
    results = found((1, [0, 0, 10, 4], 0.9, 1),        # IoU 0.4
                    (2, [0, 0, 10, 5], 0.9, 1))        # IoU 0.5 exactly: a match at 0.5
    assert cells(confusion_matrix(groundtruth, results)) == {
        (CIRCLE, CIRCLE): 1, (CIRCLE, BG): 1, (BG, CIRCLE): 1}
    assert cells(confusion_matrix(groundtruth, results, iou_threshold=0.4)) == {
        (CIRCLE, CIRCLE): 2}
    assert cells(confusion_matrix(groundtruth, results, iou_threshold=0.6)) == {
        (CIRCLE, BG): 2, (BG, CIRCLE): 2}


def test_matching_is_one_to_one_in_score_order():
    groundtruth = truth((1, [0, 0, 10, 10], 1))
    # Listed weakest first: the square scores higher, so it takes the box, whatever the
    # circle's class says; the circle is then a false positive.
    results = found((1, [0, 0, 10, 10], 0.6, 1), (1, [0, 0, 10, 9], 0.8, 2))
    matrix = confusion_matrix(groundtruth, results)
    assert cells(matrix) == {(CIRCLE, SQUARE): 1, (BG, CIRCLE): 1}
    assert matrix.summary() == {"false_positives": 1, "missed": 0, "confused": 1}


def test_each_detection_takes_the_free_box_it_overlaps_most():
    groundtruth = truth((1, [0, 0, 10, 10], 1), (1, [2, 0, 10, 10], 2))
    # The first detection is the square's box: it takes the square (IoU 1) over the circle
    # (IoU 80/120). The second, on the circle's box, finds the circle still free.
    results = found((1, [2, 0, 10, 10], 0.9, 3), (1, [0, 0, 10, 10], 0.8, 3))
    assert cells(confusion_matrix(groundtruth, results)) == {(SQUARE, TRIANGLE): 1,
                                                             (CIRCLE, TRIANGLE): 1}
    # When the best box is taken, a detection takes the next one above the threshold.
    results = found((1, [0, 0, 10, 10], 0.9, 1), (1, [0, 0, 10, 10], 0.8, 2))
    assert cells(confusion_matrix(groundtruth, results)) == {(CIRCLE, CIRCLE): 1,
                                                             (SQUARE, SQUARE): 1}


def test_crowds_absorb_detections_and_are_never_missed():
    groundtruth = truth((1, [0, 0, 100, 100], 1, 1),   # a crowd of circles
                        (1, [10, 10, 10, 10], 1),      # one circle inside it
                        (2, [0, 0, 50, 50], 2, 1))     # a crowd nobody detects
    results = found((1, [10, 10, 10, 10], 0.9, 1),     # the circle
                    (1, [10, 10, 10, 10], 0.8, 1),     # again: inside the crowd, ignored
                    (1, [50, 50, 20, 20], 0.7, 3),     # inside the crowd (IoU 0.04): ignored
                    (1, [90, 90, 20, 20], 0.7, 2))     # a quarter inside: a false positive
    matrix = confusion_matrix(groundtruth, results)
    assert cells(matrix) == {(CIRCLE, CIRCLE): 1, (BG, SQUARE): 1}


def test_images_without_boxes_or_detections_add_nothing():
    groundtruth = truth((1, [0, 0, 10, 10], 1))
    groundtruth["images"].append({"id": 7})            # neither boxes nor detections
    results = found((1, [0, 0, 10, 10], 0.9, 1), (8, [0, 0, 10, 10], 0.9, 2))
    assert cells(confusion_matrix(groundtruth, results)) == {(CIRCLE, CIRCLE): 1,
                                                             (BG, SQUARE): 1}
    empty = confusion_matrix({"images": [{"id": 7}], "annotations": [],
                              "categories": CATEGORIES}, [])
    assert empty.counts.shape == (4, 4) and not empty.counts.any()
    nothing = confusion_matrix({"images": [], "annotations": [], "categories": []}, [])
    assert nothing.names == [BACKGROUND] and nothing.counts.tolist() == [[0]]


def test_rows_follow_the_categories_and_unknown_classes_are_left_out():
    categories = [{"id": 9, "name": "cross"}, {"id": 4, "name": "star"}]
    groundtruth = truth((1, [0, 0, 10, 10], 4), (1, [40, 40, 10, 10], 5),
                        categories=categories)
    results = found((1, [0, 0, 10, 10], 0.9, 9), (1, [40, 40, 10, 10], 0.9, 4),
                    (1, [80, 80, 10, 10], 0.9, 6))
    matrix = confusion_matrix(groundtruth, results)
    assert matrix.names == ["cross", "star", BACKGROUND] and matrix.category_ids == [9, 4]
    # The star found as a cross; the box of category 5 is not a ground truth category, so
    # the star detection on it is a false positive; category 6 is not counted at all.
    assert cells(matrix) == {(1, 0): 1, (2, 1): 1}


def test_bad_thresholds_are_refused():
    with pytest.raises(ValueError, match="score threshold must be in"):
        confusion_matrix(truth(), [], score_threshold=1.5)
    with pytest.raises(ValueError, match="IoU threshold must be in"):
        confusion_matrix(truth(), [], iou_threshold=0.0)


def reference_counts(groundtruth, results, score_threshold, iou_threshold):
    """The rules of the module doc, written out pair by pair."""
    ids = [c["id"] for c in groundtruth["categories"]]
    k = len(ids)
    counts = np.zeros((k + 1, k + 1), np.int64)

    def xyxy(b):
        return b[0], b[1], b[0] + b[2], b[1] + b[3]

    def inter(a, b):
        (ax1, ay1, ax2, ay2), (bx1, by1, bx2, by2) = xyxy(a), xyxy(b)
        return max(0.0, min(ax2, bx2) - max(ax1, bx1)) * max(0.0, min(ay2, by2) - max(ay1, by1))

    for image in {a["image_id"] for a in groundtruth["annotations"]} | {
            r["image_id"] for r in results}:
        boxes = [a for a in groundtruth["annotations"] if a["image_id"] == image]
        plain = [a for a in boxes if not a["iscrowd"]]
        crowds = [a for a in boxes if a["iscrowd"]]
        dets = sorted([r for r in results if r["image_id"] == image
                       and r["score"] >= score_threshold], key=lambda r: -r["score"])
        taken = set()
        for det in dets:
            best, best_iou = None, -1.0
            for j, box in enumerate(plain):
                i = inter(det["bbox"], box["bbox"])
                union = det["bbox"][2] * det["bbox"][3] + box["bbox"][2] * box["bbox"][3] - i
                iou = i / union if union > 0 else 0.0
                if j not in taken and iou >= iou_threshold and iou > best_iou:
                    best, best_iou = j, iou
            column = ids.index(det["category_id"])
            if best is not None:
                taken.add(best)
                counts[ids.index(plain[best]["category_id"]), column] += 1
            elif not any(inter(det["bbox"], c["bbox"]) >= iou_threshold * det["bbox"][2]
                         * det["bbox"][3] > 0 for c in crowds):
                counts[k, column] += 1
        for j, box in enumerate(plain):
            if j not in taken:
                counts[ids.index(box["category_id"]), k] += 1
    return counts


def test_random_scenes_agree_with_the_rules_written_pair_by_pair():
    rng = np.random.default_rng(4)
    annotations, results = [], []
    for image in range(60):
        for _ in range(rng.integers(0, 6)):
            x, y = rng.uniform(0, 60, 2)
            w, h = rng.uniform(5, 30, 2)
            category = int(rng.integers(1, 4))
            annotations.append((image, [x, y, w, h], category, int(rng.random() < 0.1)))
            for _ in range(rng.integers(0, 3)):  # Near-misses, shifted by a few pixels.
                results.append((image, [x + rng.normal(0, 3), y + rng.normal(0, 3), w, h],
                                round(float(rng.random()), 2), int(rng.integers(1, 4))))
        for _ in range(rng.integers(0, 3)):
            results.append((image, list(rng.uniform(0, 60, 2)) + list(rng.uniform(5, 30, 2)),
                            round(float(rng.random()), 2), int(rng.integers(1, 4))))
    groundtruth, results = truth(*annotations), found(*results)
    for score, iou in [(0.3, 0.5), (0.0, 0.3), (0.5, 0.75)]:
        matrix = confusion_matrix(groundtruth, results, score, iou)
        np.testing.assert_array_equal(matrix.counts,
                                      reference_counts(groundtruth, results, score, iou))
        # Every plain box is found or missed, once.
        assert matrix.counts[:-1].sum() == sum(1 for a in annotations if not a[3])


def test_csv_holds_the_counts_under_the_predicted_names(tmp_path):
    groundtruth = truth((1, [0, 0, 10, 10], 1), (1, [20, 20, 10, 10], 2),
                        categories=[{"id": 1, "name": "circle"},
                                    {"id": 2, "name": "square, filled"}])
    results = found((1, [0, 0, 10, 10], 0.9, 2), (1, [60, 60, 10, 10], 0.9, 1))
    path = tmp_path / "cm" / "epoch-1.csv"
    assert confusion_matrix(groundtruth, results).to_csv(str(path)) == str(path)
    assert path.read_text() == (
        'true \\ predicted,circle,"square, filled",background\n'
        "circle,0,1,0\n"
        '"square, filled",0,0,1\n'
        "background,1,0,0\n")


def test_text_form_aligns_the_columns():
    groundtruth = truth((1, [0, 0, 10, 10], 1), (1, [20, 20, 10, 10], 2),
                        categories=CATEGORIES[:2])
    text = confusion_matrix(groundtruth, found((1, [0, 0, 10, 10], 0.9, 1))).to_text()
    assert text.splitlines() == [
        "true \\ predicted  circle  square  background",
        "circle                 1       0           0",
        "square                 0       0           1",
        "background             0       0           0"]


def test_csv_and_png_are_written_side_by_side(tmp_path):
    groundtruth = truth((1, [0, 0, 10, 10], 1), (1, [20, 20, 10, 10], 2),
                        (2, [0, 0, 10, 10], 3))
    matrix = confusion_matrix(groundtruth, found((1, [0, 0, 10, 10], 0.9, 2)))
    csv_path, png_path = write_confusion_matrix(matrix, str(tmp_path / CONFUSION_MATRIX_DIR),
                                                "ckpt-3", "ckpt-3")
    assert csv_path == str(tmp_path / "confusion_matrix" / "ckpt-3.csv")
    assert png_path == str(tmp_path / "confusion_matrix" / "ckpt-3.png")
    with Image.open(png_path) as image:
        assert image.format == "PNG" and min(image.size) >= 400
    counts_only = plot_confusion_matrix(matrix, str(tmp_path / "counts.png"), "x",
                                        normalize=False)
    assert counts_only == str(tmp_path / "counts.png")


def test_without_matplotlib_only_the_csv_is_written(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # "import matplotlib" fails.
    monkeypatch.setattr(figures, "_MISSING_NOTE_LOGGED", [])
    matrix = confusion_matrix(truth((1, [0, 0, 10, 10], 1)), [])
    csv_path, png_path = write_confusion_matrix(matrix, str(tmp_path), "epoch-1", "epoch 1")
    assert png_path is None and sorted(p.name for p in tmp_path.iterdir()) == ["epoch-1.csv"]


def test_the_evaluators_own_ground_truth_and_detections_fit():
    from efficientdet_keras.detection.postprocess import CocoRows
    from efficientdet_keras.evaluation.coco_evaluator import COCOEvaluator
    evaluator = COCOEvaluator(label_map={1: "circle", 2: "square"}, backend="pycocotools")
    boxes = np.array([[[10, 10, 50, 50], [60, 60, 90, 100]],
                      [[20, 30, 70, 80], [0, 0, 0, 0]]], np.float64)  # ymin, xmin, ymax, xmax
    evaluator.add_groundtruth([1, 2], boxes, np.array([[1, 2], [2, 0]]),
                              is_crowd=np.array([[False, False], [True, False]]))
    rows = np.array([[10, 10, 40, 40, 0.7, 2],       # x, y, w, h, score, class: the circle
                     [60, 60, 40, 30, 0.2, 2],       # the square, too weak
                     [35, 25, 40, 40, 0.9, 1]])      # inside image 2's crowd
    evaluator.add_detections([1, 2], CocoRows(np.array([1, 1, 2], np.int64), rows))
    matrix = confusion_matrix(evaluator.groundtruth_dataset(), evaluator.detection_results())
    assert matrix.names == ["circle", "square", BACKGROUND]
    assert matrix.counts.tolist() == [[0, 1, 0], [0, 0, 1], [0, 0, 0]]
