"""ResultsCallback: model_dir/results.csv and its plots, a row after each epoch
(reports.results_csv writes them)."""

import time
from typing import Optional

import tf_keras as keras

from efficientdet_keras.reports.results_csv import ResultsFile


class ResultsCallback(keras.callbacks.Callback):
    """Writes model_dir/results.csv and its plots (model_dir/plots/*.png) after each epoch.

    Put it after COCOCallback (get_callbacks does), so the logs hold val_AP. A resumed run
    keeps the rows before its first epoch. Plots need matplotlib (see reports.plots).

    Args:
      model_dir: the run directory.
      plots: draw the PNG plots (when matplotlib is installed).
    """

    def __init__(self, model_dir: str, plots: bool = True):
        super().__init__()
        self.results = ResultsFile(model_dir, plots)
        self._epoch_start: Optional[float] = None

    def on_train_begin(self, logs=None):
        self.results.load()

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch_start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        seconds = time.perf_counter() - (self._epoch_start or time.perf_counter())
        self.results.add_epoch(epoch + 1, seconds, logs or {})
