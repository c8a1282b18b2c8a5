"""Anchors, the box coder, and the anchor labeler that turns ground truth into targets.

Box format everywhere in this module: [ymin, xmin, ymax, xmax] in pixels of the
network input. Anchors are ordered level by level (min_level first), then row,
column, and within a location scale-major, aspect-minor: the channel layout of
the released models' heads.
"""

import functools
from typing import Dict, List, Sequence, Tuple

import numpy as np
import tensorflow as tf

# Keeps logs and divisions finite for degenerate (zero-size) boxes.
_EPSILON = 1e-8
# Class-target codes for anchors that are not positives.
BACKGROUND = -1
IGNORE = -2


def feature_sizes(image_size: Sequence[int], max_level: int) -> List[Tuple[int, int]]:
    """(height, width) of levels 0..max_level; each level halves the previous, rounding up."""
    height, width = int(image_size[0]), int(image_size[1])
    sizes = [(height, width)]
    for _ in range(max_level):
        height, width = (height + 1) // 2, (width + 1) // 2
        sizes.append((height, width))
    return sizes


def anchor_shapes(num_scales: int, aspect_ratios: Sequence[float], anchor_scale: float):
    """(scale multiplier, aspect x, aspect y) of the anchors at one location, in head order.

    An aspect ratio r is width / height: x = sqrt(r), y = 1 / sqrt(r).
    """
    shapes = []
    for octave in range(num_scales):
        for ratio in aspect_ratios:
            aspect_x = float(np.sqrt(ratio))
            shapes.append((anchor_scale * 2.0 ** (octave / num_scales), aspect_x, 1.0 / aspect_x))
    return shapes


@functools.lru_cache(maxsize=32)
def _anchor_array(image_size: Tuple[int, int], min_level: int, max_level: int, num_scales: int,
                  aspect_ratios: Tuple[float, ...], anchor_scale: float) -> np.ndarray:
    sizes = feature_sizes(image_size, max_level)
    shapes = anchor_shapes(num_scales, aspect_ratios, anchor_scale)
    levels = []
    for level in range(min_level, max_level + 1):
        feat_h, feat_w = sizes[level]
        stride_y, stride_x = image_size[0] / feat_h, image_size[1] / feat_w
        centre_y = (np.arange(feat_h) + 0.5) * stride_y
        centre_x = (np.arange(feat_w) + 0.5) * stride_x
        cy, cx = np.meshgrid(centre_y, centre_x, indexing="ij")  # [H, W]
        per_shape = []
        for scale, aspect_x, aspect_y in shapes:
            half_h = scale * stride_y * aspect_y / 2.0
            half_w = scale * stride_x * aspect_x / 2.0
            per_shape.append(np.stack([cy - half_h, cx - half_w, cy + half_h, cx + half_w], -1))
        levels.append(np.stack(per_shape, axis=2).reshape(-1, 4))  # [H*W*A, 4]
    anchors = np.concatenate(levels, axis=0).astype(np.float32)
    anchors.setflags(write=False)
    return anchors


class Anchors:
    """All anchors of one config and input size, computed once (cached per shape).

    Attributes:
      boxes: float32 `[num_anchors, 4]` numpy array, [ymin, xmin, ymax, xmax] pixels.
      level_shapes: {level: (H_l, W_l)}; anchors per level = H_l * W_l * per_location.
    """

    def __init__(self, config, image_size: Sequence[int] = None):
        size = tuple(int(s) for s in (image_size or config.image_size))
        self.image_size = size
        self.min_level, self.max_level = config.min_level, config.max_level
        self.per_location = config.num_scales * len(config.aspect_ratios)
        self.boxes = _anchor_array(size, config.min_level, config.max_level, config.num_scales,
                                   tuple(float(r) for r in config.aspect_ratios),
                                   float(config.anchor_scale))
        all_sizes = feature_sizes(size, config.max_level)
        self.level_shapes: Dict[int, Tuple[int, int]] = {
            level: all_sizes[level] for level in range(config.min_level, config.max_level + 1)}

    @property
    def num_anchors(self) -> int:
        return int(self.boxes.shape[0])

    def level_counts(self) -> List[int]:
        return [h * w * self.per_location for h, w in self.level_shapes.values()]


def concat_levels(tensors: Sequence[tf.Tensor], per_anchor: int) -> tf.Tensor:
    """Per-level `[B, H, W, A * per_anchor]` tensors as one `[B, sum(H*W*A), per_anchor]`.

    Level-major, then row-major within a level: the order of `Anchors.boxes`.
    """
    batch = tf.shape(tensors[0])[0]
    return tf.concat([tf.reshape(x, [batch, -1, per_anchor]) for x in tensors], axis=1)


def encode_boxes(boxes: tf.Tensor, anchors: tf.Tensor) -> tf.Tensor:
    """Faster R-CNN box coding: [ty, tx, th, tw] of `boxes` relative to `anchors`.

    ty = (yc - yc_a) / h_a, th = log(h / h_a), and the same for x. Shapes `[..., 4]`.
    """
    ymin, xmin, ymax, xmax = tf.unstack(boxes, axis=-1)
    a_ymin, a_xmin, a_ymax, a_xmax = tf.unstack(anchors, axis=-1)
    # Inverted boxes count as empty; the epsilon keeps empty ones finite.
    anchor_h = tf.maximum(a_ymax - a_ymin, 0.0) + _EPSILON
    anchor_w = tf.maximum(a_xmax - a_xmin, 0.0) + _EPSILON
    h = tf.maximum(ymax - ymin, 0.0) + _EPSILON
    w = tf.maximum(xmax - xmin, 0.0) + _EPSILON
    ty = ((ymin + ymax) / 2 - (a_ymin + a_ymax) / 2) / anchor_h
    tx = ((xmin + xmax) / 2 - (a_xmin + a_xmax) / 2) / anchor_w
    return tf.stack([ty, tx, tf.math.log(h / anchor_h), tf.math.log(w / anchor_w)], axis=-1)


# exp() of a larger log-size would overflow float32; clip like Detectron does.
_MAX_LOG_SIZE = float(np.log(1000.0 / 16))


def decode_boxes(codes: tf.Tensor, anchors: tf.Tensor) -> tf.Tensor:
    """Inverse of `encode_boxes`: [ty, tx, th, tw] and anchors to [ymin, xmin, ymax, xmax].

    Log-sizes are clipped so wild predictions stay finite. Shapes `[..., 4]`.
    """
    codes = tf.cast(codes, tf.float32)
    anchors = tf.cast(anchors, tf.float32)
    ty, tx, th, tw = tf.unstack(codes, axis=-1)
    a_ymin, a_xmin, a_ymax, a_xmax = tf.unstack(anchors, axis=-1)
    anchor_h = a_ymax - a_ymin + _EPSILON
    anchor_w = a_xmax - a_xmin + _EPSILON
    centre_y = ty * anchor_h + (a_ymin + a_ymax) / 2
    centre_x = tx * anchor_w + (a_xmin + a_xmax) / 2
    h = tf.exp(tf.minimum(th, _MAX_LOG_SIZE)) * anchor_h - _EPSILON
    w = tf.exp(tf.minimum(tw, _MAX_LOG_SIZE)) * anchor_w - _EPSILON
    return tf.stack([centre_y - h / 2, centre_x - w / 2, centre_y + h / 2, centre_x + w / 2], -1)


def _box_parts(boxes_a: tf.Tensor, boxes_b: tf.Tensor):
    """Intersections `[N, M]` and areas `[N, 1]`, `[M]` of two box lists."""
    ymin_a, xmin_a, ymax_a, xmax_a = tf.split(boxes_a, 4, axis=-1)  # [N, 1]
    ymin_b, xmin_b, ymax_b, xmax_b = tf.unstack(boxes_b, axis=-1)  # [M]
    inter_h = tf.maximum(tf.minimum(ymax_a, ymax_b) - tf.maximum(ymin_a, ymin_b), 0.0)
    inter_w = tf.maximum(tf.minimum(xmax_a, xmax_b) - tf.maximum(xmin_a, xmin_b), 0.0)
    area_a = (ymax_a - ymin_a) * (xmax_a - xmin_a)
    area_b = (ymax_b - ymin_b) * (xmax_b - xmin_b)
    return inter_h * inter_w, area_a, area_b


def pairwise_iou(boxes_a: tf.Tensor, boxes_b: tf.Tensor) -> tf.Tensor:
    """IoU of every box in `[N, 4]` with every box in `[M, 4]`, shape `[N, M]`."""
    intersection, area_a, area_b = _box_parts(boxes_a, boxes_b)
    union = area_a + area_b - intersection
    return tf.where(union > 0, intersection / tf.maximum(union, _EPSILON), 0.0)


def pairwise_ioa(boxes_a: tf.Tensor, boxes_b: tf.Tensor) -> tf.Tensor:
    """Intersection over the area of `boxes_a` (`[N, 4]`) for each of `[M, 4]`: `[N, M]`."""
    intersection, area_a, _ = _box_parts(boxes_a, boxes_b)
    return tf.where(area_a > 0, intersection / tf.maximum(area_a, _EPSILON), 0.0)


class AnchorLabeler:
    """Assigns ground-truth boxes to anchors and writes the training targets.

    Matching by IoU: an anchor whose best IoU is >= `match_threshold` is a
    positive of that box; below `unmatched_threshold` it is background; in
    between it is ignored. Every ground-truth box also claims its best anchor,
    even below the threshold. An anchor that is not a positive and lies at least
    `match_threshold` inside an ignored box (crowd, or marked ignore; measured
    as intersection over the anchor's area, as COCO treats crowds) is ignored.
    Runs in graph mode inside tf.data map functions.

    The work over all anchors is a few elementwise passes over a `[boxes, anchors]` IoU
    (anchors innermost, each box's values broadcast along a row: the layout TensorFlow's
    CPU kernels handle fastest) and one max over boxes; which box an anchor matches, and
    its encoded box, are computed for the positives alone and scattered into place.
    """

    def __init__(self, config, image_size: Sequence[int] = None,
                 match_threshold: float = 0.5, unmatched_threshold: float = 0.5):
        self.anchors = Anchors(config, image_size)
        self.num_classes = config.num_classes
        self.match_threshold = match_threshold
        self.unmatched_threshold = unmatched_threshold
        corners = self.anchors.boxes.T  # [4, num_anchors]: ymin, xmin, ymax, xmax rows.
        self._anchor_corners = corners
        self._anchor_areas = (corners[2] - corners[0]) * (corners[3] - corners[1])

    def label(self, boxes: tf.Tensor, classes: tf.Tensor, ignore: tf.Tensor = None):
        """Targets for one image.

        Args:
          boxes: `[N, 4]` float ground truth, [ymin, xmin, ymax, xmax] input pixels.
            Padding rows are allowed: any row with class <= 0 is skipped.
          classes: `[N]` class ids 1..num_classes (<= 0 marks padding).
          ignore: optional `[N]` bool, true for crowd or ignored boxes.

        Returns:
          class_targets: {level: int32 `[H_l, W_l, A]`}, 0..num_classes-1 for
            positives, -1 background, -2 ignored.
          box_targets: {level: float32 `[H_l, W_l, A * 4]`}, encoded boxes of
            positives, zeros elsewhere.
          num_positives: float32 scalar.

        Raises (at run time):
          InvalidArgumentError naming the ids when one is above num_classes.
        """
        boxes = tf.cast(tf.reshape(boxes, [-1, 4]), tf.float32)
        classes = tf.cast(tf.reshape(classes, [-1]), tf.int32)
        ignore = (tf.zeros_like(classes, tf.bool) if ignore is None
                  else tf.cast(tf.reshape(ignore, [-1]), tf.bool))
        check = tf.debugging.assert_less_equal(
            classes, self.num_classes, summarize=20,
            message="class id out of range: ids must be 1..%d (0 or less marks padding); "
                    "got ids" % self.num_classes)
        # A dummy last row (class 0, never matched) keeps the max over boxes and the
        # gathers valid when the image has no boxes.
        with tf.control_dependencies([check]):
            boxes = tf.concat([boxes, tf.zeros([1, 4])], axis=0)
        classes = tf.concat([classes, [0]], axis=0)
        ignore = tf.concat([ignore, [False]], axis=0)
        valid = classes > 0
        candidates = tf.logical_and(valid, tf.logical_not(ignore))
        num_anchors = self.anchors.num_anchors

        iou = self._iou_with_anchors(boxes)  # [N + 1, num_anchors]
        # Boxes that may not be matched (padding, ignored) count as IoU -1.
        is_candidate = tf.cast(candidates, tf.float32)[:, tf.newaxis]
        match_iou = iou * is_candidate + (is_candidate - 1.0)
        best_iou = tf.reduce_max(match_iou, axis=0)  # [num_anchors]

        # Each box claims its best anchor; when two claim the same anchor the
        # later box wins (deterministically, by taking the larger index).
        gt_best_anchor = tf.argmax(iou, axis=1, output_type=tf.int32)  # [N + 1]
        claims = tf.logical_and(candidates, tf.reduce_max(iou, axis=1) > 0)
        claim_anchor = tf.boolean_mask(gt_best_anchor, claims)
        claim_gt = tf.boolean_mask(tf.range(tf.size(classes)), claims)
        forced_gt = tf.tensor_scatter_nd_max(
            tf.fill([num_anchors], -1), claim_anchor[:, tf.newaxis], claim_gt)

        is_forced = forced_gt >= 0
        is_positive = tf.logical_or(is_forced, best_iou >= self.match_threshold)
        in_between = best_iou >= self.unmatched_threshold
        is_ignored = tf.logical_and(tf.logical_not(is_positive),
                                    tf.logical_or(in_between, self._in_ignored_region(
                                        tf.boolean_mask(boxes, tf.logical_and(valid, ignore)))))

        # The positives alone: their box (the claim, else the first box of best IoU),
        # class and encoded box, scattered over the background and ignore codes.
        positives = tf.where(is_positive)  # [P, 1] int64
        positive_index = positives[:, 0]
        best_gt = tf.argmax(tf.gather(match_iou, positive_index, axis=1), axis=0,
                            output_type=tf.int32)
        forced_here = tf.gather(forced_gt, positive_index)
        matched_gt = tf.where(forced_here >= 0, forced_here, best_gt)
        not_positive_codes = BACKGROUND + (IGNORE - BACKGROUND) * tf.cast(is_ignored, tf.int32)
        class_targets = tf.tensor_scatter_nd_update(
            not_positive_codes, positives, tf.gather(classes, matched_gt) - 1)
        codes = encode_boxes(tf.gather(boxes, matched_gt),
                             tf.gather(tf.constant(self.anchors.boxes), positive_index))
        box_targets = tf.scatter_nd(positives, codes, [num_anchors, 4])
        num_positives = tf.cast(tf.size(positive_index), tf.float32)
        return (self._split_levels(class_targets, 1), self._split_levels(box_targets, 4),
                num_positives)

    def _iou_with_anchors(self, boxes: tf.Tensor) -> tf.Tensor:
        """IoU of each of `[N, 4]` boxes with every anchor: `[N, num_anchors]`."""
        intersection, box_areas = self._intersections(boxes)
        union = box_areas + self._anchor_areas - intersection
        # Where the union is empty so is the intersection: the quotient is 0 there.
        return intersection / tf.maximum(union, _EPSILON)

    def _intersections(self, boxes: tf.Tensor):
        """Intersection areas `[N, num_anchors]` of `[N, 4]` boxes with the anchors, and
        the boxes' areas `[N, 1]`."""
        ymin, xmin, ymax, xmax = tf.split(boxes, 4, axis=1)  # [N, 1] each
        a_ymin, a_xmin, a_ymax, a_xmax = self._anchor_corners
        inter_h = tf.maximum(tf.minimum(ymax, a_ymax) - tf.maximum(ymin, a_ymin), 0.0)
        inter_w = tf.maximum(tf.minimum(xmax, a_xmax) - tf.maximum(xmin, a_xmin), 0.0)
        return inter_h * inter_w, (ymax - ymin) * (xmax - xmin)

    def _in_ignored_region(self, ignored_boxes: tf.Tensor) -> tf.Tensor:
        """`[num_anchors]` bool: the anchor lies at least match_threshold inside one of the
        `[M, 4]` ignored boxes (intersection over the anchor's area). M is usually 0."""
        intersection, _ = self._intersections(ignored_boxes)
        inside = intersection / np.maximum(self._anchor_areas, _EPSILON)  # Anchors have areas.
        return tf.reduce_any(inside >= self.match_threshold, axis=0)

    def _split_levels(self, flat: tf.Tensor, values_per_anchor: int) -> Dict[int, tf.Tensor]:
        """Cuts `[num_anchors, ...]` into {level: `[H_l, W_l, A * values_per_anchor]`}."""
        pieces = tf.split(flat, self.anchors.level_counts(), axis=0)
        per_location = self.anchors.per_location * values_per_anchor
        return {level: tf.reshape(piece, [h, w, per_location])
                for piece, (level, (h, w)) in zip(pieces, self.anchors.level_shapes.items())}
