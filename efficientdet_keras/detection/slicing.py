"""Sliced detection for large images: the image cut into overlapping tiles, each seen by the
model at its own size, and the tiles' detections merged into one set.

A detector resizes a whole 4000x3000 photo to its input size (512 for D0), where a 30-pixel
object becomes 4 pixels and is lost. Seen in tiles near the model's size, small objects keep
their pixels. Tiles overlap, so an object cut by one tile's edge is whole in its neighbour;
its cut part, which lies inside the whole box, is merged into it by intersection over the
smaller box (IoS), which is 1 for a box inside another, where IoU would be small. An optional
pass over the whole image keeps the objects larger than a tile.

Pure numpy: `Detector` (inference/detector.py) runs the tiles through any model format.
"""

import dataclasses
from typing import List, Optional, Tuple, Union

import numpy as np

from efficientdet_keras.detection.wbf import box_iou, fuse_detections

# How the detections of overlapping tiles become one: "nmm" (greedy non-maximum merging: a
# group's box is the box enclosing its members, its score the best one), "nms" (the best box
# of a group stays, the others go) or "wbf" (weighted box fusion, detection/wbf.py).
MERGE_METHODS = ("nmm", "nms", "wbf")
# How two boxes count as one object for nmm and nms: intersection over the smaller box (a box
# cut at a tile's edge lies inside the whole one) or over the union.
MATCH_METRICS = ("ios", "iou")


@dataclasses.dataclass(frozen=True)
class SliceSettings:
    """How an image is cut and merged.

    Attributes:
      tile: (height, width) of a tile in the image's pixels; an int is a square tile.
      overlap: the fraction of a tile's height and width that neighbouring tiles share.
      full_image: also detect in the whole image (objects larger than a tile).
      merge: one of MERGE_METHODS.
      metric: one of MATCH_METRICS (for nmm and nms; wbf matches by IoU).
      threshold: the overlap from which two boxes of a class are one object.
    """
    tile: Union[int, Tuple[int, int]]
    overlap: float = 0.2
    full_image: bool = True
    merge: str = "nmm"
    metric: str = "ios"
    threshold: float = 0.5

    def __post_init__(self):
        tile = (self.tile, self.tile) if np.isscalar(self.tile) else tuple(self.tile)
        if len(tile) != 2 or min(tile) < 1:
            raise ValueError("slice must be a tile size in pixels (or height, width) of at "
                             "least 1, got %r" % (self.tile,))
        object.__setattr__(self, "tile", (int(tile[0]), int(tile[1])))
        if not 0.0 <= self.overlap < 1.0:
            raise ValueError("overlap must be in [0, 1), got %r" % (self.overlap,))
        if self.merge not in MERGE_METHODS:
            raise ValueError("slice merge must be one of %s, got %r"
                             % (", ".join(MERGE_METHODS), self.merge))
        if self.metric not in MATCH_METRICS:
            raise ValueError("slice metric must be one of %s, got %r"
                             % (", ".join(MATCH_METRICS), self.metric))


def slice_settings(slice_, overlap: float = 0.2) -> Optional[SliceSettings]:
    """A Detector's `slice` argument as SliceSettings: None (no slicing), a tile size or
    (height, width), or SliceSettings as they are."""
    if slice_ is None or isinstance(slice_, SliceSettings):
        return slice_
    return SliceSettings(slice_, overlap)


def _starts(length: int, tile: int, step: int) -> List[int]:
    """Tile starts along one axis: every `step`, the last tile ending at the image's edge."""
    if length <= tile:
        return [0]
    starts = list(range(0, length - tile, step))
    return starts + [length - tile]


def tile_windows(height: int, width: int, settings: SliceSettings) -> np.ndarray:
    """The tiles covering an image: int [n, 4] (ymin, xmin, ymax, xmax), row by row. Tiles are
    settings.tile in size (the image's size where it is smaller) and step by tile x
    (1 - overlap); the last of a row or column ends at the edge."""
    tile_h, tile_w = settings.tile
    step_h = max(int(round(tile_h * (1.0 - settings.overlap))), 1)
    step_w = max(int(round(tile_w * (1.0 - settings.overlap))), 1)
    return np.array([[y, x, min(y + tile_h, height), min(x + tile_w, width)]
                     for y in _starts(height, tile_h, step_h)
                     for x in _starts(width, tile_w, step_w)], np.int64).reshape(-1, 4)


def box_overlaps(boxes: np.ndarray, box: np.ndarray, metric: str) -> np.ndarray:
    """IoS or IoU of each of `boxes` [n, 4] with `box` [4] (corners); 0 for empty boxes."""
    if metric == "iou":
        return box_iou(boxes, box)
    low = np.maximum(boxes[:, :2], box[:2])
    high = np.minimum(boxes[:, 2:], box[2:])
    intersection = np.prod(np.maximum(high - low, 0.0), axis=1)
    smaller = np.minimum(np.prod(np.maximum(boxes[:, 2:] - boxes[:, :2], 0.0), axis=1),
                         np.prod(np.maximum(box[2:] - box[:2], 0.0)))
    return np.where(smaller > 0, intersection / np.where(smaller > 0, smaller, 1.0), 0.0)


def merge_detections(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray,
                     settings: SliceSettings) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One set of detections from the overlapping tiles' (boxes in the image's pixels):
    merged per class as settings.merge says, best first."""
    boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
    scores = np.asarray(scores, np.float64).reshape(-1)
    classes = np.asarray(classes).reshape(-1).astype(np.int64)
    if settings.merge == "wbf":
        fused = fuse_detections([{"boxes": boxes, "scores": scores, "classes": classes}],
                                settings.threshold, num_sources=1)
        return fused["boxes"], fused["scores"], fused["classes"]
    kept_boxes, kept_scores, kept_classes = [], [], []
    for class_id in np.unique(classes):
        index = np.flatnonzero(classes == class_id)
        index = index[np.argsort(-scores[index], kind="stable")]
        while index.size:
            best, rest = index[0], index[1:]
            same = box_overlaps(boxes[rest], boxes[best], settings.metric) >= settings.threshold
            box = boxes[best]
            if settings.merge == "nmm" and same.any():
                group = boxes[np.concatenate([[best], rest[same]])]
                box = np.concatenate([group[:, :2].min(axis=0), group[:, 2:].max(axis=0)])
            kept_boxes.append(box)
            kept_scores.append(scores[best])
            kept_classes.append(class_id)
            index = rest[~same]
    order = np.argsort(-np.asarray(kept_scores), kind="stable")
    return (np.asarray(kept_boxes, np.float32).reshape(-1, 4)[order],
            np.asarray(kept_scores, np.float32)[order],
            np.asarray(kept_classes, np.int64)[order])


def detect_sliced(detect, image: np.ndarray, settings: SliceSettings,
                  score_threshold: float = 0.0, batch_size: int = 8):
    """Sliced detection of one image.

    Args:
      detect: runs the model: a list of uint8 images [h, w, 3] in, a list of (boxes [n, 4]
        in that image's pixels, scores [n], classes [n]) out.
      image: uint8 [H, W, 3].
      score_threshold: each tile's detections scoring lower are dropped before merging.
        Merging by IoS would otherwise widen a confident box to a weak one around it: the
        model's low-scoring boxes at other anchors often hold the object.
      batch_size: tiles given to `detect` at a time.

    Returns:
      (boxes float32 [m, 4] in the image's pixels, scores [m], classes [m]), best first.
    """
    height, width = image.shape[:2]
    windows = tile_windows(height, width, settings)
    crops = [image[y0:y1, x0:x1] for y0, x0, y1, x1 in windows]
    offsets = [np.array([y0, x0, y0, x0], np.float64) for y0, x0, _, _ in windows]
    if settings.full_image and len(windows) > 1:
        crops.append(image)
        offsets.append(np.zeros(4))
    found = []
    for start in range(0, len(crops), batch_size):
        for boxes, scores, classes in detect(crops[start:start + batch_size]):
            keep = np.asarray(scores).reshape(-1) >= score_threshold
            found.append((np.asarray(boxes).reshape(-1, 4)[keep],
                          np.asarray(scores).reshape(-1)[keep],
                          np.asarray(classes).reshape(-1)[keep]))
    # Clipped to the tile first: models clip to their padded input, which reaches past it.
    boxes = [np.clip(np.asarray(b, np.float64).reshape(-1, 4), 0, np.tile(crop.shape[:2], 2))
             + offset for (b, _, _), crop, offset in zip(found, crops, offsets)]
    return merge_detections(np.concatenate(boxes + [np.zeros([0, 4])]),
                            np.concatenate([np.asarray(s).reshape(-1) for _, s, _ in found]
                                           + [np.zeros([0])]),
                            np.concatenate([np.asarray(c).reshape(-1) for _, _, c in found]
                                           + [np.zeros([0], np.int64)]), settings)
