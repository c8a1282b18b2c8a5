"""Resume to the step: the backup in model_dir/backup and how to read it.

StepBackup (a Keras BackupAndRestore) backs up weights, optimizer state, EMA, epoch
and step every few steps and at each epoch end, so a killed run started again goes
on from its last backup. latest_backup_step reads where that will be without
building the model.
"""

import os
import shutil
from typing import Optional

import tensorflow as tf
import tf_keras as keras
from absl import logging

from efficientdet_keras.utils.fileio import write_error
from efficientdet_keras.training.background_checkpoint import (BackgroundCheckpointWriter,
                                                               can_snapshot, wait_for_writes_into)
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
    checkpoints_dir = backup_checkpoints_dir(os.path.join(model_dir, BACKUP_DIR))
    wait_for_writes_into(checkpoints_dir)  # One this process is writing, as after a fit.
    prefix = tf.train.latest_checkpoint(checkpoints_dir)
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
    - writes a step's backup while the next step runs (BackgroundCheckpointWriter: the
      state is read at the step's end and written on a thread of its own); the next
      step's hook waits for the write only if it is not done by then, so that no step
      counts as finished more than `backup_steps` steps after the last backup written;
    - backs up at each epoch end too, and never at an epoch's last step from the
      step hook: put last in the callback list, the epoch-end backup follows the
      epoch's evaluation and checkpoint, so a kill during them redoes them instead
      of skipping them. The epoch-end backup, the one `back_up_now` writes (a signal
      to stop) and a write in progress when fit ends are written before the hook returns;
    - backs nothing up once training was stopped (a NaN guard), and keeps the backup
      after the run (re-running a finished command only reports);
    - removes what a killed backup write left in the folder (TensorFlow's *_temp
      folders, checkpoints the folder's `checkpoint` file does not list).

    A state spread over replicas (tf.distribute) is written in place, as BackupAndRestore
    writes it.

    Logs "Resumed from the backup at step S" after a restore and, at --verbosity=1,
    "Finished step S" after every step taken (S counts steps since the run began; a step
    the NaN guard left out takes none) and "Backed up step S" once its backup is written.

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
        self._steps_since_backup = 0  # Steps after the last backup taken.
        self._steps_since_written = 0  # Steps after the last backup written.
        self._writing = False  # The last backup taken is being written in the background.
        self._snapshot_step = None  # Its optimizer step, for the log.
        self._writer: Optional[BackgroundCheckpointWriter] = None  # Kept from fit to fit.
        self._in_background = False
        self._first_step_of_call = 0
        self._stopped = False
        self._last_logged_step = None

    def on_train_begin(self, logs=None):
        checkpoints_dir = backup_checkpoints_dir(self.backup_dir)
        wait_for_writes_into(checkpoints_dir)  # An earlier fit's, in this process.
        if self.model.distribute_strategy.extended.should_checkpoint:  # The one writer.
            remove_interrupted_backup_writes(checkpoints_dir)
        self._steps_since_backup = self._steps_since_written = 0
        self._writing, self._stopped, self._last_logged_step = False, False, None
        super().on_train_begin(logs)  # Restores the backup, if there is one.
        self._in_background = self._write_in_background()
        if tf.train.latest_checkpoint(checkpoints_dir):
            logging.info("Resumed from the backup at step %d in %s",
                         int(self.model.optimizer.iterations.numpy()), self.backup_dir)

    def _write_in_background(self) -> bool:
        """Puts the BackgroundCheckpointWriter in place of the manager Keras saves with
        (its back_up() calls save()), when this process is the one writer and the state can
        be read at a moment and written later."""
        state = self._training_state
        manager = state.write_checkpoint_manager
        if manager is not state.read_checkpoint_manager or not can_snapshot(manager.checkpoint):
            return False
        if self._writer is None or self._writer.directory != manager.directory:
            self._writer = BackgroundCheckpointWriter(manager.checkpoint, manager.directory)
        else:  # A later fit: another checkpoint of the same model.
            self._writer.checkpoint = manager.checkpoint
        state.write_checkpoint_manager = self._writer
        return True

    def on_train_end(self, logs=None):
        self.finish_writing()
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
        steps = batch - self._first_step_of_call + 1
        self._steps_since_backup += steps
        self._steps_since_written += steps
        # Before this step counts as finished: at most backup_steps after a written backup.
        self._collect_write(wait=self._steps_since_written > self.backup_steps)
        if logging.vlog_is_on(1):
            step = int(self.model.optimizer.iterations.numpy())
            if step != self._last_logged_step:
                logging.vlog(1, "Finished step %d", step)
                self._last_logged_step = step
        steps_per_epoch = self.params.get("steps")
        last_of_epoch = steps_per_epoch is not None and batch + 1 >= steps_per_epoch
        if self.backup_steps and self._steps_since_backup >= self.backup_steps \
                and not last_of_epoch:
            self._backup(epoch=self._current_epoch, batch=batch, wait=False)

    def back_up_now(self, batch: int) -> None:
        """Backs up the step that just ended (`batch`, its index in the epoch), written when
        this returns, unless training was stopped (what StopOnSignal calls on a signal)."""
        if self._stopped:
            return
        if self._steps_since_backup:
            self._backup(epoch=self._current_epoch, batch=batch)
        else:  # The step hook just took it.
            self.finish_writing()

    def on_epoch_end(self, epoch, logs=None):
        if not self._stopped:
            steps_per_epoch = self.params.get("steps") or 1
            self._backup(epoch=epoch, batch=steps_per_epoch - 1)

    def finish_writing(self) -> None:
        """Waits for the backup being written, if one is; raises its write's error."""
        self._collect_write(wait=True)

    def _backup(self, epoch, batch=0, wait=True):
        """Backs up the step that just ended: written before this returns when `wait` (and
        when written in place), else in the background."""
        if self.guard is not None:
            self.guard.check()
        self.finish_writing()  # One write at a time.
        # What the next fit resumes from: the epoch, and the step after `batch`
        # (the next epoch when `batch` is its last step).
        self._training_state._ckpt_saved_epoch.assign(epoch)
        self._training_state._ckpt_saved_batch.assign(batch)
        try:
            with on_read_variables_reduced_together(_checkpointed_variables(self.model),
                                                    self.model.distribute_strategy):
                super()._backup(epoch, batch)  # Written in place, or read for the writer.
        except (OSError, tf.errors.OpError) as e:  # Disk full: one line, not a stack trace.
            raise write_error(self.backup_dir, e) from None
        self._writing, self._steps_since_backup = True, 0
        # The step's number, for the log only: reading it waits for the device.
        self._snapshot_step = (int(self.model.optimizer.iterations.numpy())
                               if logging.vlog_is_on(1) else None)
        if wait or not self._in_background:
            self.finish_writing()

    def _collect_write(self, wait: bool) -> None:
        """Takes note of the backup being written once it is (waiting for it if `wait`)."""
        if not self._writing:
            return
        if self._in_background:
            if not (wait or self._writer.done()):
                return
            self._writing = False  # Its error, if any, is raised once.
            try:
                self._writer.wait()
            except (OSError, tf.errors.OpError) as e:
                raise write_error(self.backup_dir, e) from None
        self._writing = False
        self._steps_since_written = self._steps_since_backup
        if self._snapshot_step is not None:
            logging.vlog(1, "Backed up step %d in %s", self._snapshot_step, self.backup_dir)


def finish_backup_writes(callbacks) -> None:
    """Waits for the backup the StepBackup among `callbacks` is writing (after a fit that
    raised, which skips on_train_end); an error of that write is logged, not raised: the
    error fit raised comes first, and the previous backup is intact."""
    for callback in callbacks or ():
        if isinstance(callback, StepBackup):
            try:
                callback.finish_writing()
            except OSError as e:
                logging.warning("%s", e)


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
