"""Running a model over an evaluation dataset and scoring it with COCOEvaluator.

Shared by the eval tool (`efficientdet-eval`), the trainer's COCO callback and the
benchmark, so "evaluate a model" means one thing everywhere.
"""

import dataclasses
import time
from typing import Callable, Dict, List, Optional

import numpy as np
import tensorflow as tf

from efficientdet_keras.evaluation.coco_evaluator import COCOEvaluator
from efficientdet_keras.detection.box_scales import image_box_factors
from efficientdet_keras.detection.postprocess import BatchedDetections, postprocess_detections
from efficientdet_keras.detection.tta import check_tta, merge_flipped
from efficientdet_keras.utils.progress import ProgressBar


@dataclasses.dataclass
class EvaluationTiming:
    """Seconds spent in each stage of an evaluation."""
    network: float = 0.0
    postprocess: float = 0.0
    scoring: float = 0.0
    images: int = 0


def make_detect_fns(model, config, nms_overrides: Optional[dict] = None):
    """tf.functions for the network and for post-processing (timed separately)."""
    forward = tf.function(lambda images: model(images, training=False))
    postprocess = tf.function(
        lambda class_outputs, box_outputs, image_scales: postprocess_detections(
            config, class_outputs, box_outputs, image_scales, nms_overrides=nms_overrides))
    return forward, postprocess


def stack_detections(per_image: List[dict]) -> BatchedDetections:
    """Per-image detection dicts (boxes, scores, classes) -> numpy BatchedDetections padded to
    the largest count."""
    width = max([1] + [len(found["scores"]) for found in per_image])
    boxes = np.zeros([len(per_image), width, 4], np.float32)
    scores = np.zeros([len(per_image), width], np.float32)
    classes = np.zeros([len(per_image), width], np.int32)
    for row, found in enumerate(per_image):
        count = len(found["scores"])
        boxes[row, :count], scores[row, :count] = found["boxes"], found["scores"]
        classes[row, :count] = found["classes"]
    valid = np.array([len(found["scores"]) for found in per_image], np.int32)
    return BatchedDetections(boxes, scores, classes, valid)


def _image_detections(detections: BatchedDetections, index: int) -> dict:
    count = int(detections.valid[index])
    return {"boxes": detections.boxes[index, :count], "scores": detections.scores[index, :count],
            "classes": detections.classes[index, :count]}


def flip_tta_fns(detect_fns, config):
    """(forward, postprocess) that run each batch and its mirror image and fuse the two
    (config key tta: flip; detection/tta.py).

    forward(images) -> (the outputs of `images`, those of the mirrored images), which
    evaluate_dataset hands to postprocess as its first two arguments; postprocess
    decodes both in input pixels, mirrors the second back across the input's width,
    fuses them per image and scales them to original pixels (numpy BatchedDetections, at
    most nms_configs.max_output_size per image).
    """
    check_tta(config.tta)
    forward, postprocess = detect_fns
    width = float(config.image_size[1])
    max_detections = int(config.nms_configs.max_output_size)

    def forward_both(images):
        return forward(images), forward(tf.reverse(images, axis=[2]))

    def postprocess_fused(outputs, mirror_outputs, image_scales):
        scales = np.asarray(image_scales, np.float32)
        in_input_pixels = np.ones_like(scales)
        found, found_in_mirror = (tf.nest.map_structure(
            np.asarray, postprocess(*pair, in_input_pixels)) for pair in (outputs, mirror_outputs))
        fused = []
        for i, scale in enumerate(scales):
            merged = merge_flipped(_image_detections(found, i),
                                   _image_detections(found_in_mirror, i), width, max_detections)
            fused.append(dict(merged, boxes=merged["boxes"] * image_box_factors(scale)))
        return stack_detections(fused)

    return forward_both, postprocess_fused


def evaluate_dataset(model, dataset: tf.data.Dataset, config, evaluator: COCOEvaluator,
                     max_images: Optional[int] = None, nms_overrides: Optional[dict] = None,
                     progress: bool = True, detect_fns=None,
                     on_batch: Optional[Callable[[Dict, list, list], None]] = None,
                     on_detections: Optional[Callable[[tf.Tensor, Dict, BatchedDetections],
                                                      None]] = None):
    """Evaluates `model` on a dataset of (images, labels) batches from InputPipeline.

    Args:
      max_images: stop after this many images (all of them when None).
      nms_overrides: NMS settings that replace config.nms_configs keys.
      progress: show a progress bar (images done, images/s).
      detect_fns: (forward, postprocess) from `make_detect_fns`, to reuse traced functions,
        or another pair with that interface (tflite_evaluation.tflite_detect_fns).
      on_batch: called as on_batch(labels, class_outputs, box_outputs) after each
        batch's forward pass, so e.g. losses come from the same pass (not timed).
      on_detections: called as on_detections(images, labels, detections) after each
        batch (not timed): the normalised images [B, H, W, 3], the pipeline's labels and
        numpy BatchedDetections in original pixels (e.g.
        reports.eval_images.EvaluationImages).

    Returns:
      (metrics dict from evaluator.result(), EvaluationTiming). The evaluator is
      reset first, so it holds exactly this evaluation afterwards.
    """
    forward, postprocess = detect_fns or make_detect_fns(model, config, nms_overrides)
    evaluator.reset()
    timing = EvaluationTiming()
    bar = ProgressBar(max_images, unit_name="image") if progress else None
    for images, labels in dataset:
        if max_images is not None and timing.images >= max_images:
            break
        if max_images is not None and timing.images + int(images.shape[0]) > max_images:
            keep = max_images - timing.images
            images = images[:keep]
            labels = {k: v[:keep] for k, v in labels.items()}
        start = time.perf_counter()
        class_outputs, box_outputs = forward(images)  # Eager calls return when computed.
        middle = time.perf_counter()
        detections = postprocess(class_outputs, box_outputs, labels["image_scales"])
        detections = tf.nest.map_structure(np.asarray, detections)  # Tensors or numpy.
        end = time.perf_counter()
        evaluator.add_batch(labels, detections)
        if on_batch is not None:
            on_batch(labels, class_outputs, box_outputs)
        if on_detections is not None:
            on_detections(images, labels, detections)
        timing.network += middle - start
        timing.postprocess += end - middle
        timing.images += int(images.shape[0])
        if bar is not None:
            bar.update(timing.images)
    if bar is not None:
        bar.finish()
    start = time.perf_counter()
    metrics = evaluator.result()
    timing.scoring = time.perf_counter() - start
    return metrics, timing


def format_metrics(metrics: Dict[str, float]) -> str:
    """A readable table: the 12 COCO metrics, then per-class AP."""
    from efficientdet_keras.evaluation.coco_evaluator import METRIC_NAMES
    lines = ["%-10s %7.4f" % (name, metrics[name]) for name in METRIC_NAMES if name in metrics]
    per_class = sorted((k[4:], v) for k, v in metrics.items() if k.startswith("AP_/"))
    if per_class:
        lines.append("per-class AP:")
        lines.extend("  %-20s %7.4f" % (name, value) for name, value in per_class)
    return "\n".join(lines)
