"""Evaluation images: ground truth and predictions side by side for the first N images.

`EvaluationImages` is the `on_detections` hook of `evaluation.runner.evaluate_dataset`,
so the pictures come from the evaluation's own forward passes (no second pass), for a
checkpoint (COCOCallback during training, efficientdet-eval) and for a .tflite file
alike. Each picture is the letterboxed input image the network saw, twice: the ground
truth (class names) on the left, the detections above a score threshold (class names
and scores) on the right. `write` puts them into a folder as <image id>.png and into a
TensorBoard image summary.

    images = EvaluationImages(config, num_images=4)
    metrics, timing = evaluate_dataset(model, dataset, config, evaluator, on_detections=images)
    images.write("runs/demo/eval_images/epoch-3", summary_dir="runs/demo/eval_images", step=3)
"""

import os
from typing import Dict, List, Optional, Tuple

import numpy as np
import tensorflow as tf

from efficientdet_keras.config.label_maps import label_names
from efficientdet_keras.data.pixels import pipeline_images_to_uint8
from efficientdet_keras.utils.drawing import draw_boxes, encode_png, side_by_side
from efficientdet_keras.utils.fileio import write_bytes_atomically
from efficientdet_keras.detection.box_scales import image_box_factors
from efficientdet_keras.detection.postprocess import BatchedDetections

# The TensorBoard tag of the pictures, and the folder under a run directory that holds them.
SUMMARY_TAG = "eval_images"
IMAGES_DIR = "eval_images"


def comparison_picture(image, groundtruth_boxes, groundtruth_classes, boxes, scores, classes,
                       label_map: Optional[Dict[int, str]] = None,
                       score_threshold: float = 0.3) -> np.ndarray:
    """Ground truth left, predictions right, on one image.

    Args:
      image: uint8 [H, W, 3].
      groundtruth_boxes: [G, 4] ymin, xmin, ymax, xmax in pixels of `image`.
      groundtruth_classes: [G] class ids; ids < 1 (padding) are not drawn.
      boxes, scores, classes: [N, 4] (pixels of `image`), [N], [N]: the detections.
      label_map: {class id: name} for the labels.
      score_threshold: detections below it are left out.

    Returns:
      uint8 [H + title height, 2 W + gap, 3] (drawing.side_by_side).
    """
    truth = draw_boxes(image, groundtruth_boxes, groundtruth_classes, label_map=label_map)
    predicted = draw_boxes(image, boxes, classes, scores, label_map=label_map,
                           score_threshold=score_threshold)
    return side_by_side(truth, predicted,
                        titles=("ground truth", "predictions (score >= %g)" % score_threshold))


class EvaluationImages:
    """Collects comparison pictures of the first `num_images` images of an evaluation.

    Call `reset()` before each evaluation (evaluate_dataset does not); the hook ignores
    every image after the first `num_images`, so it costs nothing for the rest.

    Args:
      config: the config of the evaluated model: mean_rgb and stddev_rgb undo the
        pipeline's normalisation; its label_map names the classes.
      num_images: how many images to draw (the first ones of the dataset).
      score_threshold: the lowest score of a drawn detection.
    """

    def __init__(self, config, num_images: int, score_threshold: float = 0.3):
        if num_images < 0:
            raise ValueError("the number of evaluation images must be >= 0, got %d" % num_images)
        self.config = config
        self.num_images = int(num_images)
        self.score_threshold = float(score_threshold)
        self.label_map = label_names(config.label_map)
        self.pictures: List[Tuple[int, np.ndarray]] = []  # (image id, picture)
        self._summary_writers: Dict[str, tf.summary.SummaryWriter] = {}

    def reset(self) -> None:
        """Forgets the pictures of the previous evaluation."""
        self.pictures = []

    def __call__(self, images, labels, detections: BatchedDetections) -> None:
        """The evaluate_dataset hook for one batch.

        Args:
          images: normalised [B, H, W, 3], as the input pipeline gives them.
          labels: the pipeline's labels: groundtruth_boxes [B, G, 4] and groundtruth_classes
            [B, G] in input pixels, image_scales [B] (original pixels per input pixel),
            source_ids [B].
          detections: BatchedDetections (numpy) with boxes in original pixels.
        """
        wanted = min(self.num_images - len(self.pictures), int(images.shape[0]))
        if wanted <= 0:
            return
        pixels = pipeline_images_to_uint8(images[:wanted], self.config)
        truth_boxes = np.asarray(labels["groundtruth_boxes"])
        truth_classes = np.asarray(labels["groundtruth_classes"])
        scales = np.asarray(labels["image_scales"], np.float32)
        ids = np.asarray(labels["source_ids"]).reshape(-1)
        for i in range(wanted):
            count = int(detections.valid[i])
            # Detections are in original pixels; the picture is in input pixels.
            boxes = (np.asarray(detections.boxes[i][:count], np.float32)
                     / image_box_factors(scales[i]))
            picture = comparison_picture(pixels[i], truth_boxes[i], truth_classes[i], boxes,
                                         detections.scores[i][:count],
                                         detections.classes[i][:count], self.label_map,
                                         self.score_threshold)
            self.pictures.append((int(ids[i]), picture))

    def write(self, directory: str, summary_dir: Optional[str] = None,
              step: int = 0) -> List[str]:
        """Writes the pictures as <directory>/<image id>.png and, with `summary_dir`, as one
        TensorBoard image summary (tag "eval_images", all pictures, at `step`) there.

        Returns:
          The PNG paths, in dataset order (none, and nothing written, without pictures).
        """
        if not self.pictures:
            return []
        os.makedirs(directory, exist_ok=True)
        paths = [write_bytes_atomically(os.path.join(directory, "%d.png" % image_id),
                                        encode_png(picture))
                 for image_id, picture in self.pictures]
        if summary_dir is not None:
            self._write_summary(summary_dir, step)
        return paths

    def _write_summary(self, summary_dir: str, step: int) -> None:
        # One writer per folder for the object's life: each new writer starts a new event file.
        if summary_dir not in self._summary_writers:
            self._summary_writers[summary_dir] = tf.summary.create_file_writer(summary_dir)
        writer = self._summary_writers[summary_dir]
        pictures = np.stack([picture for _, picture in self.pictures])  # All one input size.
        with writer.as_default(step=int(step)):
            tf.summary.image(SUMMARY_TAG, pictures, max_outputs=len(pictures))
        writer.flush()
