"""Stopping on SIGTERM, Ctrl-C and SIGHUP without losing a step: StopOnSignal in one process,
real `efficientdet-train` processes signalled at random moments and started again, and one
whose terminal closes."""

import contextlib
import logging
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from helpers import TinyTrainer, tiny_config
from efficientdet_keras.training.backup import StepBackup, latest_backup_step
from efficientdet_keras.training.preemption import (RESUMABLE_EXIT_STATUS, StopOnSignal,
                                                    StopSignals, TrainingStopped)

STEPS_PER_EPOCH, EPOCHS, BACKUP_STEPS = 5, 2, 2


@contextlib.contextmanager
def python_default_handlers():
    """SIGINT raises KeyboardInterrupt and SIGTERM and SIGHUP end the process, as in a fresh
    Python, whatever the test runner set; the runner's handlers come back afterwards."""
    saved = {signum: signal.getsignal(signum)
             for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        yield
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)


class SignalSender(keras.callbacks.Callback):
    """Sends signals to this process while step `at_step` (1-based) runs, or when the
    epoch-end work of epoch `at_epoch_end` (0-based) begins; put it first. Records where
    fit started and which epochs' end work ran."""

    def __init__(self, signals=(), at_step=None, at_epoch_end=None):
        super().__init__()
        self.signals, self.at_step, self.at_epoch_end = signals, at_step, at_epoch_end
        self.started_at, self.ended_epochs, self._epoch = None, [], None

    def _send(self):
        for signum in self.signals:
            os.kill(os.getpid(), signum)

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        if self.started_at is None:
            self.started_at = (self._epoch, batch)
        if int(self.model.optimizer.iterations) + 1 == self.at_step:
            self._send()

    def on_epoch_end(self, epoch, logs=None):
        self.ended_epochs.append(epoch)
        if epoch == self.at_epoch_end:
            self._send()


def fit(model_dir, sender):
    """A fresh TinyTrainer (a restarted process) fitted with StepBackup and StopOnSignal
    in model_dir/backup, as get_callbacks orders them; returns the model."""
    model = TinyTrainer()
    data = tf.data.Dataset.from_tensors(([[1.0, 2.0, 3.0]], [[1.0, -1.0]])).repeat()
    backup = StepBackup(os.path.join(model_dir, "backup"), BACKUP_STEPS)
    model.fit(data, epochs=EPOCHS, steps_per_epoch=STEPS_PER_EPOCH, verbose=0,
              callbacks=[sender, backup, StopOnSignal(backup)])
    return model


def assert_same_state(got, want):
    for got_value, want_value in zip(got.state(), want.state()):
        np.testing.assert_array_equal(got_value, want_value)


@pytest.mark.quick
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_during_a_step_backs_that_step_up_and_the_restart_loses_nothing(
        tmp_path, signum):
    reference = fit(str(tmp_path / "whole"), SignalSender())
    model_dir = str(tmp_path / "run")
    with python_default_handlers():
        handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        before = [signal.getsignal(s) for s in handled]
        with pytest.raises(TrainingStopped) as stopped:
            fit(model_dir, SignalSender([signum], at_step=3))
        # The handlers of before fit are back.
        assert [signal.getsignal(s) for s in handled] == before
    assert stopped.value.signal_name == signal.Signals(signum).name
    # Step 3 ran to its end and was backed up, although backups come every 2 steps.
    assert stopped.value.step == 3 and latest_backup_step(model_dir) == 3
    assert "after step 3" in str(stopped.value) and "resume" in str(stopped.value)
    # The restart begins at step 4 (epoch 0, batch 3) and ends like an unstopped run.
    restart = SignalSender()
    resumed = fit(model_dir, restart)
    assert restart.started_at == (0, 3)
    assert_same_state(resumed, reference)


@pytest.mark.parametrize("moment", ["last step", "epoch end"])
def test_a_signal_at_the_epochs_end_stops_after_its_evaluation_and_backup(tmp_path, moment):
    reference = fit(str(tmp_path / "whole"), SignalSender())
    model_dir = str(tmp_path / "run")
    sender = (SignalSender([signal.SIGTERM], at_step=STEPS_PER_EPOCH) if moment == "last step"
              else SignalSender([signal.SIGTERM], at_epoch_end=0))
    with python_default_handlers(), pytest.raises(TrainingStopped) as stopped:
        fit(model_dir, sender)
    # The epoch-end work (the sender stands for the evaluation) ran once, then its backup.
    assert sender.ended_epochs == [0]
    assert stopped.value.step == STEPS_PER_EPOCH
    assert latest_backup_step(model_dir) == STEPS_PER_EPOCH
    # The restart begins the next epoch and does not redo epoch 0's end.
    restart = SignalSender()
    resumed = fit(model_dir, restart)
    assert restart.started_at == (1, 0) and restart.ended_epochs == [1]
    assert_same_state(resumed, reference)


@pytest.mark.quick
def test_a_second_ctrl_c_raises_keyboard_interrupt_at_once_and_keeps_the_last_backup(tmp_path):
    model_dir = str(tmp_path / "run")
    with python_default_handlers(), pytest.raises(KeyboardInterrupt):
        # The second SIGINT arrives while the first still waits for its step to end.
        fit(model_dir, SignalSender([signal.SIGINT, signal.SIGINT], at_step=3))
    assert latest_backup_step(model_dir) == 2  # The regular backup of step 2, intact.


class SwallowingSender(SignalSender):
    """Sends two SIGINTs and clears the KeyboardInterrupt of the second, as C code that
    calls Python and ignores its errors does (CPython's PyObject_HasAttr, for one)."""

    def _send(self):
        os.kill(os.getpid(), signal.SIGINT)
        try:
            os.kill(os.getpid(), signal.SIGINT)  # Its handler runs before kill returns.
        except KeyboardInterrupt:
            self.swallowed = True


@pytest.mark.quick
def test_a_second_ctrl_c_whose_keyboard_interrupt_was_lost_still_ends_fit(tmp_path):
    model_dir = str(tmp_path / "run")
    sender = SwallowingSender([signal.SIGINT], at_step=3)
    with python_default_handlers():
        with pytest.raises(KeyboardInterrupt):  # Not TrainingStopped: no wait, no backup.
            fit(model_dir, sender)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert sender.swallowed
    assert latest_backup_step(model_dir) == 2


def test_the_handlers_go_back_when_another_callback_ends_fit(tmp_path):
    from efficientdet_keras.data.pipeline import InputPipeline
    from efficientdet_keras.data.sources import TFRecordSource
    from efficientdet_keras.data.synthetic import write_synthetic_dataset
    from efficientdet_keras.training.trainer import EfficientDetNetTrain
    config = tiny_config(image_size=64, fpn_num_filters=8, fpn_cell_repeats=1,
                         box_class_repeats=1, backbone_blocks_per_stage=1, batch_size=1,
                         max_level=5)
    synthetic = write_synthetic_dataset(str(tmp_path / "data"), num_train=2, num_val=1,
                                        image_size=64, seed=3)
    config.num_classes = len(synthetic.label_map)
    data = InputPipeline(config, TFRecordSource(synthetic.train_tfrecord), is_training=True)()
    model = EfficientDetNetTrain(config)
    model.compile(steps_per_epoch=2)

    class Failing(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            raise RuntimeError("a callback failed")

    backup = StepBackup(str(tmp_path / "backup"), 0)
    with python_default_handlers():
        before = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)]
        with pytest.raises(RuntimeError, match="a callback failed"):
            model.fit(data, epochs=1, steps_per_epoch=2, verbose=0,
                      callbacks=[Failing(), backup, StopOnSignal(backup)])
        assert [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)] == before


def test_outside_the_main_thread_no_handler_is_set_and_a_warning_says_so(caplog):
    signals = StopSignals()
    before = signal.getsignal(signal.SIGTERM)
    with caplog.at_level(logging.WARNING):
        thread = threading.Thread(target=signals.install)
        thread.start()
        thread.join()
    assert signal.getsignal(signal.SIGTERM) == before
    assert "not caught" in caplog.text


STOPPED_LINE = re.compile(r"efficientdet-train: stopped by (SIG\w+) after step (\d+)")


def start_on_its_own_terminal(command):
    """(process, the terminal's master fd): `command` in a process group of its own whose controlling
    terminal is a new pseudo-terminal, as a shell in a terminal window or an SSH connection runs
    it; closing the master is closing the window."""
    import fcntl
    import pty
    import termios
    master, slave = pty.openpty()

    def take_the_terminal():
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    process = subprocess.Popen(command, stdin=slave, stdout=slave, stderr=slave,
                               start_new_session=True, preexec_fn=take_the_terminal,
                               env=dict(os.environ, PYTHONUNBUFFERED="1"))
    os.close(slave)
    return process, master


def read_terminal_until(master, process, pattern, timeout):
    """What the terminal showed until `pattern` appeared (or the process ended, or the time
    ran out)."""
    import select
    shown, deadline = "", time.monotonic() + timeout
    while not pattern.search(shown) and time.monotonic() < deadline:
        if select.select([master], [], [], 0.5)[0]:
            try:
                shown += os.read(master, 1 << 16).decode("utf-8", "replace")
            except OSError:  # EIO: the process closed its end.
                break
        elif process.poll() is not None:
            break
    return shown


def test_a_closed_terminal_stops_the_run_after_its_step_and_the_restart_resumes_there(tmp_path):
    from benchmarks.kill_harness import FINISHED_STEP, RESUMED_STEP, TrainProcess
    from efficientdet_keras.training.preemption import HANGUP_LOG
    from test_resume import KILL_SEED, kill_run_command
    model_dir = str(tmp_path / "run")
    command = kill_run_command(model_dir)
    process, master = start_on_its_own_terminal(command)
    try:
        shown = read_terminal_until(master, process, re.compile(r"Finished step 2\b"), 400)
        assert "Finished step 2" in shown, shown[-3000:]
        time.sleep(random.Random(KILL_SEED).uniform(0.0, 0.3))
    finally:
        os.close(master)  # The window closes: the kernel sends SIGHUP to the process it leads.
    assert process.wait(180) == RESUMABLE_EXIT_STATUS
    with open(os.path.join(model_dir, HANGUP_LOG)) as f:
        after = f.read()
    stops = STOPPED_LINE.findall(after)
    assert len(stops) == 1 and stops[0][0] == "SIGHUP", after[-3000:]
    step = int(stops[0][1])
    # The step it was on finished and was backed up (backups otherwise come every 2 steps),
    # and nothing was lost between the last step the terminal showed and the stop.
    finished = [int(n) for n in FINISHED_STEP.findall(shown + after)]
    assert step == max(finished) >= 2 and latest_backup_step(model_dir) == step
    restart = TrainProcess(command)
    try:
        assert restart.wait_for(RESUMED_STEP, 400), restart.output()
        assert restart.resumed_step() == step
    finally:
        restart.process.kill()
        restart.process.wait(60)


@pytest.mark.slow
class TestSignalsAtRandomMoments:
    """A class of its own: a long test, run apart from its file (scheduling.py)."""

    @pytest.mark.slow
    def test_sigterm_and_ctrl_c_at_random_moments_lose_no_step(self, tmp_path):
        from benchmarks.kill_harness import (RESUMED_STEP, TrainProcess,
                                             kill_during_backup_write, kill_during_coco_evaluation,
                                             read_every_checkpoint)
        from test_resume import KILL_RUN, KILL_SEED, kill_run_command
        rng = random.Random(KILL_SEED)
        model_dir = str(tmp_path / "run")
        command = kill_run_command(model_dir)
        steps_per_epoch = KILL_RUN["steps_per_epoch"]
        total_steps = steps_per_epoch * KILL_RUN["num_epochs"]

        # 1: SIGTERM during the steps of epoch 1.
        first = TrainProcess(command)
        assert first.wait_for(re.compile(r"Finished step 2\b"), 400), first.output()
        time.sleep(rng.uniform(0.0, 0.05))
        first.stop(signal.SIGTERM)
        codes = [first.wait(120)]
        # 2: Ctrl-C a moment into the COCO evaluation after epoch 1.
        second = TrainProcess(command)
        assert kill_during_coco_evaluation(second, 400, rng.uniform(0.05, 0.3), signal.SIGINT), \
            second.output()
        codes.append(second.wait(120))
        # 3: SIGTERM while a backup of a step of epoch 2 is being written.
        third = TrainProcess(command)
        assert kill_during_backup_write(third, model_dir, 400, after_step=steps_per_epoch,
                                        signum=signal.SIGTERM), third.output()
        codes.append(third.wait(120))
        stopped = [first, second, third]
        assert codes == [RESUMABLE_EXIT_STATUS] * 3, [p.output() for p in stopped]

        # 4: two Ctrl-C during the steps: the second ends the process at once, without a backup.
        fourth = TrainProcess(command)
        assert fourth.wait_for(RESUMED_STEP, 400), fourth.output()
        time.sleep(1.0)  # Past the start of fit: its handlers are set.
        fourth.stop(signal.SIGINT)
        # The second once the first has been handled: two signals that arrive while the main
        # thread is inside a TensorFlow call reach Python as one.
        assert fourth.wait_for(re.compile(r"SIGINT received"), 60), fourth.output()
        fourth.stop(signal.SIGINT)
        second_signal = time.monotonic()
        assert fourth.wait(60) == 130, fourth.output()
        assert time.monotonic() - second_signal < 10, fourth.output()
        assert "interrupted; run the same command again" in fourth.output()
        backup_before_last = latest_backup_step(model_dir)
        read_every_checkpoint(os.path.join(model_dir, "backup"))  # Intact.

        # 5: the same command finishes the run.
        last = TrainProcess(command)
        assert last.wait(600) == 0, last.output()

        # Each signalled process said how it stopped, in one line, and lost no step: the
        # next start resumed at the last step it finished.
        for process, name in zip(stopped, ["SIGTERM", "SIGINT", "SIGTERM"]):
            lines = [m for m in map(STOPPED_LINE.search, process.lines) if m]
            assert [(m.group(1), int(m.group(2))) for m in lines] == \
                [(name, process.finished_steps())], process.output()
        done = [process.finished_steps() for process in stopped]
        resumed = [second.resumed_step(), third.resumed_step(), fourth.resumed_step()]
        assert resumed == done, "steps done at each signal %s, resumed at %s" % (done, resumed)
        # The evaluation that was running when the Ctrl-C came finished, and is not redone.
        assert done[1] == steps_per_epoch and "COCO on" in second.output(10**6)
        assert "COCO evaluation after epoch 1" not in third.output(10**6)
        assert last.resumed_step() == backup_before_last
        assert last.finished_steps() == total_steps and latest_backup_step(model_dir) == total_steps
        metrics = open(os.path.join(model_dir, "coco_metrics.json")).read()
        assert '"1"' in metrics and '"2"' in metrics


class TestSigtermToOneWorker:
    """A class of its own: a long test, run apart from its file (scheduling.py)."""

    @pytest.mark.slow
    def test_a_sigterm_to_one_worker_stops_both_at_the_same_step_and_both_resume(self,
                                                                                  tmp_path):
        from benchmarks.kill_harness import FINISHED_STEP
        from test_multi_worker import HPARAMS, start_workers, wait_all
        model_dir = str(tmp_path / "pair")
        run = dict(hparams=HPARAMS + ",steps_per_epoch=6,backup_steps=4", flags=["--mode=train"])
        workers = start_workers(model_dir, **run)
        try:
            # The preemption notice reaches worker 1, not the chief.
            assert workers[1].wait_for(FINISHED_STEP, 900), workers[1].output()
            workers[1].stop(signal.SIGTERM)
            codes = [worker.wait(300) for worker in workers]
        finally:
            for worker in workers:
                worker.kill()
        assert codes == [RESUMABLE_EXIT_STATUS] * 2, [w.output() for w in workers]
        stops = [[(m.group(1), int(m.group(2))) for m in map(STOPPED_LINE.search, w.lines) if m]
                 for w in workers]
        step = workers[1].finished_steps()
        # Both stopped after the same step; the chief, which got no signal, wrote its backup.
        assert [worker.finished_steps() for worker in workers] == [step, step]
        assert stops[1] == [("SIGTERM", step)], workers[1].output()
        assert re.search(r"stopped by a signal to another worker after step %d\b" % step,
                         workers[0].output()), workers[0].output()
        assert 1 <= step < 6 and latest_backup_step(model_dir) == step

        workers = start_workers(model_dir, **run)
        wait_all(workers, 900)
        for worker in workers:  # Both resumed at that step and finished the run.
            assert worker.resumed_step() == step and worker.finished_steps() == 6, worker.output()
        assert latest_backup_step(model_dir) == 6


@pytest.mark.quick
def test_a_second_ctrl_c_ends_a_process_at_once_while_python_waits_on_c_code(tmp_path):
    """The command-line tool's way: the second Ctrl-C is seen by a watcher thread through
    Python's wakeup fd while the main thread sits in a long C call (as in a TensorFlow op),
    during which no Python-level handler runs."""
    script = (
        "import os, signal, sys, time\n"
        "from efficientdet_keras.training.preemption import StopSignals\n"
        "def end():\n"
        "    os.write(2, b'ended by the second Ctrl-C\\n')\n"
        "    os._exit(130)\n"
        "signals = StopSignals(on_second_interrupt=end)\n"
        "signals.install()\n"
        "print('installed', flush=True)\n"
        "while signals.received is None:\n"
        "    time.sleep(0.01)\n"
        "print('first', flush=True)\n"
        "import hashlib\n"  # Minutes of C code that checks no signal (and frees the GIL).
        "hashlib.pbkdf2_hmac('sha256', b'key', b'salt', 10 ** 9)\n"
        "print('not interrupted', flush=True)\n")
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline() == "installed\n"
        process.send_signal(signal.SIGINT)
        assert process.stdout.readline() == "first\n"
        time.sleep(0.5)  # In the C call by now.
        sent = time.monotonic()
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 130
        assert time.monotonic() - sent < 5
        assert process.stderr.read().splitlines()[-1] == "ended by the second Ctrl-C"
        assert process.stdout.read() == ""
    finally:
        process.kill()  # Only if still in its C call.
        process.wait()
