"""How well the anchors fit a dataset's boxes, and anchor settings that fit better.

A box is "matched" when some anchor overlaps it with IoU >= 0.5 (the labeler's
match_threshold); the labeler's rule that every box claims its best anchor even
below the threshold does not count, because such a box trains on one poorly
fitting anchor. Boxes are [ymin, xmin, ymax, xmax] in pixels of the network input,
placed where the evaluation resize puts them (see `data.check.letterboxed_boxes`).

The best IoU of a box is found without comparing it with every anchor: the anchors of
one level and shape are equal boxes on a regular grid, and the IoU of two boxes of
fixed sizes only grows as their centres come closer along each axis, so the best
anchor of each (level, shape) is the one whose centre is nearest the box's centre.
That is levels x shapes IoUs per box instead of tens of thousands
(`anchors.pairwise_iou` over `anchors.Anchors` gives the same numbers; see the tests).
"""

import dataclasses
import math
from typing import List, Optional, Tuple

import numpy as np

from efficientdet_keras.detection.anchors import anchor_shapes, feature_sizes

# The labeler's IoU threshold for a positive anchor.
MATCH_IOU = 0.5
# The search grid for `suggest_anchors`: anchor_scale values, and aspect-ratio sets of the
# form (1, r, 1/r), which keep the released models' three anchors per scale (and so the
# shapes of the class and box heads, which pretrained checkpoints must match).
SCALE_GRID = (1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 8.0)
RATIO_GRID = (1.5, 2.0, 3.0, 4.0)
# The share of boxes the suggested anchors may leave to the best-anchor rule. Matching
# every box is not the aim: a smaller anchor_scale matches small boxes by moving every
# object to a coarser map, with fewer cells across it. On the short-run glyph
# data, the anchor_scale that left a few boxes unmatched trained to a better AP than both a
# larger one (many unmatched) and a smaller one (almost none).
ENOUGH_MATCHED_UNMATCHED = 0.10


@dataclasses.dataclass(frozen=True)
class AnchorSettings:
    """The config keys that place anchors (see config.py: min_level ... anchor_scale)."""
    image_size: Tuple[int, int]
    min_level: int
    max_level: int
    num_scales: int
    aspect_ratios: Tuple[float, ...]
    anchor_scale: float

    @classmethod
    def from_config(cls, config) -> "AnchorSettings":
        return cls(tuple(int(s) for s in config.image_size), int(config.min_level),
                   int(config.max_level), int(config.num_scales),
                   tuple(float(r) for r in config.aspect_ratios), float(config.anchor_scale))

    def replace(self, **changes) -> "AnchorSettings":
        return dataclasses.replace(self, **changes)

    def hparams(self) -> str:
        """The --hparams string that sets these anchors: "anchor_scale=3,aspect_ratios=1*2*0.5"
        (`*` separates list items in config overrides)."""
        ratios = "*".join("%g" % r for r in self.aspect_ratios)
        return "anchor_scale=%g,aspect_ratios=%s" % (self.anchor_scale, ratios)


def _level_strides(settings: AnchorSettings):
    """[(level, (feat_h, feat_w), (stride_y, stride_x))] as `anchors.Anchors` lays them out."""
    sizes = feature_sizes(settings.image_size, settings.max_level)
    height, width = settings.image_size
    return [(level, sizes[level], (height / sizes[level][0], width / sizes[level][1]))
            for level in range(settings.min_level, settings.max_level + 1)]


def anchor_sizes(settings: AnchorSettings) -> List[Tuple[int, float, float]]:
    """(level, height, width) in input pixels of each anchor shape, level by level."""
    shapes = anchor_shapes(settings.num_scales, settings.aspect_ratios, settings.anchor_scale)
    return [(level, scale * stride_y * aspect_y, scale * stride_x * aspect_x)
            for level, _, (stride_y, stride_x) in _level_strides(settings)
            for scale, aspect_x, aspect_y in shapes]


def _axis_overlap(centre, size, grid_size, stride, anchor_size):
    """Overlap [N] along one axis of boxes (centre, size [N]) with the nearest grid anchor."""
    index = np.clip(np.floor(centre / stride), 0, grid_size - 1)
    anchor_centre = (index + 0.5) * stride
    low = np.maximum(centre - size / 2, anchor_centre - anchor_size / 2)
    high = np.minimum(centre + size / 2, anchor_centre + anchor_size / 2)
    return np.maximum(high - low, 0.0)


def best_anchor_iou(boxes: np.ndarray, settings: AnchorSettings) -> np.ndarray:
    """The highest IoU of each box with any anchor.

    Args:
      boxes: float [N, 4] [ymin, xmin, ymax, xmax] in input pixels.

    Returns:
      float64 [N]; 0 for boxes with no area.
    """
    boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
    height, width = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
    centre_y, centre_x = boxes[:, 0] + height / 2, boxes[:, 1] + width / 2
    shapes = anchor_shapes(settings.num_scales, settings.aspect_ratios, settings.anchor_scale)
    best = np.zeros(len(boxes))
    for _, (feat_h, feat_w), (stride_y, stride_x) in _level_strides(settings):
        for scale, aspect_x, aspect_y in shapes:
            anchor_h, anchor_w = scale * stride_y * aspect_y, scale * stride_x * aspect_x
            overlap = (_axis_overlap(centre_y, height, feat_h, stride_y, anchor_h)
                       * _axis_overlap(centre_x, width, feat_w, stride_x, anchor_w))
            union = height * width + anchor_h * anchor_w - overlap
            best = np.maximum(best, overlap / np.maximum(union, 1e-12))
    return best


def unmatched_share(boxes: np.ndarray, settings: AnchorSettings,
                    threshold: float = MATCH_IOU) -> float:
    """The share (0..1) of boxes ([N, 4] input pixels) whose best anchor IoU is below
    `threshold`; 0 when there are no boxes."""
    if len(boxes) == 0:
        return 0.0
    return float(np.mean(best_anchor_iou(boxes, settings) < threshold))


@dataclasses.dataclass
class AnchorCandidate:
    """Anchor settings with the share of boxes they leave unmatched."""
    settings: AnchorSettings
    unmatched: float


def candidate_settings(current: AnchorSettings) -> List[AnchorSettings]:
    """The search grid: the current settings first, then every SCALE_GRID x ratio set
    (the current ratios and (1, r, 1/r) for r in RATIO_GRID)."""
    ratio_sets = [current.aspect_ratios] + [(1.0, r, 1.0 / r) for r in RATIO_GRID]
    ratio_sets = list(dict.fromkeys(tuple(round(r, 4) for r in s) for s in ratio_sets))
    grid = [current.replace(anchor_scale=scale, aspect_ratios=ratios)
            for ratios in ratio_sets for scale in SCALE_GRID]
    return [current] + [s for s in grid if s != current]


def suggest_anchors(boxes: np.ndarray, current: AnchorSettings,
                    threshold: float = MATCH_IOU) -> List[AnchorCandidate]:
    """Every setting of `candidate_settings`, fewest unmatched boxes first.

    Ties keep the grid order, so the current settings come first among equals: a
    suggestion is only made when it leaves strictly fewer boxes unmatched.

    Args:
      boxes: float [N, 4] input pixels (crowd boxes left out: they are never positives).
    """
    scored = [AnchorCandidate(s, unmatched_share(boxes, s, threshold))
              for s in candidate_settings(current)]
    return sorted(scored, key=lambda c: c.unmatched)  # Stable: grid order among equals.


def recommend_anchors(ranked: List[AnchorCandidate], current: AnchorSettings,
                      enough: float = ENOUGH_MATCHED_UNMATCHED) -> Optional[AnchorCandidate]:
    """The anchors to use instead of `current`, or None to keep them.

    None when the current anchors leave at most `enough` of the boxes unmatched. Otherwise
    the smallest change of anchor_scale that does (the current aspect ratios first among
    equals), or, when no candidate does, the one that leaves the fewest unmatched.

    Args:
      ranked: `suggest_anchors`' candidates, fewest unmatched first.
    """
    current_unmatched = next(c.unmatched for c in ranked if c.settings == current)
    if current_unmatched <= enough:
        return None
    fitting = [c for c in ranked if c.unmatched <= enough]
    if not fitting:
        return ranked[0] if ranked[0].unmatched < current_unmatched else None
    distance = lambda c: (abs(math.log(c.settings.anchor_scale / current.anchor_scale)),
                          c.settings.aspect_ratios != current.aspect_ratios, c.unmatched)
    return min(fitting, key=distance)
