"""Resume to the step: the backup in model_dir/backup and how to read it.

StepBackup (a Keras BackupAndRestore) backs up weights, optimizer state, EMA, epoch
and step every few steps and at each epoch end, so a killed run started again goes
on from its last backup. latest_backup_step reads where that will be without
building the model.
"""

import os
import shutil

import tensorflow as tf
import tf_keras as keras
from absl import logging

from efficientdet_keras.utils.fileio import write_error
from efficientdet_keras.training.workers import on_read_variables_reduced_together


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
    "Finished step S" after every step taken (S counts steps since the run began; a step
    the NaN guard left out takes none).

    Args:
      backup_dir: the backup folder (get_callbacks: model_dir/backup).
      backup_steps: steps between backups; 0 backs up at epoch ends only.
      guard: the run's NaNGuard, asked before each backup (it raises when a non-finite step
        came since its last look, so no backup follows one).
    """

    def __init__(self, backup_dir: str, backup_steps: int, guard=None):
        if backup_steps < 0:
            raise ValueError("backup_steps must be >= 0 (0: at epoch ends only), got %d"
                             % backup_steps)
        super().__init__(backup_dir, save_freq=int(backup_steps) or "epoch",
                         delete_checkpoint=False)
        self.backup_steps = int(backup_steps)
        self.guard = guard
        self._steps_since_backup = 0
        self._first_step_of_call = 0
        self._stopped = False
        self._last_logged_step = None

    def on_train_begin(self, logs=None):
        checkpoints_dir = backup_checkpoints_dir(self.backup_dir)
        if self.model.distribute_strategy.extended.should_checkpoint:  # The one writer.
            remove_interrupted_backup_writes(checkpoints_dir)
        self._steps_since_backup, self._stopped = 0, False
        self._last_logged_step = None
        super().on_train_begin(logs)  # Restores the backup, if there is one.
        if tf.train.latest_checkpoint(checkpoints_dir):
            logging.info("Resumed from the backup at step %d in %s",
                         int(self.model.optimizer.iterations.numpy()), self.backup_dir)

    def on_train_end(self, logs=None):
        super().on_train_end(logs)
        # Keras deletes the model's attribute, which Model.__init__ set to None: a later fit
        # without a backup would fail on the missing attribute.
        self.model._training_state = None  # noqa: SLF001

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
            step = int(self.model.optimizer.iterations.numpy())
            if step != self._last_logged_step:
                logging.vlog(1, "Finished step %d", step)
                self._last_logged_step = step
        last_of_epoch = steps_per_epoch is not None and batch + 1 >= steps_per_epoch
        if self.backup_steps and self._steps_since_backup >= self.backup_steps \
                and not last_of_epoch:
            self._backup(epoch=self._current_epoch, batch=batch)

    def back_up_now(self, batch: int) -> None:
        """Backs up the step that just ended (`batch`, its index in the epoch), unless the
        step hook just did or training was stopped (what StopOnSignal calls on a signal)."""
        if self._steps_since_backup and not self._stopped:
            self._backup(epoch=self._current_epoch, batch=batch)

    def on_epoch_end(self, epoch, logs=None):
        if not self._stopped:
            steps_per_epoch = self.params.get("steps") or 1
            self._backup(epoch=epoch, batch=steps_per_epoch - 1)

    def _backup(self, epoch, batch=0):
        if self.guard is not None:
            self.guard.check()
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
