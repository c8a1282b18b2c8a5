"""time_budget: a run that fits into the hours a user has (a hosted notebook, a preemptible
VM). StopAtTimeBudget ends fit with TimeBudgetReached at the step after which the next one
would pass the budget, that step backed up; the time a run has used is kept in
model_dir/time_used.json, so a run resumed after a kill or a stop counts it, and a run whose
budget is used up trains no further until the budget is raised.

When the steps the budget leaves are fewer than the run plans, the learning-rate schedule's
decay is fitted into them (training/schedule_pace.py): after the first few steps of each start
and again after each epoch (its evaluation's time then known), from the measured times. The
run then ends near the end of its decay instead of high up on it.
"""

import collections
import json
import os
import time
import numpy as np
import tf_keras as keras
from absl import logging

from efficientdet_keras.training.preemption import any_worker, mean_over_workers
from efficientdet_keras.training.schedule_pace import paced_schedule
from efficientdet_keras.utils.fileio import write_json_atomically

TIME_USED_FILE = "time_used.json"
# The wall time of a run is written this often, besides at each epoch end and the stop.
_WRITE_EVERY_SECONDS = 60.0
# Steps whose times estimate the next step's (the first, with its tracing, soon drops out).
_RECENT_STEPS = 20
# Steps of a start measured before the schedule is first fitted to the budget: the median of
# three is past the first step's tracing.
_FIT_AFTER_STEPS = 3


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

    def __init__(self, hours: float, model_dir: str, backup, fit_schedule: bool = True):
        super().__init__()
        self._supports_tf_logs = True  # It reads no logs.
        self.budget_seconds = float(hours) * 3600.0
        self.hours = float(hours)
        self.model_dir = model_dir
        self.backup = backup
        self._used_before = 0.0
        self._start = self._last_step = self._last_write = 0.0
        self._steps = collections.deque(maxlen=_RECENT_STEPS)
        self._step_before = self._epoch_end_before = 0.0
        self._due = False
        self.fit_schedule = fit_schedule
        # The time between an epoch's last step and the next one's first: its evaluation,
        # checkpoints and reports.
        self._epoch_ends = collections.deque(maxlen=_RECENT_STEPS)
        self._last_step_end = None
        self._fit_due = False

    def used_seconds(self) -> float:
        return self._used_before + time.monotonic() - self._start

    def _write(self) -> None:
        self._last_write = time.monotonic()
        write_json_atomically(os.path.join(self.model_dir, TIME_USED_FILE),
                              {"seconds": round(self.used_seconds(), 3),
                               "step_seconds": round(self._next_step(), 3),
                               "epoch_end_seconds": round(self._epoch_end(), 3),
                               "budget_hours": self.hours})

    def _next_step(self) -> float:
        """The next step's expected seconds: the median of the recent ones, or of the last
        process's when this one has taken none yet."""
        return float(np.median(self._steps)) if self._steps else self._step_before

    def _epoch_end(self) -> float:
        """An epoch end's expected seconds: the median of this start's, or the last
        process's before this one has seen one."""
        return float(np.median(self._epoch_ends)) if self._epoch_ends else self._epoch_end_before

    def on_train_begin(self, logs=None):
        earlier = _record(self.model_dir)
        self._used_before = earlier.get("seconds", 0.0)
        self._step_before = earlier.get("step_seconds", 0.0)
        self._epoch_end_before = earlier.get("epoch_end_seconds", 0.0)
        self._start = self._last_step = self._last_write = time.monotonic()
        self._steps.clear()
        self._epoch_ends.clear()
        self._last_step_end = None
        self._due = self._fit_due = False
        if self._used_before + self._step_before > self.budget_seconds:
            self._stop("a step would pass it when this start began")
        if self._step_before:  # A resumed run: at once, by the last process's times.
            self._fit_schedule()

    def on_train_batch_begin(self, batch, logs=None):
        self._last_step = time.monotonic()
        if batch == 0 and self._last_step_end is not None:  # An epoch's end came between.
            self._epoch_ends.append(self._last_step - self._last_step_end)
            self._fit_due = True

    def on_train_batch_end(self, batch, logs=None):
        now = self._last_step_end = time.monotonic()
        self._steps.append(now - self._last_step)
        if now - self._last_write >= _WRITE_EVERY_SECONDS:
            self._write()
        if self._fit_due or len(self._steps) == _FIT_AFTER_STEPS:
            self._fit_due = False
            self._fit_schedule()
        steps_per_epoch = self.params.get("steps")
        epoch_ends = steps_per_epoch is not None and batch + 1 >= steps_per_epoch
        # At an epoch's last step its end (evaluation, checkpoints) comes before the next step.
        ahead = self._next_step() + (self._epoch_end() if epoch_ends else 0.0)
        over = any_worker(self.used_seconds() + ahead > self.budget_seconds,
                          self.model.distribute_strategy)
        if not over:
            return
        if epoch_ends:
            self._due = True  # The epoch's end comes next: stop after its work and backup.
            return
        self.backup.back_up_now(batch)
        self._stop("the next step would pass it")

    def _fit_schedule(self) -> None:
        """Paces the rest of the schedule into the steps the budget has left, each step at
        the recent steps' median and each epoch's end at the measured ones'."""
        paced = paced_schedule(self.model.optimizer) if self.fit_schedule else None
        if paced is None:
            return
        executions = getattr(self.model, "_steps_per_execution", None)  # Steps per batch.
        per_step = self._next_step() / (int(executions.numpy()) if executions is not None else 1)
        steps_per_epoch = self.params.get("steps")
        if steps_per_epoch:
            per_step += self._epoch_end() / steps_per_epoch
        left = max(self.budget_seconds - self.used_seconds(), 0.0)
        steps_left = mean_over_workers(left / max(per_step, 1e-9),
                                       self.model.distribute_strategy)
        step = int(self.model.optimizer.iterations.numpy())
        schedule = paced.schedule
        rate = paced.pace.fit(step, steps_left, schedule.warmup_steps, schedule.total_steps)
        if rate > 1.0 + 1e-6:
            logging.info("Time budget: the schedule's decay now ends after about %d more "
                         "steps (%.2fx its planned pace)", steps_left, rate)

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

