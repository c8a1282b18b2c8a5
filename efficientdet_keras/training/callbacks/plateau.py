"""StopOnPlateau: training ends once `patience` COCO evaluations in a row bring no better
validation AP; the best checkpoint stays in the archive (CheckpointCallback keeps it).

The count is read from model_dir/coco_metrics.json, every evaluation of the run, so a run
resumed after a kill keeps it, and a run that stopped on its plateau is not trained further
when started again (`TrainingRun.fit` asks `plateau_reached` first).
"""

import json
import os
from typing import Dict, Optional, Tuple

import tf_keras as keras
from absl import logging

METRICS_FILE = "coco_metrics.json"


def plateau_state(ap_by_epoch: Dict[int, float]) -> Tuple[Optional[float], Optional[int], int]:
    """(best AP, its epoch, evaluations since it) over {epoch: AP}; a tie is no better."""
    best, best_epoch, since = None, None, 0
    for epoch in sorted(ap_by_epoch):
        if best is None or ap_by_epoch[epoch] > best:
            best, best_epoch, since = ap_by_epoch[epoch], epoch, 0
        else:
            since += 1
    return best, best_epoch, since


def evaluated_ap(model_dir: str) -> Dict[int, float]:
    """{epoch: AP} of model_dir/coco_metrics.json ({} without it)."""
    path = os.path.join(model_dir, METRICS_FILE)
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return {int(epoch): float(metrics["AP"]) for epoch, metrics in json.load(f).items()
                if isinstance(metrics, dict) and "AP" in metrics}


def plateau_reached(patience: int, model_dir: str) -> Optional[str]:
    """The line saying so when the run in model_dir already stopped on its plateau; else
    None."""
    if not patience:
        return None
    best, best_epoch, since = plateau_state(evaluated_ap(model_dir))
    if since < patience:
        return None
    return ("%s stopped after %d evaluations without a better AP than %.4f (epoch %d, "
            "patience %d); raise patience or num_epochs to train on"
            % (model_dir, since, best, best_epoch, patience))


class StopOnPlateau(keras.callbacks.Callback):
    """Sets `model.stop_training` after `patience` evaluations (val_AP in `logs`, which
    COCOCallback writes before it) without a better AP than the run's best.

    Put it after COCOCallback and CheckpointCallback, before the backup: the epoch that
    ends the run is evaluated, archived and backed up as any other.
    """

    def __init__(self, patience: int, model_dir: str):
        super().__init__()
        self.patience = int(patience)
        self.model_dir = model_dir
        self.best, self.best_epoch, self.since = None, None, 0
        self.stopped_epoch = None

    def on_train_begin(self, logs=None):
        self.best, self.best_epoch, self.since = plateau_state(evaluated_ap(self.model_dir))

    def on_epoch_end(self, epoch, logs=None):
        ap = (logs or {}).get("val_AP")
        if ap is None:
            return  # Not an evaluation epoch (map_freq).
        ap = float(ap)
        if self.best is None or ap > self.best:
            self.best, self.best_epoch, self.since = ap, epoch + 1, 0
            return
        self.since += 1
        if self.since >= self.patience:
            self.stopped_epoch = epoch + 1
            self.model.stop_training = True
            logging.warning("No better AP in %d evaluations (best %.4f after epoch %d): "
                            "training stops after epoch %d (patience %d)", self.since,
                            self.best, self.best_epoch, epoch + 1, self.patience)
