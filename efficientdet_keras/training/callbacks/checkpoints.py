"""Checkpoints written during training: every epoch's, and the best-k archive.

CheckpointCallback writes a name-based checkpoint (raw and EMA weights, the
released layout) at every epoch end, and keeps the best-k archive by a metric
(val_AP, stored as "AP" in the archive it shares with the continuous evaluator),
with model_dir/best.* and last.* naming the best and the latest.
"""

import os
from typing import Dict

import numpy as np
import tf_keras as keras

from efficientdet_keras.checkpoint.archive import ARCHIVE_MONITOR, CheckpointArchive, copy_checkpoint
from efficientdet_keras.checkpoint import save_ckpt
from efficientdet_keras.training.workers import on_read_variables_reduced_together


_VAL_PREFIX = "val_"
# model_dir/<name>.index and .data-*: the best archived and the latest epoch's checkpoint.
BEST_CHECKPOINT, LAST_CHECKPOINT = "best", "last"


def validation_metrics(logs) -> Dict[str, float]:
    """The scalar "val_" entries of Keras logs, named without the prefix (val_AP -> AP)."""
    return {key[len(_VAL_PREFIX):]: float(value) for key, value in logs.items()
            if key.startswith(_VAL_PREFIX) and np.ndim(value) == 0}


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
