"""Weighted box fusion: one set of detections from the sets that several models, or several
test-time augmentations of one image, found in it (Solovyev et al., "Weighted boxes fusion",
2019; the reference implementation merges its flip test-time augmentation this way).

Unlike NMS, which keeps the best box of a group of overlapping ones, fusion averages the
group: the boxes weighted by their scores, and the scores over the sources, so a box that
only one of two sources found keeps half its score.
"""

from typing import Dict, List, Optional, Sequence

import numpy as np

# Two boxes of one class belong together from this IoU on (the reference's threshold).
WBF_IOU_THRESHOLD = 0.55


def box_iou(boxes: np.ndarray, box: np.ndarray) -> np.ndarray:
    """IoU of each of `boxes` [n, 4] with `box` [4], corners (ymin, xmin, ymax, xmax); 0
    where the union is empty."""
    boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
    box = np.asarray(box, np.float64)
    low = np.maximum(boxes[:, :2], box[:2])
    high = np.minimum(boxes[:, 2:], box[2:])
    intersection = np.prod(np.maximum(high - low, 0.0), axis=1)
    areas = np.prod(boxes[:, 2:] - boxes[:, :2], axis=1)
    union = areas + np.prod(box[2:] - box[:2]) - intersection
    return np.where(union > 0, intersection / np.where(union > 0, union, 1.0), 0.0)


def fuse_cluster(boxes: np.ndarray, scores: np.ndarray, num_sources: int):
    """(box [4], score) of one group: the boxes averaged with their scores as weights, and
    the summed score divided by the number of sources (or of boxes, when one source gave
    several), so the score of a box that not every source found drops."""
    boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
    scores = np.asarray(scores, np.float64).reshape(-1)
    box = (scores[:, np.newaxis] * boxes).sum(axis=0) / scores.sum()
    return box, scores.sum() / max(int(num_sources), len(scores))


def fuse_detections(detection_sets: Sequence[Dict[str, np.ndarray]],
                    iou_threshold: float = WBF_IOU_THRESHOLD,
                    num_sources: Optional[int] = None) -> Dict[str, np.ndarray]:
    """Fuses the detections of one image from several sources.

    Per class, the detections of all sources are taken best score first; each joins the
    group whose fused box it overlaps most, when that IoU is at least `iou_threshold`,
    and starts a group of its own otherwise. Each group gives one detection
    (`fuse_cluster`).

    Args:
      detection_sets: one dict per source: "boxes" [n, 4] (ymin, xmin, ymax, xmax, any
        units), "scores" [n], "classes" [n].
      num_sources: what the scores are divided by; default len(detection_sets).

    Returns:
      {"boxes" float32 [m, 4], "scores" float32 [m], "classes" int64 [m]}, best first.
    """
    num_sources = len(detection_sets) if num_sources is None else num_sources
    boxes = np.concatenate([np.asarray(s["boxes"], np.float64).reshape(-1, 4)
                            for s in detection_sets] + [np.zeros([0, 4])])
    scores = np.concatenate([np.asarray(s["scores"], np.float64).reshape(-1)
                             for s in detection_sets] + [np.zeros([0])])
    classes = np.concatenate([np.asarray(s["classes"]).reshape(-1).astype(np.int64)
                              for s in detection_sets] + [np.zeros([0], np.int64)])
    fused_boxes, fused_scores, fused_classes = [], [], []
    for class_id in np.unique(classes):
        members: List[List[int]] = []
        group_boxes: List[np.ndarray] = []
        for index in sorted(np.flatnonzero(classes == class_id), key=lambda i: -scores[i]):
            overlaps = box_iou(np.array(group_boxes), boxes[index]) if group_boxes else []
            best = int(np.argmax(overlaps)) if len(overlaps) else -1
            if best < 0 or overlaps[best] < iou_threshold:
                members.append([index])
                group_boxes.append(boxes[index])
                continue
            members[best].append(index)
            group_boxes[best] = fuse_cluster(boxes[members[best]], scores[members[best]],
                                             num_sources)[0]
        for group in members:
            box, score = fuse_cluster(boxes[group], scores[group], num_sources)
            fused_boxes.append(box)
            fused_scores.append(score)
            fused_classes.append(class_id)
    order = np.argsort(-np.array(fused_scores), kind="stable")
    return {"boxes": np.array(fused_boxes, np.float32).reshape(-1, 4)[order],
            "scores": np.array(fused_scores, np.float32)[order],
            "classes": np.array(fused_classes, np.int64)[order]}
