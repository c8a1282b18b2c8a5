"""Stopping on SIGTERM, Ctrl-C or a closed terminal without losing a step.

Preemptible VMs, Kubernetes, Slurm and TPU maintenance send SIGTERM and allow a grace
period before SIGKILL; people stop runs with Ctrl-C (SIGINT); a terminal or SSH connection that
closes sends SIGHUP to the run in its foreground. While `fit` runs, StopOnSignal (a Keras
callback, right after StepBackup in get_callbacks) catches all three:

- during a step: the step finishes, StepBackup backs it up, and fit raises TrainingStopped;
  run again, the run resumes at the next step;
- during the epoch-end work (COCO evaluation, checkpoint, epoch-end backup): that work
  finishes, then fit raises TrainingStopped; the restart begins the next epoch, so nothing
  is done twice. A grace period shorter than the rest of an evaluation ends in SIGKILL and
  the run resumes from its last backup, which was written atomically and is intact;
- a second signal of the same kind acts as it would without this callback: a second
  Ctrl-C raises KeyboardInterrupt at once, a second SIGTERM ends the process. A
  KeyboardInterrupt raised while TensorFlow's C++ code runs Python (looking up an attribute
  of a tracked object, say) can be cleared there without a trace, or turned into a
  SystemError, so a second Ctrl-C is also remembered, and StopOnSignal raises
  KeyboardInterrupt at its next hook if the first one was lost: at the latest when the work
  in progress (a step, its backup, an evaluation) ends. A program that owns its process (the
  command-line tool) passes `on_second_interrupt` instead: it is called from a thread of its
  own the moment the second Ctrl-C arrives (Python's wakeup fd), even while the main thread
  is inside TensorFlow, and ends the process there.

After a SIGHUP the terminal is gone and writing to it fails (EIO), which would end fit in the
progress bar before the step's backup: the standard output and error that were a terminal go
to a file in the run's folder instead (HANGUP_LOG), the stop line included.

Under MultiWorkerMirroredStrategy the workers agree after every step (one small all-reduce):
a signal to any worker makes all of them back up the same step (the chief writes) and stop.

`efficientdet-train` turns TrainingStopped into RESUMABLE_EXIT_STATUS.
"""

import os
import select
import signal
import sys
import threading
from typing import Callable, Dict, List, Optional, Set

import tensorflow as tf
import tf_keras as keras
from absl import logging

from efficientdet_keras.training.backup import StepBackup

# The exit status of a run stopped by a signal after backing up its step: "resume me".
# TensorFlow's PreemptionCheckpointHandler uses it for the same meaning, and a shell reports
# it for a process ended by SIGTERM, which is also resumable (from the last backup).
RESUMABLE_EXIT_STATUS = 143
# The signals that ask a run to stop: preemption notices, Ctrl-C and a closed terminal
# (SIGHUP, which Windows does not have).
STOP_SIGNALS = tuple(s for s in (signal.SIGTERM, signal.SIGINT, getattr(signal, "SIGHUP", None))
                     if s is not None)
# Where a run's terminal output goes once its terminal has closed, in the run's folder.
HANGUP_LOG = "output_after_hangup.log"


class TrainingStopped(Exception):
    """fit stopped on a signal after backing up its last finished step.

    Attributes:
      signal_name: "SIGTERM", "SIGINT" or "SIGHUP".
      step: the optimizer step backed up; the restart begins after it.
      backup_dir: the backup folder the restart resumes from.
    """

    def __init__(self, signal_name: str, step: int, backup_dir: str):
        super().__init__("stopped by %s after step %d, backed up in %s; run the same command "
                         "again to resume" % (signal_name, step, backup_dir))
        self.signal_name, self.step, self.backup_dir = signal_name, step, backup_dir


class StopSignals:
    """Catches SIGTERM, SIGINT and SIGHUP while installed and remembers the first one.

    The first signal of a kind puts back the handler that was there before, so the second
    one acts as it would without this class (a second SIGTERM ends the process at once).
    Python's own Ctrl-C handler is the exception: this class keeps catching SIGINT and
    raises KeyboardInterrupt itself for the second one, remembering that it did. Handlers
    can only be set from the main thread; elsewhere install() logs why and catches nothing.

    Args:
      on_second_interrupt: called, instead of raising KeyboardInterrupt, when a second Ctrl-C
        comes; from a watcher thread, at once, wherever the main thread is. It must end the
        process (os._exit). None: KeyboardInterrupt, for code that shares its process.
      hangup_log: the file the standard output and error that are a terminal go to after a
        SIGHUP (appended to); None: os.devnull.

    Attributes:
      received: the name of the first signal caught ("SIGTERM", "SIGINT"), or None.
      interrupted: whether a second Ctrl-C came while Python's KeyboardInterrupt handler was
        the one before: the run must end with KeyboardInterrupt (see raise_if_interrupted).
    """

    def __init__(self, on_second_interrupt: Optional[Callable[[], None]] = None,
                 hangup_log: Optional[str] = None):
        self.hangup_log = hangup_log
        self._terminal_fds: List[int] = []
        self.received: Optional[str] = None
        self.interrupted = False
        self.on_second_interrupt = on_second_interrupt
        self._previous: Dict[int, object] = {}
        self._caught: Set[int] = set()
        self._watcher: Optional[_SecondInterruptWatcher] = None

    def install(self) -> None:
        self.received, self.interrupted = None, False
        self._caught.clear()
        if threading.current_thread() is not threading.main_thread():
            logging.warning("fit runs outside the main thread: SIGTERM and Ctrl-C are not "
                            "caught, and a stop loses the steps since the last backup")
            return
        # Known now: once the terminal has hung up, isatty() says no.
        self._terminal_fds = [fd for fd in (1, 2) if _is_terminal(fd)]
        for signum in STOP_SIGNALS:
            if signum not in self._previous:
                self._previous[signum] = signal.signal(signum, self._on_signal)

    def uninstall(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher = None
        for signum in list(self._previous):
            self._restore(signum)

    def raise_if_interrupted(self) -> None:
        """Raises the KeyboardInterrupt of a second Ctrl-C, in case the one its handler
        raised was lost."""
        if self.interrupted:
            raise KeyboardInterrupt

    def _restore(self, signum: int) -> None:
        previous = self._previous.pop(signum)
        if signal.getsignal(signum) == self._on_signal:  # Not replaced by someone else.
            signal.signal(signum, signal.SIG_DFL if previous is None else previous)

    def _on_signal(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        if name == "SIGHUP":
            self._leave_the_closed_terminal()
        if signum in self._caught:  # A second Ctrl-C: KeyboardInterrupt, remembered.
            if self.on_second_interrupt is not None:  # The watcher may not have run yet.
                self.on_second_interrupt()
            self._restore(signum)
            self.interrupted = True
            signal.default_int_handler(signum, frame)
        self.received = self.received or name
        if self._previous[signum] is signal.default_int_handler:
            self._caught.add(signum)  # Stays set, to remember the second one.
            if self.on_second_interrupt is not None and self._watcher is None:
                self._watcher = _SecondInterruptWatcher(self.on_second_interrupt)
        else:  # Ends the process (SIG_DFL) or does what its owner wants, as before fit.
            self._restore(signum)
        logging.warning("%s received: finishing the current step and backing it up, then "
                        "stopping (send it again to stop at once)", name)


    def _leave_the_closed_terminal(self) -> None:
        """Points the standard output and error that were the terminal at hangup_log."""
        if not self._terminal_fds:
            return
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass  # What the closed terminal could not take is lost anyway.
        try:
            target = os.open(self.hangup_log or os.devnull,
                             os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError:
            target = os.open(os.devnull, os.O_WRONLY)
        for fd in self._terminal_fds:
            os.dup2(target, fd)
        os.close(target)
        self._terminal_fds = []


def _is_terminal(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False


class _SecondInterruptWatcher:
    """Calls `action` from a thread of its own when the next SIGINT arrives. CPython's C-level
    handler writes each signal's number to the wakeup fd as it comes, whatever the main thread
    is doing; the Python handler runs only when the main thread next runs Python. Made by the
    Python handler of the first Ctrl-C, so in the main thread, as set_wakeup_fd requires."""

    def __init__(self, action: Callable[[], None]):
        self._action = action
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._previous_fd = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        self._stopping = threading.Event()
        threading.Thread(target=self._watch, name="second-ctrl-c", daemon=True).start()

    def _watch(self) -> None:
        try:
            while not self._stopping.is_set():
                ready, _, _ = select.select([self._read], [], [], 0.5)
                if ready and signal.SIGINT in os.read(self._read, 64) and \
                        not self._stopping.is_set():
                    self._action()
                    return
        finally:
            os.close(self._read)
            os.close(self._write)

    def stop(self) -> None:
        """Puts back the wakeup fd that was set before (main thread only)."""
        self._stopping.set()
        if threading.current_thread() is threading.main_thread():
            signal.set_wakeup_fd(self._previous_fd)


def any_worker(flag: bool, strategy: tf.distribute.Strategy) -> bool:
    """Whether `flag` holds on any worker of a MultiWorkerMirroredStrategy (an all-reduce
    every worker must call at the same point); `flag` itself elsewhere."""
    return mean_over_workers(1.0 if flag else 0.0, strategy) > 0


def mean_over_workers(value: float, strategy: tf.distribute.Strategy) -> float:
    """The mean of `value` over the workers of a MultiWorkerMirroredStrategy (an all-reduce
    every worker must call at the same point), so that all decide alike; `value` elsewhere."""
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) or \
            strategy.extended._num_workers == 1:  # noqa: SLF001 (no public worker count)
        return float(value)
    values = strategy.experimental_distribute_values_from_function(
        lambda context: tf.constant(float(value)))
    return float(strategy.reduce(tf.distribute.ReduceOp.MEAN, values, axis=None))


class StopOnSignal(keras.callbacks.Callback):
    """Ends fit with TrainingStopped after a SIGTERM, SIGINT or SIGHUP, its last step backed
    up.

    Put it after `backup` in the callback list (get_callbacks does): at a step's end the
    step backup has run, and at an epoch's end so has the epoch's evaluation, checkpoint
    and backup. The signal handlers are set at the start of fit and put back at its end
    (EfficientDetNetTrain.fit also puts them back when fit raises).

    Args:
      backup: the run's StepBackup, which writes the backup the restart resumes from.
      on_second_interrupt: see StopSignals; the command-line tool's ends the process.
    """

    def __init__(self, backup: StepBackup,
                 on_second_interrupt: Optional[Callable[[], None]] = None):
        super().__init__()
        self._supports_tf_logs = True  # It reads no logs: Keras need not copy them to the host.
        self.backup = backup
        self.signals = StopSignals(on_second_interrupt, os.path.join(
            os.path.dirname(os.path.abspath(backup.backup_dir)), HANGUP_LOG))

    def on_train_begin(self, logs=None):
        self.signals.install()

    def on_train_end(self, logs=None):
        self.release()

    def release(self) -> None:
        """Puts back the signal handlers that were there before fit."""
        self.signals.uninstall()

    def _stop_requested(self) -> bool:
        return any_worker(self.signals.received is not None, self.model.distribute_strategy)

    def on_train_batch_begin(self, batch, logs=None):
        self.signals.raise_if_interrupted()

    def on_train_batch_end(self, batch, logs=None):
        self.signals.raise_if_interrupted()
        steps_per_epoch = self.params.get("steps")
        if steps_per_epoch is not None and batch + 1 >= steps_per_epoch:
            return  # The epoch's end comes next: stop after its work and backup.
        if self._stop_requested():
            self.backup.back_up_now(batch)
            self._stop()

    def on_epoch_end(self, epoch, logs=None):
        self.signals.raise_if_interrupted()
        if self._stop_requested():
            self._stop()

    def _stop(self) -> None:
        self.signals.raise_if_interrupted()  # A second Ctrl-C during the backup.
        self.release()
        name = self.signals.received or "a signal to another worker"
        step = int(self.model.optimizer.iterations.numpy())
        logging.warning("Stopped by %s after step %d; backed up in %s", name, step,
                        self.backup.backup_dir)
        raise TrainingStopped(name, step, self.backup.backup_dir)


def release_signal_handlers(callbacks) -> None:
    """Puts back the handlers of every StopOnSignal among `callbacks` (after a fit that
    raised, which skips on_train_end)."""
    for callback in callbacks or ():
        if isinstance(callback, StopOnSignal):
            callback.release()
