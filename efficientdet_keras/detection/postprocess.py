"""From network outputs to detections: decode, top-k, NMS, clip, and back to image pixels.

Everything is batched and runs in graph mode. Per-class NMS never loops over
classes in Python: boxes of different classes are shifted apart so that one
class-agnostic NMS call cannot suppress across classes.
"""

from typing import NamedTuple, Optional, Sequence

import numpy as np
import tensorflow as tf

from efficientdet_keras.detection.anchors import Anchors, concat_levels, decode_boxes

# global: hard NMS across classes (class-agnostic), as the reference's postprocess_global.
NMS_METHODS = ("hard", "gaussian", "combined", "global")
# From this many classes on, the top-k first keeps the best anchors (`_top_candidates`):
# with many classes it saves more of the per-class work than it costs; with fewer it does not.
PRESELECT_MIN_CLASSES = 10


class BatchedDetections(NamedTuple):
    """Fixed-shape batched detections.

    boxes: float32 `[B, N, 4]`, [ymin, xmin, ymax, xmax] in original image pixels.
    scores: float32 `[B, N]`, sorted high to low; padding rows are 0.
    classes: int32 `[B, N]`, class ids 1..num_classes; padding rows are 0.
    valid: int32 `[B]`, the number of real detections per image.
    """
    boxes: tf.Tensor
    scores: tf.Tensor
    classes: tf.Tensor
    valid: tf.Tensor


def flatten_outputs(class_outputs: Sequence[tf.Tensor], box_outputs: Sequence[tf.Tensor],
                    num_classes: int):
    """Concatenates per-level outputs into `[B, num_anchors, num_classes]` and `[B, num_anchors, 4]`.

    The anchor order equals `anchors.Anchors.boxes`.
    """
    logits = concat_levels([tf.cast(c, tf.float32) for c in class_outputs], num_classes)
    codes = concat_levels([tf.cast(b, tf.float32) for b in box_outputs], 4)
    return logits, codes


def _top_candidates(logits: tf.Tensor, codes: tf.Tensor, anchors: tf.Tensor, k: int):
    """The k highest (anchor, class) scores per image, with their decoded boxes.

    Returns boxes `[B, k, 4]`, scores `[B, k]`, classes `[B, k]` (0-based).
    """
    num_classes = logits.shape[-1]
    anchor_ids = None
    if num_classes >= PRESELECT_MIN_CLASSES and k < anchors.shape[0]:
        # The k best pairs lie in the k anchors with the best class score: any other anchor's
        # pairs are outranked by k pairs, one in each kept anchor. Top-k then searches k x C.
        _, anchor_ids = tf.math.top_k(tf.reduce_max(logits, axis=-1), k=k, sorted=False)
        logits = tf.gather(logits, anchor_ids, batch_dims=1)
    flat_logits = tf.reshape(logits, [tf.shape(logits)[0], -1])
    top_logits, top_index = tf.math.top_k(flat_logits, k=k, sorted=False)
    anchor_index = top_index // num_classes
    if anchor_ids is not None:
        anchor_index = tf.gather(anchor_ids, anchor_index, batch_dims=1)
    classes = top_index % num_classes
    top_codes = tf.gather(codes, anchor_index, batch_dims=1)
    boxes = decode_boxes(top_codes, tf.gather(anchors, anchor_index))
    return boxes, tf.sigmoid(top_logits), classes


def _class_offset_boxes(boxes: tf.Tensor, classes: tf.Tensor) -> tf.Tensor:
    """Moves each class to its own region of the plane, so classes never overlap.

    IoU is unchanged within a class. Boxes are first moved to start at 0 and the
    span is the extent + 1, which keeps the offsets (and float32 rounding of
    the IoU) as small as possible.
    """
    low, high = tf.reduce_min(boxes), tf.reduce_max(boxes)
    offset = tf.cast(classes, tf.float32)[..., tf.newaxis] * (high - low + 1.0)
    return (boxes - low) + offset


def _nms_one_image(boxes, scores, classes, max_output: int, iou_threshold: float,
                   score_threshold: float, soft_nms_sigma: float, class_aware: bool = True):
    """NMS (hard or soft) on one image's candidates, per class or across classes; padded
    outputs."""
    shifted = _class_offset_boxes(boxes, classes) if class_aware else boxes
    index, kept_scores, count = tf.raw_ops.NonMaxSuppressionV5(
        boxes=shifted, scores=scores, max_output_size=max_output, iou_threshold=iou_threshold,
        score_threshold=score_threshold, soft_nms_sigma=soft_nms_sigma,
        pad_to_max_output_size=True)
    in_range = tf.range(max_output) < count
    return (tf.where(in_range[:, tf.newaxis], tf.gather(boxes, index), 0.0),
            tf.where(in_range, kept_scores, 0.0),
            tf.where(in_range, tf.gather(classes, index) + 1, 0),
            count)


def batched_nms(boxes: tf.Tensor, scores: tf.Tensor, classes: tf.Tensor, num_classes: int,
                method: str, max_output: int, iou_threshold: float, score_threshold: float,
                sigma: float) -> BatchedDetections:
    """NMS of candidates `[B, K, 4]`, `[B, K]`, `[B, K]` (0-based classes).

    method: "hard" (suppress IoU > iou_threshold), "gaussian" (soft-NMS: scores
    decay by exp(-IoU^2 / sigma)), "combined" (tf.image.combined_non_max_suppression), all
    per class; or "global" (hard, across classes: a box suppresses any class).
    Boxes stay in the coordinates they came in. Classes in the result are 1-based.
    """
    if method not in NMS_METHODS:
        raise ValueError("NMS method must be one of %s, got %r" % (", ".join(NMS_METHODS), method))
    if method == "combined":
        return _combined_nms(boxes, scores, classes, num_classes, max_output, iou_threshold,
                             score_threshold)
    if method == "gaussian":
        # NonMaxSuppressionV5 decays by exp(-IoU^2 / (2 s)); s = sigma / 2 gives exp(-IoU^2 / sigma).
        iou_threshold, soft_sigma = 1.0, sigma / 2.0
    else:
        soft_sigma = 0.0
    class_aware = method != "global"
    fn_output = (tf.TensorSpec([max_output, 4], tf.float32), tf.TensorSpec([max_output], tf.float32),
                 tf.TensorSpec([max_output], tf.int32), tf.TensorSpec([], tf.int32))
    out = tf.map_fn(
        lambda args: _nms_one_image(*args, max_output=max_output, iou_threshold=iou_threshold,
                                    score_threshold=score_threshold, soft_nms_sigma=soft_sigma,
                                    class_aware=class_aware),
        (boxes, scores, tf.cast(classes, tf.int32)), fn_output_signature=fn_output)
    return BatchedDetections(*out)


def _combined_nms(boxes, scores, classes, num_classes: int, max_output: int,
                  iou_threshold: float, score_threshold: float) -> BatchedDetections:
    """Hard NMS per class with tf.image.combined_non_max_suppression, batched in C++."""
    per_class_scores = tf.one_hot(classes, num_classes, dtype=tf.float32) * scores[..., tf.newaxis]
    result = tf.image.combined_non_max_suppression(
        boxes[:, :, tf.newaxis, :], per_class_scores, max_output_size_per_class=max_output,
        max_total_size=max_output, iou_threshold=iou_threshold, score_threshold=score_threshold,
        pad_per_class=False, clip_boxes=False)
    valid = tf.cast(result.valid_detections, tf.int32)
    in_range = tf.range(max_output)[tf.newaxis, :] < valid[:, tf.newaxis]
    classes = tf.where(in_range, tf.cast(result.nmsed_classes, tf.int32) + 1, 0)
    return BatchedDetections(result.nmsed_boxes, result.nmsed_scores, classes, valid)


def box_scale_factors(image_scales) -> tf.Tensor:
    """Factors that take boxes `[B, N, 4]` from network-input pixels to original pixels.

    image_scales: `[B]`, one scale per image (resize_mode letterbox), or `[B, 2]`, the y and
    x scales (stretch). Returns `[B, 1, 1]` or `[B, 1, 4]`.
    """
    scales = tf.cast(image_scales, tf.float32)
    if scales.shape.rank == 2:
        return tf.tile(scales, [1, 2])[:, tf.newaxis, :]
    return tf.reshape(scales, [-1, 1, 1])


def postprocess_detections(config, class_outputs: Sequence[tf.Tensor],
                           box_outputs: Sequence[tf.Tensor], image_scales=None,
                           image_size: Optional[Sequence[int]] = None,
                           nms_overrides: Optional[dict] = None) -> BatchedDetections:
    """Network outputs of a batch to final detections in original image pixels.

    Args:
      config: model config (levels, anchors, num_classes, nms_configs).
      class_outputs, box_outputs: the model's per-level lists.
      image_scales: `[B]` or `[B, 2]` (y, x; resize_mode stretch), or None for 1: original
        pixels per network-input pixel.
      image_size: the network input (height, width); default config.image_size.
      nms_overrides: values that replace `config.nms_configs` keys.

    Returns:
      BatchedDetections with N = nms_configs.max_output_size.
    """
    nms = dict(config.nms_configs.as_dict(), **(nms_overrides or {}))
    anchors = Anchors(config, image_size or config.image_size)
    logits, codes = flatten_outputs(class_outputs, box_outputs, config.num_classes)
    if logits.shape[1] is not None and logits.shape[1] != anchors.num_anchors:
        raise ValueError("Outputs hold %d anchors but image_size %s gives %d; pass the network "
                         "input size as image_size" % (logits.shape[1], anchors.image_size,
                                                       anchors.num_anchors))
    total = anchors.num_anchors * config.num_classes
    k = total if not nms["max_nms_inputs"] else min(int(nms["max_nms_inputs"]), total)
    boxes, scores, classes = _top_candidates(logits, codes, tf.constant(anchors.boxes), k)
    detections = batched_nms(boxes, scores, classes, config.num_classes, nms["method"] or "hard",
                             int(nms["max_output_size"]), float(nms["iou_thresh"] or 0.5),
                             float(nms["score_thresh"]), float(nms["sigma"] or 0.5))
    # Clipped after NMS, as the reference does (and the TFLite detection op can only do):
    # clipping first would change the overlaps that NMS sees at the image borders.
    height, width = anchors.image_size
    detections = detections._replace(boxes=tf.clip_by_value(
        detections.boxes, 0.0, tf.constant([height, width, height, width], tf.float32)))
    if image_scales is not None:
        detections = detections._replace(
            boxes=detections.boxes * box_scale_factors(image_scales))
    return detections


class CocoRows(NamedTuple):
    """Detections as COCO results, ids apart from the floats so they stay exact.

    image_ids: int64 `[M]`, the image of each detection (any int64, also above 2^53).
    rows: float64 `[M, 6]`: x, y, width, height, score, class (original pixels).
    """
    image_ids: np.ndarray
    rows: np.ndarray


def to_coco_rows(image_ids, detections: BatchedDetections) -> CocoRows:
    """COCO detection rows of a batch, one per valid detection, in batch order.

    Args:
      image_ids: `[B]` int64 ids; they stay int64 (never pass through a float type).
      detections: from `postprocess_detections`, boxes in original pixels.
    """
    ids = np.asarray(image_ids).astype(np.int64).reshape(-1)
    boxes = np.asarray(detections.boxes, dtype=np.float64)
    scores = np.asarray(detections.scores, dtype=np.float64)
    classes = np.asarray(detections.classes, dtype=np.float64)
    valid = np.asarray(detections.valid).reshape(-1).astype(np.int64)
    keep = np.arange(boxes.shape[1])[np.newaxis, :] < valid[:, np.newaxis]  # [B, N]
    ymin, xmin, ymax, xmax = np.moveaxis(boxes[keep], -1, 0)
    rows = np.stack([xmin, ymin, xmax - xmin, ymax - ymin, scores[keep], classes[keep]], axis=1)
    return CocoRows(np.repeat(ids, valid), rows.reshape(-1, 6))
