"""Keras callbacks for EfficientDet training, and `get_callbacks` to wire them.

- COCOCallback: COCO evaluation with the EMA weights every map_freq epochs (and
  at the last), written into Keras `logs` as val_AP, val_AP50, ... so that
  ModelCheckpoint, EarlyStopping, ReduceLROnPlateau and TensorBoard see them,
  plus val_ema_loss (and val_ema_cls_loss, ...): the validation loss of the EMA
  weights from the same forward pass (Keras' own val_loss uses the raw weights).
  All evaluations go to model_dir/coco_metrics.json, which a resumed run extends.
- CheckpointCallback: a name-based checkpoint (raw and EMA weights, the
  released layout) at every epoch end, and the best-k archive by a metric
  (val_AP, stored as "AP" in the archive it shares with the continuous evaluator).
- DisplayCallback: the current detections drawn on a few validation images,
  to TensorBoard and PNG files.
"""

import contextlib
import json
import os
from typing import Dict, Optional

import numpy as np
import tensorflow as tf
import tf_keras as keras
from absl import logging

from efficientdet_keras.archive import ARCHIVE_MONITOR, CheckpointArchive
from efficientdet_keras.checkpoint import save_ckpt
from efficientdet_keras.evaluation.coco_evaluator import METRIC_NAMES, COCOEvaluator
from efficientdet_keras.evaluation.runner import evaluate_dataset, make_detect_fns
from efficientdet_keras.fileio import write_json_atomically
from efficientdet_keras.postprocess import postprocess_detections


_VAL_PREFIX = "val_"


def validation_metrics(logs) -> Dict[str, float]:
    """The scalar "val_" entries of Keras logs, named without the prefix (val_AP -> AP)."""
    return {key[len(_VAL_PREFIX):]: float(value) for key, value in logs.items()
            if key.startswith(_VAL_PREFIX) and np.ndim(value) == 0}


def ema_weights(model):
    """A context in which the model holds its EMA weights (if it keeps any)."""
    ema = getattr(model, "ema", None)
    return contextlib.nullcontext() if ema is None else ema.swapped_in()


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
    resumed run keeps the epochs before the interruption.

    Args:
      config: the model config (post-processing settings, label map).
      val_dataset: an evaluation InputPipeline dataset.
      evaluator: a COCOEvaluator; by default one with ground truth from the batches.
      model_dir: where coco_metrics.json (all evaluations, with per-class AP) goes.
      map_freq: evaluate every this many epochs (default config.map_freq); the last
        epoch is always evaluated.
      max_images: evaluate at most this many images.
    """

    def __init__(self, config, val_dataset, evaluator: Optional[COCOEvaluator] = None,
                 model_dir: Optional[str] = None, map_freq: Optional[int] = None,
                 max_images: Optional[int] = None):
        super().__init__()
        self.config = config
        self.val_dataset = val_dataset
        label_map = config.label_map if isinstance(config.label_map, dict) else None
        self.evaluator = evaluator or COCOEvaluator(label_map=label_map)
        self.model_dir = model_dir
        self.map_freq = int(map_freq or config.map_freq or 1)
        self.max_images = max_images
        self._detect_fns = None
        self.history: Dict[int, Dict[str, float]] = {}

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
        with ema_weights(self.model):
            metrics, timing = evaluate_dataset(
                self.model, self.val_dataset, self.config, self.evaluator,
                max_images=self.max_images, progress=False, detect_fns=self._detect_fns,
                on_batch=losses)
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
        metrics = self.evaluate()
        if logs is not None:
            for name, value in metrics.items():
                logs["val_" + name] = value
        self.history[epoch + 1] = metrics
        if self.metrics_path:
            write_json_atomically(self.metrics_path,
                                  {str(k): v for k, v in sorted(self.history.items())})


class CheckpointCallback(keras.callbacks.Callback):
    """Writes model_dir/ckpt-<epoch> (raw + EMA, released layout) and archives the best.

    Args:
      model_dir: the run directory.
      keep: how many of the latest regular checkpoints to keep.
      monitor: the "val_" logs key that ranks archived checkpoints (default val_AP);
        epochs without it (no evaluation) are not archived. The archive stores the
        validation metrics without the "val_" prefix (val_AP is "AP"), the names
        the continuous evaluator writes into the same model_dir/archive.
      archive_keep: size of the best-k archive in model_dir/archive.
    """

    def __init__(self, model_dir: str, keep: int = 3, monitor: str = "val_" + ARCHIVE_MONITOR,
                 archive_keep: int = 3, mode: str = "max"):
        super().__init__()
        if not monitor.startswith(_VAL_PREFIX):
            raise ValueError("CheckpointCallback monitor must be a validation logs key "
                             "('val_...'), got %r" % monitor)
        self.model_dir = model_dir
        self.keep = keep
        self.monitor = monitor
        self.archive = CheckpointArchive(os.path.join(model_dir, "archive"), keep=archive_keep,
                                         monitor=monitor[len(_VAL_PREFIX):], mode=mode)

    def on_epoch_end(self, epoch, logs=None):
        ema = getattr(self.model, "ema", None)
        prefix = save_ckpt(self.model, os.path.join(self.model_dir, "ckpt-%d" % (epoch + 1)),
                           ema_values=ema.values_by_name() if ema is not None else None)
        self._remove_old_checkpoints()
        if logs and self.monitor in logs:
            self.archive.consider(prefix, epoch + 1, validation_metrics(logs))

    def _remove_old_checkpoints(self) -> None:
        from efficientdet_keras.evaluation.continuous import list_checkpoints  # noqa: E402
        for prefix in list_checkpoints(self.model_dir)[:-self.keep]:
            for suffix in (".index", ".data-00000-of-00001"):
                if os.path.exists(prefix + suffix):
                    os.remove(prefix + suffix)


# One colour per class id (cycled); RGBA in 0..1 for tf.image.draw_bounding_boxes.
_PALETTE = np.array([[1, 0.2, 0.2, 1], [0.2, 1, 0.2, 1], [0.3, 0.5, 1, 1], [1, 1, 0.2, 1],
                     [1, 0.3, 1, 1], [0.2, 1, 1, 1], [1, 0.6, 0.2, 1], [1, 1, 1, 1]], np.float32)


def draw_detections(images: np.ndarray, boxes: np.ndarray, scores: np.ndarray,
                    classes: np.ndarray, score_threshold: float = 0.3) -> np.ndarray:
    """Draws boxes (input pixels, [ymin, xmin, ymax, xmax]) above a score, coloured by class.

    Args:
      images: uint8 [B, H, W, 3].
    Returns:
      uint8 [B, H, W, 3].
    """
    height, width = images.shape[1:3]
    out = []
    for image, image_boxes, image_scores, image_classes in zip(images, boxes, scores, classes):
        keep = image_scores >= score_threshold
        drawn = tf.cast(image, tf.float32)[tf.newaxis] / 255.0
        for class_id in np.unique(image_classes[keep]):
            mask = keep & (image_classes == class_id)
            normalised = image_boxes[mask] / np.array([height, width, height, width], np.float32)
            colour = _PALETTE[(int(class_id) - 1) % len(_PALETTE)][np.newaxis]
            drawn = tf.image.draw_bounding_boxes(drawn, normalised[np.newaxis], colour)
        out.append(tf.cast(tf.clip_by_value(drawn[0] * 255.0, 0, 255), tf.uint8).numpy())
    return np.stack(out)


class DisplayCallback(keras.callbacks.Callback):
    """Draws the current detections (EMA weights) on a few validation images.

    Every `every` epochs, writes a TensorBoard image summary ("detections") under
    model_dir/display and PNG files model_dir/display/epoch-<N>-<i>.png.
    """

    def __init__(self, config, val_dataset, model_dir: str, num_images: int = 4,
                 every: int = 1, score_threshold: float = 0.3):
        super().__init__()
        self.config = config
        self.display_dir = os.path.join(model_dir, "display")
        self.every, self.score_threshold = every, score_threshold
        images, labels = next(iter(val_dataset))
        self.images = images[:num_images]
        mean = np.array(config.mean_rgb, np.float32)
        stddev = np.array(config.stddev_rgb, np.float32)
        self.pixels = np.clip(tf.cast(self.images, tf.float32).numpy() * stddev + mean,
                              0, 255).astype(np.uint8)
        self._writer = None

    def on_epoch_end(self, epoch, logs=None):
        if (epoch + 1) % self.every:
            return
        with ema_weights(self.model):
            class_outputs, box_outputs = self.model(self.images, training=False)
        detections = postprocess_detections(self.config, class_outputs, box_outputs)
        drawn = draw_detections(self.pixels, detections.boxes.numpy(), detections.scores.numpy(),
                                detections.classes.numpy(), self.score_threshold)
        os.makedirs(self.display_dir, exist_ok=True)
        for i, image in enumerate(drawn):
            path = os.path.join(self.display_dir, "epoch-%03d-%d.png" % (epoch + 1, i))
            tf.io.write_file(path, tf.io.encode_png(image))
        if self._writer is None:
            self._writer = tf.summary.create_file_writer(self.display_dir)
        with self._writer.as_default(step=epoch + 1):
            tf.summary.image("detections", drawn, max_outputs=len(drawn))
        self._writer.flush()


def get_callbacks(config, model_dir: str, val_dataset=None, evaluator=None,
                  eval_samples: Optional[int] = None, display_images: int = 4,
                  archive_keep: int = 3, profile_batch=0):
    """The standard callback list for a training run in model_dir.

    Order matters: COCO evaluation first, so the checkpoint archive, TensorBoard
    and any user callback after them see val_AP in `logs`. BackupAndRestore in
    model_dir/backup makes an interrupted run resume at the epoch it reached,
    with optimizer state and EMA.
    """
    callbacks = []
    if val_dataset is not None:
        callbacks.append(COCOCallback(config, val_dataset, evaluator, model_dir,
                                      max_images=eval_samples))
    callbacks.append(CheckpointCallback(model_dir, archive_keep=archive_keep))
    if val_dataset is not None and display_images:
        callbacks.append(DisplayCallback(config, val_dataset, model_dir, display_images))
    callbacks += [
        keras.callbacks.TensorBoard(log_dir=model_dir, profile_batch=profile_batch),
        keras.callbacks.TerminateOnNaN(),
        # Kept after the run, so re-running a finished command resumes (or just
        # reports) instead of starting over.
        keras.callbacks.BackupAndRestore(os.path.join(model_dir, "backup"),
                                         delete_checkpoint=False),
    ]
    return callbacks


__all__ = ["COCOCallback", "CheckpointCallback", "DisplayCallback", "METRIC_NAMES",
           "draw_detections", "get_callbacks"]
