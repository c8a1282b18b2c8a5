"""One trainer per model_dir: the lock file, its holders, stale locks and the CLI wiring."""

import datetime
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from helpers import REPO_ROOT
from efficientdet_keras.utils.run_lock import (LOCK_FILE_NAME, STALE_SECONDS, RunDirectoryInUse,
                                               RunLock)

pytestmark = pytest.mark.quick  # All of this file is in the inner-loop set.

TRAIN_TOOL = os.path.join(REPO_ROOT, "tools", "train.py")
# Takes the lock of argv[1] as argv[2], says so, then holds it until killed.
HOLDER = """
import sys, time
from efficientdet_keras.utils.run_lock import RunDirectoryInUse, RunLock
if len(sys.argv) > 3:  # A start time: several holders race for the lock.
    time.sleep(max(0.0, float(sys.argv[3]) - time.time()))
try:
    RunLock(sys.argv[1], what=sys.argv[2]).__enter__()
except RunDirectoryInUse:
    print("refused", flush=True)
    sys.exit(0)
print("took", flush=True)
time.sleep(120)
"""


def start_holder(model_dir, what="holder", start_at=None):
    args = [sys.executable, "-c", HOLDER, str(model_dir), what]
    args += [] if start_at is None else ["%f" % start_at]
    return subprocess.Popen(args, stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT)


def stop(process):
    process.kill()
    process.wait()
    process.stdout.close()


def dead_pid():
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def write_lock(model_dir, age=0.0, **fields):
    """A lock file of someone else, last touched `age` seconds ago."""
    path = os.path.join(str(model_dir), LOCK_FILE_NAME)
    info = dict({"host": socket.gethostname(), "pid": dead_pid(),
                 "started": "2024-05-01T10:00:00+00:00", "tool": "efficientdet-train",
                 "command": ["efficientdet-train"], "process": "0" * 32}, **fields)
    with open(path, "w") as f:
        json.dump(info, f)
    os.utime(path, (time.time() - age,) * 2)
    return path


def read_lock(model_dir):
    with open(os.path.join(str(model_dir), LOCK_FILE_NAME)) as f:
        return json.load(f)


def test_the_lock_file_names_this_process_and_is_removed_at_the_end(tmp_path):
    model_dir = tmp_path / "run"  # Created on entry.
    with RunLock(str(model_dir), what="my-tool") as lock:
        info = read_lock(model_dir)
        assert lock.taken and lock.path == str(model_dir / "train.lock")
        assert os.listdir(model_dir) == ["train.lock"]
    assert sorted(info) == ["command", "host", "pid", "process", "started", "tool"]
    assert (info["host"], info["pid"], info["tool"]) == (socket.gethostname(), os.getpid(),
                                                         "my-tool")
    assert info["command"] == sys.argv
    started = datetime.datetime.fromisoformat(info["started"])
    assert abs(started.timestamp() - time.time()) < 60 and started.tzinfo is not None
    assert os.listdir(model_dir) == []


def test_a_second_starter_is_refused_while_another_process_holds_the_lock(tmp_path):
    holder = start_holder(tmp_path, what="efficientdet-train")
    try:
        assert holder.stdout.readline().strip() == "took"
        with pytest.raises(RunDirectoryInUse) as error:
            with RunLock(str(tmp_path)):
                pytest.fail("entered a held lock")
        started = read_lock(tmp_path)["started"]
    finally:
        stop(holder)
    path = tmp_path / "train.lock"
    assert isinstance(error.value, ValueError)
    assert str(error.value) == (
        "%s is in use by efficientdet-train, pid %d on host %s, running since %s (lock file "
        "%s): stop that run first, or delete %s if it is no longer running"
        % (tmp_path, holder.pid, socket.gethostname(), started, path, path))


def test_a_lock_of_a_dead_process_of_this_host_is_taken_over_with_a_warning(tmp_path, caplog):
    path = write_lock(tmp_path)
    dead = read_lock(tmp_path)["pid"]
    with caplog.at_level(logging.WARNING):
        with RunLock(str(tmp_path)):
            assert read_lock(tmp_path)["pid"] == os.getpid()
    assert ("Took over the lock file %s of efficientdet-train, pid %d on host %s, running since "
            "2024-05-01T10:00:00+00:00: that process no longer runs"
            % (path, dead, socket.gethostname())) in caplog.text
    assert os.listdir(tmp_path) == []


def test_a_lock_left_by_an_earlier_process_with_this_pid_is_taken_over(tmp_path, caplog):
    """A restarted container: same host name, same pid, another process."""
    write_lock(tmp_path, pid=os.getpid())
    with caplog.at_level(logging.WARNING):
        with RunLock(str(tmp_path)) as lock:
            assert lock.taken
    assert "that pid is this process's now, started after it" in caplog.text


def test_a_lock_of_another_host_counts_while_it_is_refreshed(tmp_path, caplog):
    path = write_lock(tmp_path, age=STALE_SECONDS - 60, host="node-7.cluster", pid=os.getpid())
    with pytest.raises(RunDirectoryInUse, match=r"in use by efficientdet-train, pid %d on host "
                       r"node-7\.cluster, running since \S+, lock refreshed \d+ s ago \(lock file"
                       % os.getpid()):
        RunLock(str(tmp_path)).__enter__()
    old = time.time() - STALE_SECONDS - 60
    os.utime(path, (old, old))
    with caplog.at_level(logging.WARNING):
        with RunLock(str(tmp_path)):
            assert read_lock(tmp_path)["host"] == socket.gethostname()
    assert re.search(r"Took over the lock file .* pid %d on host node-7\.cluster, .*: its lock "
                     r"file was last refreshed \d+ s ago \(more than %d s\)"
                     % (os.getpid(), STALE_SECONDS), caplog.text)


def test_an_unreadable_lock_file_counts_until_it_is_stale(tmp_path):
    """A starter that has created the file but not yet written it; later, a broken file."""
    path = tmp_path / "train.lock"
    path.write_text("")
    with pytest.raises(RunDirectoryInUse, match="lock file %s is being written or unreadable"
                       % path):
        RunLock(str(tmp_path)).__enter__()
    with RunLock(str(tmp_path), stale_seconds=-1) as lock:
        assert lock.taken


def test_the_holding_process_reenters_without_taking_or_removing(tmp_path):
    with RunLock(str(tmp_path), what="efficientdet-train") as outer:
        with RunLock(str(tmp_path), what="TrainingRun.fit") as inner:
            assert not inner.taken and read_lock(tmp_path)["tool"] == "efficientdet-train"
        assert outer.taken and os.path.exists(outer.path)
    assert not os.path.exists(outer.path)


def test_a_lock_file_that_names_someone_else_at_the_end_is_left(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        with RunLock(str(tmp_path)) as lock:
            write_lock(tmp_path, host="node-7")  # Taken over while this run went on.
    assert read_lock(tmp_path)["host"] == "node-7"
    assert "The lock file %s no longer names this process" % lock.path in caplog.text


def test_the_lock_file_is_refreshed_until_the_end(tmp_path, caplog):
    with RunLock(str(tmp_path), refresh_seconds=0.02) as lock:
        os.utime(lock.path, (0, 0))
        deadline = time.time() + 30
        while os.stat(lock.path).st_mtime < time.time() - 60 and time.time() < deadline:
            time.sleep(0.02)
        assert os.stat(lock.path).st_mtime > time.time() - 60
        refresher = lock._refresher
    assert not refresher.is_alive()
    # The folder vanishes under a run: one warning, no exception from the thread.
    with caplog.at_level(logging.WARNING):
        with RunLock(str(tmp_path / "gone"), refresh_seconds=0.02) as lock:
            os.remove(lock.path)
            lock._refresher.join(30)
    assert caplog.text.count("Stopped refreshing the lock file %s: No such file" % lock.path) == 1


def test_of_starters_racing_for_a_stale_lock_exactly_one_takes_it(tmp_path):
    write_lock(tmp_path)
    start_at = time.time() + 2  # All of them imported and waiting by then.
    racers = [start_holder(tmp_path, "racer", start_at) for _ in range(4)]
    try:
        answers = sorted(racer.stdout.readline().strip() for racer in racers)
    finally:
        for racer in racers:
            stop(racer)
    assert answers == ["refused", "refused", "refused", "took"]
    assert not [name for name in os.listdir(tmp_path) if name != "train.lock"]


def test_a_second_train_command_on_a_model_dir_in_use_stops_at_once(tmp_path):
    """A real trainer holds the lock (stopped with SIGSTOP once it has it, so that the
    folder stands still); the second command exits with one line and writes nothing."""
    model_dir = tmp_path / "run"
    command = [sys.executable, TRAIN_TOOL, "--demo", "--demo_images=2",
               "--model_dir=%s" % model_dir, "--mode=train",
               "--hparams=image_size=64,fpn_num_filters=16,fpn_cell_repeats=1,"
               "box_class_repeats=1,batch_size=2,steps_per_epoch=1,num_epochs=1000"]
    first = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 300
        while time.time() < deadline and first.poll() is None:
            try:
                if read_lock(model_dir)["pid"] == first.pid:
                    break
            except (OSError, ValueError):  # Not there yet, or being written.
                pass
            time.sleep(0.1)
        first.send_signal(signal.SIGSTOP)
        assert first.poll() is None, "the first trainer ended (status %s)" % first.returncode
        before = folder_state(model_dir)
        second = subprocess.run(command, capture_output=True, text=True, timeout=120)
        after = folder_state(model_dir)
    finally:
        first.kill()
        first.wait()
    assert second.returncode == 1, second.stderr[-2000:]
    assert second.stderr.strip().splitlines() == [
        "efficientdet-train: %s is in use by efficientdet-train, pid %d on host %s, running "
        "since %s (lock file %s): stop that run first, or delete %s if it is no longer running"
        % (model_dir, first.pid, socket.gethostname(), before["train.lock"][2]["started"],
           model_dir / "train.lock", model_dir / "train.lock")]
    assert after == before


def folder_state(folder):
    """{relative path: (size, mtime, lock contents)} of every file under `folder`."""
    state = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            stat = os.stat(path)
            lock = read_lock(folder) if name == LOCK_FILE_NAME else None
            state[os.path.relpath(path, folder)] = (stat.st_size, stat.st_mtime_ns, lock)
    return state
