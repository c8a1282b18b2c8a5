"""time_budget: a run that fits into the hours a user has (a hosted notebook, a preemptible
VM). StopAtTimeBudget ends fit with TimeBudgetReached at the step after which the next one
would pass the budget, that step backed up; the time a run has used is kept in
model_dir/time_used.json, so a run resumed after a kill or a stop counts it, and a run whose
budget is used up trains no further until the budget is raised.
"""

import collections
import json
import os
import time
import numpy as np
import tf_keras as keras
from absl import logging

from efficientdet_keras.training.preemption import any_worker
from efficientdet_keras.utils.fileio import write_json_atomically

TIME_USED_FILE = "time_used.json"
# The wall time of a run is written this often, besides at each epoch end and the stop.
_WRITE_EVERY_SECONDS = 60.0
# Steps whose times estimate the next step's (the first, with its tracing, soon drops out).
_RECENT_STEPS = 20


class TimeBudgetReached(Exception):
    """fit stopped because the next step would pass config.time_budget; the last finished
    step is backed up (step, backup_dir)."""

    def __init__(self, hours: float, used_seconds: float, step: int, backup_dir: str):
        super().__init__(
            "the time budget of %g h is used (%.2f h) after step %d, backed up in %s; raise "
            "time_budget (--time_budget) and run the same command again to train on"
            % (hours, used_seconds / 3600.0, step, backup_dir))
        self.hours, self.used_seconds, self.step = hours, used_seconds, step
        self.backup_dir = backup_dir


def time_used(model_dir: str) -> float:
    """Seconds of training the run in model_dir has used so far (0 for a new run)."""
    return _record(model_dir).get("seconds", 0.0)


def _record(model_dir: str) -> dict:
    path = os.path.join(model_dir, TIME_USED_FILE)
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return {k: float(v) for k, v in json.load(f).items() if isinstance(v, (int, float))}


class StopAtTimeBudget(keras.callbacks.Callback):
    """Raises TimeBudgetReached once the time used plus the next step's (the median of the
    recent steps) would pass `hours`; at an epoch's last step, after the epoch's evaluation,
    checkpoint and backup. Put it after the StepBackup `backup` (get_callbacks does).
    """

    def __init__(self, hours: float, model_dir: str, backup):
        super().__init__()
        self._supports_tf_logs = True  # It reads no logs.
        self.budget_seconds = float(hours) * 3600.0
        self.hours = float(hours)
        self.model_dir = model_dir
        self.backup = backup
        self._used_before = 0.0
        self._start = self._last_step = self._last_write = 0.0
        self._steps = collections.deque(maxlen=_RECENT_STEPS)
        self._step_before = 0.0
        self._due = False

    def used_seconds(self) -> float:
        return self._used_before + time.monotonic() - self._start

    def _write(self) -> None:
        self._last_write = time.monotonic()
        write_json_atomically(os.path.join(self.model_dir, TIME_USED_FILE),
                              {"seconds": round(self.used_seconds(), 3),
                               "step_seconds": round(self._next_step(), 3),
                               "budget_hours": self.hours})

    def _next_step(self) -> float:
        """The next step's expected seconds: the median of the recent ones, or of the last
        process's when this one has taken none yet."""
        return float(np.median(self._steps)) if self._steps else self._step_before

    def on_train_begin(self, logs=None):
        earlier = _record(self.model_dir)
        self._used_before = earlier.get("seconds", 0.0)
        self._step_before = earlier.get("step_seconds", 0.0)
        self._start = self._last_step = self._last_write = time.monotonic()
        self._steps.clear()
        self._due = False
        if self._used_before + self._step_before > self.budget_seconds:
            self._stop("a step would pass it when this start began")

    def on_train_batch_begin(self, batch, logs=None):
        self._last_step = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        now = time.monotonic()
        self._steps.append(now - self._last_step)
        if now - self._last_write >= _WRITE_EVERY_SECONDS:
            self._write()
        over = any_worker(self.used_seconds() + self._next_step() > self.budget_seconds,
                          self.model.distribute_strategy)
        if not over:
            return
        steps_per_epoch = self.params.get("steps")
        if steps_per_epoch is not None and batch + 1 >= steps_per_epoch:
            self._due = True  # The epoch's end comes next: stop after its work and backup.
            return
        self.backup.back_up_now(batch)
        self._stop("the next step would pass it")

    def on_epoch_end(self, epoch, logs=None):
        self._write()
        if self._due:
            self._stop("the next epoch's first step would pass it")

    def on_train_end(self, logs=None):
        self._write()

    def _stop(self, why: str) -> None:
        self._write()
        step = int(self.model.optimizer.iterations.numpy())
        logging.warning("Time budget of %g h reached after step %d (%s)", self.hours, step, why)
        raise TimeBudgetReached(self.hours, self.used_seconds(), step, self.backup.backup_dir)

