"""COCO evaluation during training, with the EMA weights.

COCOCallback evaluates every map_freq epochs (and at the last) and writes the
metrics into Keras `logs` as val_AP, val_AP50, ... so that ModelCheckpoint,
EarlyStopping, ReduceLROnPlateau and TensorBoard see them, plus val_ema_loss (and
val_ema_cls_loss, ...): the validation loss of the EMA weights from the same forward
pass (Keras' own val_loss uses the raw weights). All evaluations go to
model_dir/coco_metrics.json, which a resumed run extends; each one also logs the
metrics table with per-class AP, draws the classes' precision-recall curves into
model_dir/pr_curves/epoch-<N>.png, writes which classes were detected as which
(reports.confusion_matrix, score >= 0.3, IoU >= 0.5) into
model_dir/confusion_matrix/epoch-<N>.csv and .png, and, when asked, draws ground
truth beside the EMA weights' detections for the first few validation images
(reports.eval_images) into model_dir/eval_images/epoch-<N>/*.png and TensorBoard.
"""

import json
import os
from typing import Dict, Optional

import tensorflow as tf
import tf_keras as keras
from absl import logging

from efficientdet_keras.config.label_maps import label_names
from efficientdet_keras.evaluation.coco_evaluator import COCOEvaluator
from efficientdet_keras.evaluation.runner import evaluate_dataset, format_metrics, make_detect_fns
from efficientdet_keras.utils.fileio import write_json_atomically
from efficientdet_keras.reports.confusion_matrix import (CONFUSION_MATRIX_DIR, confusion_matrix,
                                                        write_confusion_matrix)
from efficientdet_keras.reports.eval_images import IMAGES_DIR, EvaluationImages
from efficientdet_keras.reports.pr_curves import (PR_CURVES_DIR, plot_precision_recall,
                                                  precision_recall_curves)
from efficientdet_keras.training.ema import ema_weights


class EvaluationLosses:
    """Mean detection losses over the batches of an evaluation, from its forward passes.

    Called as (labels, class_outputs, box_outputs) per batch (the `on_batch` of
    `evaluate_dataset`); `result(reg_l2_loss)` gives {"loss", "det_loss", "cls_loss",
    "box_loss", ("iou_loss",) "reg_l2_loss"}: per-batch means, like Keras' val_loss,
    with loss = det_loss + reg_l2_loss as in the trainer's test_step.
    """

    def __init__(self, detection_loss):
        self._loss = tf.function(detection_loss)
        self._sums: Dict[str, float] = {}
        self._batches = 0

    def __call__(self, labels, class_outputs, box_outputs) -> None:
        for name, value in self._loss(labels, class_outputs, box_outputs).items():
            self._sums[name] = self._sums.get(name, 0.0) + float(value)
        self._batches += 1

    def result(self, reg_l2_loss: float) -> Dict[str, float]:
        means = {name: total / max(self._batches, 1) for name, total in self._sums.items()}
        means["reg_l2_loss"] = float(reg_l2_loss)
        means["loss"] = means["det_loss"] + means["reg_l2_loss"]
        return means


class COCOCallback(keras.callbacks.Callback):
    """Evaluates COCO AP with the EMA weights and puts the metrics into `logs`.

    With a training model (one with `detection_loss`), the same forward passes
    also give the EMA weights' validation losses, logged as val_ema_loss,
    val_ema_det_loss, val_ema_cls_loss, val_ema_box_loss, val_ema_reg_l2_loss.
    `history` ({epoch: metrics}) starts from model_dir/coco_metrics.json, so a
    resumed run keeps the epochs before the interruption. With `eval_images`, the
    same evaluation draws its first images (ground truth | detections) into
    model_dir/eval_images/epoch-<N>/<image id>.png and a TensorBoard image summary
    in model_dir/eval_images (tag "eval_images", step N).

    Args:
      config: the model config (post-processing settings, label map).
      val_dataset: an evaluation InputPipeline dataset.
      evaluator: a COCOEvaluator; by default one with ground truth from the batches.
      model_dir: where coco_metrics.json (all evaluations, with per-class AP) goes.
      map_freq: evaluate every this many epochs (default config.map_freq); the last
        epoch is always evaluated.
      max_images: evaluate at most this many images.
      eval_images: how many validation images to draw at each evaluation (0: none;
        needs model_dir).
      image_score_threshold: the lowest score of a drawn detection.
    """

    def __init__(self, config, val_dataset, evaluator: Optional[COCOEvaluator] = None,
                 model_dir: Optional[str] = None, map_freq: Optional[int] = None,
                 max_images: Optional[int] = None, eval_images: int = 0,
                 image_score_threshold: float = 0.3):
        super().__init__()
        self.config = config
        self.val_dataset = val_dataset
        label_map = label_names(config.label_map)
        self.evaluator = evaluator or COCOEvaluator(label_map=label_map)
        self.model_dir = model_dir
        self.map_freq = int(map_freq or config.map_freq or 1)
        self.max_images = max_images
        self._detect_fns = None
        self.history: Dict[int, Dict[str, float]] = {}
        self.images = (EvaluationImages(config, eval_images, image_score_threshold)
                       if eval_images and model_dir else None)

    def _due(self, epoch: int) -> bool:
        last = self.params.get("epochs") if self.params else None
        return (epoch + 1) % self.map_freq == 0 or (last is not None and epoch + 1 == last)

    @property
    def metrics_path(self) -> Optional[str]:
        return os.path.join(self.model_dir, "coco_metrics.json") if self.model_dir else None

    def on_train_begin(self, logs=None):
        if self.metrics_path and os.path.exists(self.metrics_path):
            with open(self.metrics_path) as f:
                earlier = {int(epoch): metrics for epoch, metrics in json.load(f).items()}
            self.history = dict(earlier, **self.history)

    def evaluate(self) -> Dict[str, float]:
        """Scores the model (EMA weights) on the validation data now.

        Returns the COCO metrics, plus "ema_loss", "ema_det_loss", ... when the
        model has a `detection_loss` (a training model).
        """
        if self._detect_fns is None:
            self._detect_fns = make_detect_fns(self.model, self.config)
        detection_loss = getattr(self.model, "detection_loss", None)
        losses = EvaluationLosses(detection_loss) if detection_loss is not None else None
        if self.images is not None:
            self.images.reset()
        with ema_weights(self.model):
            metrics, timing = evaluate_dataset(
                self.model, self.val_dataset, self.config, self.evaluator,
                max_images=self.max_images, progress=True, detect_fns=self._detect_fns,
                on_batch=losses, on_detections=self.images)
            if losses is not None:
                reg_l2_loss = self.model.l2_loss(self.model.variables_to_train)
                metrics.update({"ema_" + name: value
                                for name, value in losses.result(reg_l2_loss).items()})
        logging.info("COCO on %d images: AP %.4f, AP50 %.4f (network %.1fs, NMS %.1fs, scoring "
                     "%.1fs)", timing.images, metrics["AP"], metrics["AP50"], timing.network,
                     timing.postprocess, timing.scoring)
        return metrics

    def on_epoch_end(self, epoch, logs=None):
        if not self._due(epoch):
            return
        logging.info("COCO evaluation after epoch %d", epoch + 1)
        metrics = self.evaluate()
        if logs is not None:
            for name, value in metrics.items():
                logs["val_" + name] = value
        self.history[epoch + 1] = metrics
        if self.metrics_path:
            write_json_atomically(self.metrics_path,
                                  {str(k): v for k, v in sorted(self.history.items())})
        self._report(epoch + 1, metrics)
        if self.images is not None:
            images_dir = os.path.join(self.model_dir, IMAGES_DIR)
            self.images.write(os.path.join(images_dir, "epoch-%d" % (epoch + 1)),
                              summary_dir=images_dir, step=epoch + 1)

    def _report(self, epoch: int, metrics: Dict[str, float]) -> None:
        """Logs the metrics table (per-class AP too) and, with a model_dir, draws the
        precision-recall curve of each class at IoU 0.5 into pr_curves/epoch-<epoch>.png
        and writes the confusion matrix into confusion_matrix/epoch-<epoch>.csv and .png."""
        logging.info("COCO metrics after epoch %d (EMA weights):\n%s", epoch,
                     format_metrics(metrics))
        if not self.model_dir:
            return
        if self.evaluator.last_precision is not None:
            plot_precision_recall(precision_recall_curves(self.evaluator.last_precision),
                                  os.path.join(self.model_dir, PR_CURVES_DIR,
                                               "epoch-%d.png" % epoch), "epoch %d" % epoch)
        # Counts grow with the number of images and hold at one score threshold, so they
        # stay in their own files rather than in logs (results.csv, monitors).
        matrix = confusion_matrix(self.evaluator.groundtruth_dataset(),
                                  self.evaluator.detection_results())
        csv_path, _ = write_confusion_matrix(
            matrix, os.path.join(self.model_dir, CONFUSION_MATRIX_DIR), "epoch-%d" % epoch,
            "epoch %d" % epoch)
        logging.info("Confusion matrix after epoch %d (score >= %.2f, IoU >= %.2f) in %s: %s",
                     epoch, matrix.score_threshold, matrix.iou_threshold, csv_path,
                     ", ".join("%d %s" % (n, key.replace("_", " "))
                               for key, n in matrix.summary().items()))
