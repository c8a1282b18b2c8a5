"""Evaluating checkpoints: one, or every new one of a training run (continuous mode).

`CheckpointEvaluation` builds the model, data and evaluator once and scores any
checkpoint; `evaluate_continuously` watches a model dir for ckpt-<epoch>
checkpoints, scores each once (with EMA weights when present), writes the
metrics to TensorBoard and eval/metrics.json, keeps the best in the archive
(shared with the trainer, ranked by "AP"), skips a checkpoint that the
trainer's rotation deleted before it was read, and stops after the final
epoch's checkpoint. Both `efficientdet-eval` and
`efficientdet-train --mode=eval` use it.
"""

import json
import os
import re
import time
from typing import Callable, Dict, List, Optional

import tensorflow as tf
from absl import logging

from efficientdet_keras.config.label_maps import label_names
from efficientdet_keras.checkpoint.archive import ARCHIVE_MONITOR, CheckpointArchive
from efficientdet_keras.checkpoint import restore_ckpt
from efficientdet_keras.data.pipeline import InputPipeline
from efficientdet_keras.evaluation.coco_evaluator import COCOEvaluator
from efficientdet_keras.evaluation.id_check import check_source_ids_match
from efficientdet_keras.utils.fileio import write_json_atomically
from efficientdet_keras.evaluation.runner import (EvaluationTiming, evaluate_dataset,
                                                  flip_tta_fns, make_detect_fns)
from efficientdet_keras.model import EfficientDetNet
from efficientdet_keras.model.folding import can_fold, fold_batch_norms, fold_into

_CKPT_NAME = re.compile(r"^ckpt-(\d+)$")


def checkpoint_epoch(prefix: str) -> Optional[int]:
    """The epoch of a checkpoint named ckpt-<epoch>, else None."""
    match = _CKPT_NAME.match(os.path.basename(prefix))
    return int(match.group(1)) if match else None


def list_checkpoints(model_dir: str) -> List[str]:
    """Complete ckpt-<epoch> checkpoint prefixes in model_dir, oldest first."""
    found = []
    for name in os.listdir(model_dir):
        if name.endswith(".index") and checkpoint_epoch(name[:-len(".index")]) is not None:
            found.append(os.path.join(model_dir, name[:-len(".index")]))
    return sorted(found, key=checkpoint_epoch)


class CheckpointEvaluation:
    """A model, an evaluation pipeline and an evaluator, reused for every checkpoint.

    Args:
      config: the model config (image size, classes, NMS settings).
      source: a data source (TFRecordSource, CocoSource, ...).
      annotation_file: COCO ground-truth JSON; None takes ground truth from the data.
      batch_size, max_images, backend, use_ema, progress: evaluation settings.
      on_detections: evaluate_dataset's per-batch hook (e.g. EvaluationImages), or None.

    Raises:
      ValueError (one line, before any model is built) when some image of `source`
      is not in `annotation_file`.
    """

    def __init__(self, config, source, annotation_file: Optional[str] = None,
                 batch_size: int = 8, max_images: Optional[int] = None, backend: str = "auto",
                 use_ema: bool = True, progress: bool = True, on_detections=None):
        if annotation_file:
            check_source_ids_match(source, annotation_file)
        self.config = config
        self.pipeline = InputPipeline(config, source, is_training=False, batch_size=batch_size)
        label_map = label_names(config.label_map)
        self.evaluator = COCOEvaluator(annotation_file, label_map=label_map, backend=backend)
        self.model = EfficientDetNet(config=config)
        # What runs: BatchNorm folded into the convs (model/folding.py), re-folded for each
        # checkpoint into the same copy so its traced functions are reused.
        self.network = fold_batch_norms(self.model) if can_fold(config) else self.model
        self.detect_fns = make_detect_fns(self.network, config)
        if config.tta:  # Each image and its mirror image, fused (detection/tta.py).
            self.detect_fns = flip_tta_fns(self.detect_fns, config)
        self.max_images, self.use_ema, self.progress = max_images, use_ema, progress
        self.on_detections = on_detections

    def run(self, checkpoint: str):
        """Returns (checkpoint prefix, metrics, EvaluationTiming)."""
        report = restore_ckpt(self.model, checkpoint, use_ema=self.use_ema, skip_mismatch=False)
        logging.info("Evaluating %s (%s weights)", report.path,
                     "EMA" if report.loaded_from_ema else "plain")
        if self.network is not self.model:
            fold_into(self.model, self.network)
        metrics, timing = evaluate_dataset(self.network, self.pipeline(), self.config,
                                           self.evaluator, max_images=self.max_images,
                                           progress=self.progress, detect_fns=self.detect_fns,
                                           on_detections=self.on_detections)
        health = self.pipeline.health.summary()
        if any(health.values()):
            logging.warning("Data problems: %s", health)
        return report.path, metrics, timing


# What reading a checkpoint raises when its files vanish underneath.
_CHECKPOINT_GONE = (FileNotFoundError, tf.errors.NotFoundError, tf.errors.DataLossError)


def _skip_if_deleted(prefix: str, error: Exception, before: str) -> None:
    """Warns when the checkpoint is gone (the trainer's rotation); re-raises otherwise."""
    if os.path.exists(prefix + ".index"):
        raise error
    reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    logging.warning("Skipping %s: the trainer deleted it before %s (%s)", prefix, before, reason)


def evaluate_continuously(evaluation: CheckpointEvaluation, model_dir: str,
                          archive_keep: int = 3, timeout: Optional[float] = None,
                          poll_seconds: float = 5.0,
                          on_result: Optional[Callable[[str, Dict, EvaluationTiming], None]] = None,
                          running_trainer: Optional[Callable[[], Optional[str]]] = None):
    """Evaluates each new ckpt-<epoch> in model_dir once, until the final epoch's.

    It stops earlier after `timeout` seconds without a new checkpoint (None: never). With
    `running_trainer` (it names the live trainer of model_dir, or gives None), the wait is
    measured from the newest checkpoint's time instead, and lasts as long as a trainer runs:
    an evaluator that follows a trainer which died stops on its own.

    Results go to model_dir/eval (TensorBoard scalars coco/<metric> and
    metrics.json, which a restarted evaluator reads to skip finished work) and
    the best `archive_keep` checkpoints by AP to model_dir/archive. A checkpoint
    that disappears before it is read (the trainer keeps only its latest few) is
    skipped with a warning.

    Returns:
      (best archive entry with "path" or None, whether the final epoch was evaluated).
    """
    eval_dir = os.path.join(model_dir, "eval")
    os.makedirs(eval_dir, exist_ok=True)
    results_path = os.path.join(eval_dir, "metrics.json")
    results = {}
    if os.path.exists(results_path):
        with open(results_path) as f:
            results = json.load(f)
    archive = CheckpointArchive(os.path.join(model_dir, "archive"), keep=archive_keep,
                                monitor=ARCHIVE_MONITOR)
    writer = tf.summary.create_file_writer(eval_dir)
    final_epoch = int(evaluation.config.num_epochs)
    last_new = started = time.time()
    while True:
        for prefix in list_checkpoints(model_dir):
            if os.path.basename(prefix) in results:
                continue
            epoch = checkpoint_epoch(prefix)
            try:
                _, metrics, timing = evaluation.run(prefix)
            except _CHECKPOINT_GONE as e:
                _skip_if_deleted(prefix, e, "it could be evaluated")
                continue
            if on_result is not None:
                on_result(prefix, metrics, timing)
            with writer.as_default(step=epoch):
                for name, value in metrics.items():
                    tf.summary.scalar("coco/" + name, value)
            writer.flush()
            try:
                archive.consider(prefix, epoch, metrics)
            except _CHECKPOINT_GONE as e:
                _skip_if_deleted(prefix, e, "it could be archived")
            results[os.path.basename(prefix)] = dict(metrics, epoch=epoch)
            write_json_atomically(results_path, results)
            last_new = time.time()
        finished = [value["epoch"] for value in results.values()]
        if finished and max(finished) >= final_epoch:
            return archive.best(), True
        if running_trainer is None:
            if timeout and time.time() - last_new > timeout:
                logging.info("No new checkpoint in %s for %d s; stopping.", model_dir, timeout)
                return archive.best(), False
        elif timeout and time.time() - _newest_checkpoint_time(model_dir, started) > timeout \
                and running_trainer() is None:
            logging.warning("Stopping: no trainer runs in %s and its newest checkpoint is more "
                            "than %d s old (--eval_timeout=0 waits for the final epoch in any "
                            "case)", model_dir, timeout)
            return archive.best(), False
        time.sleep(poll_seconds)


def _newest_checkpoint_time(model_dir: str, default: float) -> float:
    """When the newest ckpt-<epoch> in model_dir was written; `default` without one."""
    times = []
    for prefix in list_checkpoints(model_dir):
        try:
            times.append(os.path.getmtime(prefix + ".index"))
        except OSError:  # Rotated away meanwhile.
            continue
    return max(times, default=default)
