"""Keras callbacks for EfficientDet training, and `get_callbacks` to wire them.

- COCOCallback: COCO evaluation with the EMA weights every map_freq epochs (and
  at the last), written into Keras `logs` as val_AP, val_AP50, ... so that
  ModelCheckpoint, EarlyStopping, ReduceLROnPlateau and TensorBoard see them,
  plus val_ema_loss (and val_ema_cls_loss, ...): the validation loss of the EMA
  weights from the same forward pass (Keras' own val_loss uses the raw weights).
  All evaluations go to model_dir/coco_metrics.json, which a resumed run extends;
  each one also logs the metrics table with per-class AP and draws the classes'
  precision-recall curves into model_dir/pr_curves/epoch-<N>.png.
- CheckpointCallback: a name-based checkpoint (raw and EMA weights, the
  released layout) at every epoch end, and the best-k archive by a metric
  (val_AP, stored as "AP" in the archive it shares with the continuous evaluator),
  with model_dir/best.* and last.* naming the best and the latest.
- ResultsCallback (reports.results_csv): model_dir/results.csv, a row per epoch,
  and its plots in model_dir/plots.
- Evaluation images: at each COCO evaluation, COCOCallback draws ground truth and
  the EMA weights' detections side by side for the first few validation images
  (reports.eval_images), to model_dir/eval_images/epoch-<N>/*.png and TensorBoard.
"""

import contextlib
import json
import os
import shutil
from typing import Dict, Optional

import numpy as np
import tensorflow as tf
import tf_keras as keras
from absl import logging

from efficientdet_keras.checkpoint.archive import ARCHIVE_MONITOR, CheckpointArchive, copy_checkpoint
from efficientdet_keras.checkpoint import save_ckpt
from efficientdet_keras.evaluation.coco_evaluator import METRIC_NAMES, COCOEvaluator
from efficientdet_keras.evaluation.runner import evaluate_dataset, format_metrics, make_detect_fns
from efficientdet_keras.utils.fileio import write_error, write_json_atomically
from efficientdet_keras.optimization import is_pruning
from efficientdet_keras.reports.eval_images import IMAGES_DIR, EvaluationImages
from efficientdet_keras.reports.pr_curves import (PR_CURVES_DIR, plot_precision_recall,
                                                  precision_recall_curves)
from efficientdet_keras.reports.results_csv import ResultsCallback
from efficientdet_keras.training.nan_guard import NaNGuard
from efficientdet_keras.training.workers import write_dir


_VAL_PREFIX = "val_"
# model_dir/<name>.index and .data-*: the best archived and the latest epoch's checkpoint.
BEST_CHECKPOINT, LAST_CHECKPOINT = "best", "last"


def validation_metrics(logs) -> Dict[str, float]:
    """The scalar "val_" entries of Keras logs, named without the prefix (val_AP -> AP)."""
    return {key[len(_VAL_PREFIX):]: float(value) for key, value in logs.items()
            if key.startswith(_VAL_PREFIX) and np.ndim(value) == 0}


@contextlib.contextmanager
def ema_weights(model):
    """A context in which the model holds its EMA weights (if it keeps any).

    Under multi-worker training each swap's cross-replica reads are batched
    (on_read_variables_reduced_together); elsewhere it is ema.swapped_in().
    """
    ema = getattr(model, "ema", None)
    strategy = getattr(model, "distribute_strategy", None)
    if ema is None or not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        with ema.swapped_in() if ema is not None else contextlib.nullcontext():
            yield
        return
    swapped = list(ema.shadows) + list(ema._sources)
    with on_read_variables_reduced_together(swapped, strategy):
        ema._swap()
    try:
        yield
    finally:
        with on_read_variables_reduced_together(swapped, strategy):
            ema._swap()


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
        label_map = config.label_map if isinstance(config.label_map, dict) else None
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
        precision-recall curve of each class at IoU 0.5 into pr_curves/epoch-<epoch>.png."""
        logging.info("COCO metrics after epoch %d (EMA weights):\n%s", epoch,
                     format_metrics(metrics))
        if self.model_dir and self.evaluator.last_precision is not None:
            plot_precision_recall(precision_recall_curves(self.evaluator.last_precision),
                                  os.path.join(self.model_dir, PR_CURVES_DIR,
                                               "epoch-%d.png" % epoch), "epoch %d" % epoch)


class CheckpointCallback(keras.callbacks.Callback):
    """Writes model_dir/ckpt-<epoch> (raw + EMA, released layout) and archives the best.

    model_dir/last.{index,data-*} is the latest epoch's checkpoint and model_dir/best.* the
    best archived one (from the first evaluated epoch on): hard links (copies where the
    filesystem has none), so `--ckpt=<model_dir>/best` needs no epoch number. They are not
    ckpt-<epoch> names: the rotation, the `checkpoint` state file and the continuous
    evaluator leave them alone, and a link outlives the ckpt-<epoch> it was made from.

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
        with on_read_variables_reduced_together(
                list(self.model.variables) + (list(ema.shadows) if ema is not None else []),
                self.model.distribute_strategy):
            prefix = save_ckpt(self.model, os.path.join(self.model_dir, "ckpt-%d" % (epoch + 1)),
                               ema_values=ema.values_by_name() if ema is not None else None)
        copy_checkpoint(prefix, os.path.join(self.model_dir, LAST_CHECKPOINT), hard_link=True)
        self._remove_old_checkpoints()
        if logs and self.monitor in logs:
            self.archive.consider(prefix, epoch + 1, validation_metrics(logs))
            self._link_best()

    def _link_best(self) -> None:
        """Points model_dir/best at the archive's best checkpoint, unless it already does."""
        best = self.archive.best()
        target = os.path.join(self.model_dir, BEST_CHECKPOINT)
        if best is None or (os.path.exists(target + ".index") and
                            os.path.samefile(best["path"] + ".index", target + ".index")):
            return
        copy_checkpoint(best["path"], target, hard_link=True)

    def _remove_old_checkpoints(self) -> None:
        from efficientdet_keras.evaluation.continuous import list_checkpoints  # noqa: E402
        for prefix in list_checkpoints(self.model_dir)[:-self.keep]:
            for suffix in (".index", ".data-00000-of-00001"):
                if os.path.exists(prefix + suffix):
                    os.remove(prefix + suffix)


# The backup folder under model_dir; tf_keras keeps its checkpoints in <backup>/chief.
BACKUP_DIR = "backup"
# How the optimizer's step counter is named in a backup (a tf.train.Checkpoint of the
# model): model/optimizer/_iterations/..., or one level deeper under a LossScaleOptimizer.
_ITERATIONS_KEY_END = "_iterations/.ATTRIBUTES/VARIABLE_VALUE"


def backup_checkpoints_dir(backup_dir: str) -> str:
    """Where BackupAndRestore(backup_dir) writes its checkpoints (the chief's folder)."""
    return os.path.join(backup_dir, "chief")


def latest_backup_step(model_dir: str) -> int:
    """The optimizer step the backup in model_dir/backup resumes at; 0 without a backup.

    Read from the checkpoint file alone, so the CLI knows where a resumed run starts
    (to reseed its input pipeline) before it builds the model.

    Raises:
      ValueError naming the backup when it holds no optimizer step counter.
    """
    prefix = tf.train.latest_checkpoint(
        backup_checkpoints_dir(os.path.join(model_dir, BACKUP_DIR)))
    if prefix is None:
        return 0
    reader = tf.train.load_checkpoint(prefix)
    keys = [key for key in reader.get_variable_to_shape_map()
            if key.startswith("model/optimizer/") and key.endswith(_ITERATIONS_KEY_END)]
    if not keys:
        raise ValueError("Backup %s holds no optimizer step (no model/optimizer/.../%s); move "
                         "the backup folder away to start the run afresh"
                         % (prefix, _ITERATIONS_KEY_END))
    return int(reader.get_tensor(min(keys, key=len)))


class StepBackup(keras.callbacks.BackupAndRestore):
    """BackupAndRestore every `backup_steps` steps and at every epoch end.

    A run killed at any moment and started again resumes at the step of its last
    backup: weights, optimizer state (iterations, so the learning rate), EMA, epoch
    and step within it. Unlike BackupAndRestore(save_freq=N) it

    - counts steps, not `train_function` calls, and records the last step done, so
      with steps_per_execution > 1 no step is redone or skipped on resume;
    - backs up at each epoch end too, and never at an epoch's last step from the
      step hook: put last in the callback list, the epoch-end backup follows the
      epoch's evaluation and checkpoint, so a kill during them redoes them instead
      of skipping them;
    - backs nothing up once training was stopped (a NaN guard), and keeps the backup
      after the run (re-running a finished command only reports);
    - removes what a killed backup write left in the folder (TensorFlow's *_temp
      folders, checkpoints the folder's `checkpoint` file does not list).

    Logs "Resumed from the backup at step S" after a restore and, at --verbosity=1,
    "Finished step S" after every step (S counts steps since the run began).

    Args:
      backup_dir: the backup folder (get_callbacks: model_dir/backup).
      backup_steps: steps between backups; 0 backs up at epoch ends only.
    """

    def __init__(self, backup_dir: str, backup_steps: int):
        if backup_steps < 0:
            raise ValueError("backup_steps must be >= 0 (0: at epoch ends only), got %d"
                             % backup_steps)
        super().__init__(backup_dir, save_freq=int(backup_steps) or "epoch",
                         delete_checkpoint=False)
        self.backup_steps = int(backup_steps)
        self._steps_since_backup = 0
        self._first_step_of_call = 0
        self._stopped = False

    def on_train_begin(self, logs=None):
        checkpoints_dir = backup_checkpoints_dir(self.backup_dir)
        if self.model.distribute_strategy.extended.should_checkpoint:  # The one writer.
            remove_interrupted_backup_writes(checkpoints_dir)
        self._steps_since_backup, self._stopped = 0, False
        super().on_train_begin(logs)  # Restores the backup, if there is one.
        if tf.train.latest_checkpoint(checkpoints_dir):
            logging.info("Resumed from the backup at step %d in %s",
                         int(self.model.optimizer.iterations.numpy()), self.backup_dir)

    def on_train_batch_begin(self, batch, logs=None):
        self._first_step_of_call = batch

    def on_train_batch_end(self, batch, logs=None):
        """`batch` is the (0-based) index in the epoch of the last step this call ran."""
        if self.model.stop_training:
            self._stopped = True
            return
        self._steps_since_backup += batch - self._first_step_of_call + 1
        steps_per_epoch = self.params.get("steps")
        if logging.vlog_is_on(1):
            logging.vlog(1, "Finished step %d", int(self.model.optimizer.iterations.numpy()))
        last_of_epoch = steps_per_epoch is not None and batch + 1 >= steps_per_epoch
        if self.backup_steps and self._steps_since_backup >= self.backup_steps \
                and not last_of_epoch:
            self._backup(epoch=self._current_epoch, batch=batch)

    def on_epoch_end(self, epoch, logs=None):
        if not self._stopped:
            steps_per_epoch = self.params.get("steps") or 1
            self._backup(epoch=epoch, batch=steps_per_epoch - 1)

    def _backup(self, epoch, batch=0):
        # What the next fit resumes from: the epoch, and the step after `batch`
        # (the next epoch when `batch` is its last step).
        self._training_state._ckpt_saved_epoch.assign(epoch)
        self._training_state._ckpt_saved_batch.assign(batch)
        try:
            with on_read_variables_reduced_together(_checkpointed_variables(self.model),
                                                    self.model.distribute_strategy):
                super()._backup(epoch, batch)
        except (OSError, tf.errors.OpError) as e:  # Disk full: one line, not a stack trace.
            raise write_error(self.backup_dir, e) from None
        self._steps_since_backup = 0
        logging.vlog(1, "Backed up step %d in %s", int(self.model.optimizer.iterations.numpy()),
                     self.backup_dir)


def _on_read_means(variables):
    """The synchronised-on-read MEAN variables among `variables`."""
    return [v for v in variables
            if isinstance(v, tf.distribute.DistributedValues) and isinstance(v, tf.Variable)
            and v.synchronization == tf.VariableSynchronization.ON_READ
            and v.aggregation == tf.VariableAggregation.MEAN and v.dtype.is_floating]


@contextlib.contextmanager
def on_read_variables_reduced_together(variables, strategy):
    """Under MultiWorkerMirroredStrategy, makes the cross-replica reads of `variables`
    that are synchronised on read (BatchNorm moving statistics and their EMA shadows)
    take their values from one batched all-reduce done on entry, instead of one eager
    collective per variable and read, as TensorFlow does (about 25 ms each on loopback:
    a backup of a D0, with its EMA, took 10-14 s against well under 1 s in one process).

    The values read are the same cross-replica means, computed on entry: use it only
    around code that reads each such variable before writing it (a checkpoint save, an
    EMA swap). They reach the reads through each variable's `_get_cross_replica` (what a
    checkpoint's save spec and a cross-replica read call) until the block ends.
    Elsewhere (one process, MirroredStrategy) it does nothing.
    """
    on_read = (_on_read_means(variables)
               if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) else [])
    reduced = strategy.extended.batch_reduce_to(
        tf.distribute.ReduceOp.MEAN, [(v, v) for v in on_read]) if on_read else []
    means = [strategy.experimental_local_results(value)[0] for value in reduced]
    try:
        for variable, mean in zip(on_read, means):
            variable._get_cross_replica = (lambda mean=mean: mean)
        yield
    finally:
        for variable in on_read:
            variable.__dict__.pop("_get_cross_replica", None)


def _checkpointed_variables(root):
    return [t for t in tf.train.TrackableView(root).descendants() if isinstance(t, tf.Variable)]


def remove_interrupted_backup_writes(checkpoints_dir: str) -> None:
    """Deletes, in a backup's checkpoint folder, what killed writes left behind.

    TensorFlow writes a checkpoint into <prefix>_temp/ before moving it into place,
    then replaces the folder's `checkpoint` file (through checkpoint.tmp<id>) to list
    it; the files of a checkpoint that file does not name as the latest are leftovers.
    """
    if not os.path.isdir(checkpoints_dir):
        return
    latest = tf.train.latest_checkpoint(checkpoints_dir)
    kept = os.path.basename(latest) if latest else None
    for name in sorted(os.listdir(checkpoints_dir)):
        path = os.path.join(checkpoints_dir, name)
        prefix = name.split(".")[0]
        if name == "checkpoint" or prefix == kept:
            continue
        if prefix.endswith("_temp") and os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.isfile(path) and (prefix.startswith("ckpt-") or
                                       name.startswith("checkpoint.tmp")):
            os.remove(path)
        else:
            continue
        logging.warning("Removed %s, left by an interrupted backup write", path)


def get_callbacks(config, model_dir: str, val_dataset=None, evaluator=None,
                  eval_samples: Optional[int] = None, display_images: int = 4,
                  archive_keep: int = 3, profile_batch=0, strategy=None):
    """The standard callback list for a training run in model_dir.

    Order matters: COCO evaluation first, so the checkpoint archive, TensorBoard
    and any user callback after them see val_AP in `logs`. StepBackup (a
    BackupAndRestore) in model_dir/backup makes an interrupted run resume at the
    step of its last backup (every config.backup_steps steps and at each epoch end),
    with optimizer state and EMA. NaNGuard, before it, raises NonFiniteLossError at a step
    with a NaN or inf loss or gradient norm (fit_with_nan_recovery answers it when the config
    allows nan_recovery_attempts). With model_optimizations.prune, tfmot's pruning step
    update comes first (kernels and their averages masked before evaluation and checkpoints)
    and its PruningSummaries is the TensorBoard callback (sparsity in model_dir/metrics).
    ResultsCallback writes model_dir/results.csv and plots/ after each epoch.
    `display_images` validation images (0: none) are drawn, ground truth beside the
    detections, at each COCO evaluation into model_dir/eval_images (COCOCallback).
    Under multi-worker training (`strategy`, default the current one) only the chief
    writes into model_dir; every other worker writes the same files into its
    workers.write_dir, and all of them resume from the chief's backup.
    """
    backup_dir = os.path.join(model_dir, BACKUP_DIR)  # Keras' BackupAndRestore knows the rule.
    model_dir = write_dir(model_dir, strategy)
    callbacks = []
    if is_pruning(config):
        from efficientdet_keras.optimization.pruning_keras import training_callbacks
        pruning_step, tensorboard = training_callbacks(model_dir, profile_batch)
        callbacks.append(pruning_step)
    else:
        tensorboard = keras.callbacks.TensorBoard(log_dir=model_dir, profile_batch=profile_batch)
    if val_dataset is not None:
        callbacks.append(COCOCallback(config, val_dataset, evaluator, model_dir,
                                      max_images=eval_samples, eval_images=display_images))
    callbacks.append(CheckpointCallback(model_dir, archive_keep=archive_keep))
    # After the evaluation and checkpoint: the row holds val_AP and the epoch's whole time.
    callbacks.append(ResultsCallback(model_dir))
    callbacks += [
        tensorboard,
        # Before BackupAndRestore: a NaN or inf step raises before anything is backed up.
        NaNGuard(config.get("nan_recovery_attempts", 0), config.get("nan_recovery_lr_factor", 0.5)),
        # Last: its epoch-end backup comes after the epoch's evaluation and checkpoint.
        StepBackup(backup_dir, config.get("backup_steps", 0)),
    ]
    return callbacks


__all__ = ["BACKUP_DIR", "BEST_CHECKPOINT", "COCOCallback", "CheckpointCallback",
           "LAST_CHECKPOINT", "METRIC_NAMES", "ResultsCallback", "StepBackup", "get_callbacks",
           "latest_backup_step"]
