"""The NaN and inf guard of training, and the optional recovery from a NaN.

A step whose loss terms or gradient norm are not finite is a *non-finite step*:

- `EfficientDetNetTrain.train_step` does not apply it, nor any step after it. Weights,
  BatchNorm statistics, optimizer slots and iterations and the EMA stay as they were after
  the step before (`run_cond` applies the update only on healthy steps; `NonFiniteRecord`
  keeps the step number and loss values of the first bad step for the message).
- Under float16 with dynamic loss scaling, a non-finite gradient with a finite loss is
  the loss-scale optimizer's normal skipped step (an overflow: it halves the scale and
  skips), until the loss scale can no longer explain it: at the scale's floor of 1 the
  gradient overflows unscaled, and `MAX_OVERFLOW_SKIPS` skips in a row mean the gradient
  grew by 2 ** (MAX_OVERFLOW_SKIPS - 1) or more in a step. Such a step is non-finite.
- `NaNGuard` (a Keras callback, first in `get_callbacks`' list) raises `NonFiniteLossError`
  naming the step and the loss terms, at the end of the step after the non-finite one (the
  `train_function` call after it, with steps_per_execution > 1). Reading the record right
  after its step would make the host wait for the device to finish that step before it
  queues the next one, a pause after every step. So at the end of step k the guard takes
  the step's count of non-finite steps (`nonfinite_steps`, a tensor of the step's logs), a
  DeferredFlagReader reads it (on a thread of its own when it is in device memory), and the
  guard looks at that value at the end of step k + 1, when the read is done; the step
  computed in vain changes nothing (train_step applies no step after a non-finite one). The
  guard also reads the record itself before every backup and at the end of each epoch
  (before the evaluation and checkpoint), so no checkpoint, backup or archive entry is
  written after a non-finite step.
- `fit_with_nan_recovery` is `model.fit` that, while `nan_recovery_attempts` allows,
  answers the error as Model Garden does: it rolls back to the last BackupAndRestore
  backup (by running fit again, which restores it) and continues with the learning rate
  multiplied by `nan_recovery_lr_factor`. The factor lives in `NaNRecoveryState`, which
  the model's checkpoints (and so the backup) hold, so a later resume keeps it.
"""

import os
from typing import Callable, Dict, Optional, Sequence

import tensorflow as tf
import tf_keras as keras
from absl import logging

from efficientdet_keras.training.background_checkpoint import wait_for_writes_into
from efficientdet_keras.training.deferred_read import DeferredFlagReader
from efficientdet_keras.training.optimizers import ScaledSchedule
from efficientdet_keras.training.state_variables import replica_local_variable, scalar_variable


class NonFiniteLossError(ValueError):
    """Training stopped at a step with a NaN or inf loss term or gradient norm.

    A ValueError, so the command-line tools report it in one line (cli/common.run_or_exit).
    """


def run_cond(condition: tf.Tensor, true_fn: Callable, false_fn: Callable, *args) -> None:
    """Runs true_fn(*args) when `condition` holds, else false_fn(*args). Graph friendly.

    Call it in a replica context. Either function may call merge_call (as
    optimizer.apply_gradients and the EMA update do), which a tf.cond in a replica
    context may not: under strategies that need merge_call the cond runs in the
    cross-replica context and the chosen function runs on every replica with its own
    values of `args` (as LossScaleOptimizer does). `condition` (a scalar bool) must be the
    same on every replica; the functions return nothing.
    """
    def branch(fn, fn_args):
        def run():
            fn(*fn_args)
        return run

    if tf.__internal__.distribute.strategy_supports_no_merge_call():
        tf.cond(condition, branch(true_fn, args), branch(false_fn, args))
        return

    def cross_replica(strategy, condition, *replica_args):
        everywhere = tf.reduce_all(tf.stack(strategy.experimental_local_results(condition)))

        def on_each_replica(fn):
            return lambda: strategy.extended.call_for_each_replica(fn, args=replica_args)
        tf.cond(everywhere, on_each_replica(true_fn), on_each_replica(false_fn))

    tf.distribute.get_replica_context().merge_call(cross_replica, args=(condition,) + args)


# Loss-scale skips in a row that still count as float16 overflows (see the module docstring).
# A skip streak of n means the scale that fitted the step before was too large by 2 ** n: at
# the start of training (scale 2 ** 15) 10 skips mean a gradient element above ~1000, and
# later they mean the gradients grew 500-fold in one step; neither is a scale still settling.
MAX_OVERFLOW_SKIPS = 10


class NonFiniteRecord(tf.Module):
    """What train_step keeps about non-finite steps, for NaNGuard's message.

    Attributes:
      names: the logged values recorded (loss terms and gradient_norm), in order.
      count: int64, non-finite steps since the last `reset` (0 or 1: train_step takes no
        step after one).
      step: int64, the number (1-based optimizer step) of the first of them.
      values: float32 [len(names)], its values of `names`.
      overflow_skips: int64, the loss-scale optimizer's skipped steps in a row so far.
    Not part of any checkpoint: it describes the running process only. Written in the
    replicas' steps (replica-local variables, see replica_local_variable).
    """

    def __init__(self, names: Sequence[str]):
        super().__init__(name="nonfinite_record")
        self.names = tuple(names)
        with tf.init_scope():
            self.count = replica_local_variable(0, tf.int64, "nonfinite_count")
            self.step = replica_local_variable(0, tf.int64, "nonfinite_step")
            self.values = replica_local_variable([0.0] * len(self.names), tf.float32,
                                                  "nonfinite_values")
            self.overflow_skips = replica_local_variable(0, tf.int64, "overflow_skips")

    @property
    def stopped(self) -> tf.Tensor:
        """Whether a non-finite step was recorded since the last reset (scalar bool)."""
        return self.count > 0

    def record(self, nonfinite: tf.Tensor, step: tf.Tensor,
               values: Dict[str, tf.Tensor]) -> None:
        """Counts the step if `nonfinite` (scalar bool); keeps its number and values if it is
        the first. Without tf.cond: cheap to trace, valid in any replica step."""
        first = nonfinite & tf.equal(self.count, 0)
        self.step.assign(tf.where(first, tf.cast(step, tf.int64), self.step))
        stacked = tf.stack([tf.cast(values.get(name, 0.0), tf.float32) for name in self.names])
        self.values.assign(tf.where(first, stacked, self.values))
        self.count.assign_add(tf.cast(nonfinite, tf.int64))

    def overflow_explains(self, overflow: tf.Tensor, loss_scale: tf.Tensor) -> tf.Tensor:
        """Whether a loss-scale skip (`overflow`: the gradients are not finite, the loss is)
        is still a float16 overflow: the scale is above its floor of 1 and fewer than
        MAX_OVERFLOW_SKIPS skips came in a row. Counts the streak (0 after a finite step)
        until a non-finite step is recorded, so the message tells the streak that ended."""
        streak = tf.where(overflow, self.overflow_skips + 1, tf.zeros_like(self.overflow_skips))
        streak = tf.where(self.stopped, self.overflow_skips, streak)
        self.overflow_skips.assign(streak)
        return (tf.cast(loss_scale, tf.float32) > 1.0) & (streak < MAX_OVERFLOW_SKIPS)

    def reset(self) -> None:
        self.count.assign(0)
        self.overflow_skips.assign(0)

    def describe(self, epoch: Optional[int] = None, loss_scale: Optional[float] = None) -> str:
        """One line naming the first recorded step and its non-finite values, e.g.
        "non-finite loss at step 12 (epoch 2): cls_loss=nan, det_loss=nan, loss=nan
        (finite: box_loss=0.0213, reg_l2_loss=0.4871, gradient_norm=3.1); ...".
        `loss_scale`: float16's dynamic loss scale, named when it no longer explained a
        non-finite gradient."""
        step = int(self.step.numpy())
        values = dict(zip(self.names, self.values.numpy().tolist()))
        bad = ", ".join("%s=%s" % (n, v) for n, v in values.items() if not _finite(v))
        good = ", ".join("%s=%.4g" % (n, v) for n, v in values.items() if _finite(v))
        where = "step %d%s" % (step, "" if epoch is None else " (epoch %d)" % (epoch + 1))
        scaling = ""
        if loss_scale is not None and all(_finite(v) for n, v in values.items()
                                          if n != "gradient_norm"):
            scaling = ("; not a float16 overflow: %d non-finite gradients in a row, the loss "
                       "scale at %g (at its floor of 1, or after %d in a row, loss scaling cannot "
                       "explain them)" % (int(self.overflow_skips.numpy()), loss_scale,
                                          MAX_OVERFLOW_SKIPS))
        return ("non-finite loss at %s: %s (finite: %s)%s; the update was skipped, the weights "
                "are those after step %d (nan_recovery_attempts > 0 rolls back to the last "
                "backup with a lower learning rate)" % (where, bad, good or "none", scaling,
                                                        step - 1))


def _finite(value: float) -> bool:
    return value == value and abs(value) != float("inf")


class NaNRecoveryState(tf.Module):
    """What NaN recovery changed, held by the model's checkpoints so a resume keeps it.

    Attributes:
      lr_scale: float32, the factor on the learning-rate schedule (1 until a recovery);
        `ScaledSchedule` (optimizers.py) multiplies the schedule by it.
      recoveries: int64, recoveries made in this run so far.
    """

    def __init__(self):
        super().__init__(name="nan_recovery")
        with tf.init_scope():
            self.lr_scale = scalar_variable(1.0, tf.float32, "lr_scale")
            self.recoveries = scalar_variable(0, tf.int64, "recoveries")


def latest_backup(callbacks) -> Optional[str]:
    """The newest checkpoint written by the BackupAndRestore among `callbacks`, or None."""
    for callback in callbacks:
        if isinstance(callback, keras.callbacks.BackupAndRestore):
            # WorkerTrainingState keeps the chief's backups in <backup_dir>/chief.
            checkpoints_dir = os.path.join(callback.backup_dir, "chief")
            wait_for_writes_into(checkpoints_dir)  # The one a fit that raised was writing.
            return tf.train.latest_checkpoint(checkpoints_dir)
    return None


class NaNGuard(keras.callbacks.Callback):
    """Stops training with a NonFiniteLossError once a step was non-finite.

    Replaces keras TerminateOnNaN, which stops only after the NaN update was applied.
    EfficientDetNetTrain takes no step after a non-finite one, so the guard need not make
    the host wait for each step's result: at the end of each `train_function` call it looks
    at the count of non-finite steps as it was after the call before, read meanwhile (see the
    module docstring), so it stops fit one call after the non-finite step. It also reads
    the record at each epoch end and when `check()` is called (StepBackup calls it before
    each backup). Put it first in the callback list (get_callbacks does), so that its checks
    come before the evaluation, the checkpoint and any backup. Other models are checked
    after every step, from their logged loss.

    Args:
      attempts: how many times fit_with_nan_recovery may roll back and retry
        (config nan_recovery_attempts; 0: stop at the first non-finite step).
      lr_factor: the learning rate is multiplied by this at each recovery
        (config nan_recovery_lr_factor).
    """

    def __init__(self, attempts: int = 0, lr_factor: float = 0.5):
        super().__init__()
        self._supports_tf_logs = True  # Keras then leaves the step's logs on the device.
        self.attempts = int(attempts)
        self.lr_factor = float(lr_factor)
        self._epoch = None
        self._flags = DeferredFlagReader()  # The record's flag after each call, read late.
        self._pending_recovery = None  # (lr_scale, recoveries) to set once the backup is back.

    def on_train_begin(self, logs=None):
        self._flags.forget()
        record = getattr(self.model, "nonfinite", None)
        if record is not None:
            record.reset()

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        self._flags.forget()  # The epoch-end check read the record after it.
        if self._pending_recovery is not None:
            # BackupAndRestore restored the backup in on_train_begin: scale on top of it.
            lr_scale, recoveries = self._pending_recovery
            self._pending_recovery = None
            state = self.model.nan_recovery
            state.lr_scale.assign(lr_scale)
            state.recoveries.assign(recoveries)
            # .numpy(): int() fails on a distributed (Mirrored) variable.
            step = int(self.model.optimizer.iterations.numpy())
            logging.warning("NaN recovery %d of %d: rolled back to the backup at step %d "
                            "(epoch %d); the learning rate is now %g x the schedule",
                            recoveries, self.attempts, step, epoch, lr_scale)

    def on_train_batch_end(self, batch, logs=None):
        record = getattr(self.model, "nonfinite", None)
        if record is None:
            if logs and not _finite(float(logs.get("loss", 0.0))):
                # A model without the guarded train_step: its weights are already updated.
                raise NonFiniteLossError("non-finite loss %s at batch %d of epoch %d"
                                         % (float(logs["loss"]), batch, (self._epoch or 0) + 1))
            return
        # The step's count of non-finite steps in the epoch, which it logs (no op to run),
        # else the record's flag; as it was after the call before.
        flag = logs.get("nonfinite_steps") if logs else None
        if self._flags.exchange(record.stopped if flag is None else flag):
            self.check()

    def on_epoch_end(self, epoch, logs=None):
        self.check()

    def check(self) -> None:
        """Raises NonFiniteLossError if a non-finite step was recorded since fit began."""
        record = getattr(self.model, "nonfinite", None)
        if record is not None and int(record.count.numpy()):
            raise NonFiniteLossError(record.describe(self._epoch, _dynamic_loss_scale(self.model)))

    def prepare_recovery(self, callbacks) -> Optional[str]:
        """Arranges the next fit to continue from the backup at a lower learning rate.

        Returns None when it will, or why it cannot (no attempts left, no backup, a
        learning rate NaN recovery cannot scale).
        """
        state = getattr(self.model, "nan_recovery", None)
        if state is None or not uses_scale(self.model.optimizer, state.lr_scale):
            return "NaN recovery needs the optimizer compile() builds from the config"
        recoveries = int(state.recoveries.numpy())
        if recoveries >= self.attempts:
            return "no NaN recovery attempts left (nan_recovery_attempts=%d)" % self.attempts
        if latest_backup(callbacks) is None:
            return "no backup to roll back to yet"
        self._pending_recovery = (float(state.lr_scale.numpy()) * self.lr_factor, recoveries + 1)
        return None


def _dynamic_loss_scale(model) -> Optional[float]:
    """The current scale of a dynamic LossScaleOptimizer, else None."""
    optimizer = getattr(model, "optimizer", None)
    if isinstance(optimizer, keras.mixed_precision.LossScaleOptimizer) and optimizer.dynamic:
        return float(optimizer.loss_scale.numpy())
    return None


def uses_scale(optimizer, scale: tf.Variable) -> bool:
    """Whether the optimizer's learning rate is a ScaledSchedule of `scale`."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)  # LossScaleOptimizer
    schedule = getattr(inner, "_learning_rate", None)
    return isinstance(schedule, ScaledSchedule) and schedule.scale is scale


def fit_with_nan_recovery(model, x=None, callbacks=(), **fit_kwargs):
    """model.fit(x, callbacks=callbacks, **fit_kwargs), recovering from non-finite steps.

    On a NonFiniteLossError, while the NaNGuard among `callbacks` has attempts left and a
    backup exists, fit runs again: BackupAndRestore restores the backup (weights,
    optimizer, EMA, epoch and step) and the guard multiplies the learning rate by its
    lr_factor. Otherwise the error is raised, with the reason it was not recovered.

    Returns:
      The History of the last fit.
    """
    callbacks = list(callbacks)
    guard = next((c for c in callbacks if isinstance(c, NaNGuard)), None)
    while True:
        try:
            return model.fit(x, callbacks=callbacks, **fit_kwargs)
        except NonFiniteLossError as error:
            reason = guard.prepare_recovery(callbacks) if guard and guard.attempts else ""
            if reason is not None:
                raise NonFiniteLossError("%s%s" % (error, "; " + reason if reason else "")) \
                    from None
            logging.warning("%s", error)


__all__ = ["MAX_OVERFLOW_SKIPS", "NaNGuard", "NaNRecoveryState", "NonFiniteLossError",
           "NonFiniteRecord", "fit_with_nan_recovery", "run_cond"]
