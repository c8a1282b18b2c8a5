"""Multi-worker training: TF_CONFIG, who writes what, input sharding,
tf.data service, and two real `efficientdet-train --strategy=multi-worker` processes on
loopback that train like one process, write only the chief's files, resume after a kill and
recover from a NaN step together."""

import csv
import json
import os
import re
import shutil
import socket
import sys

import numpy as np
import pytest
import tensorflow as tf

from helpers import REPO_ROOT, make_records, tiny_config, write_tfrecord
from efficientdet_keras.data.pipeline import InputPipeline
from efficientdet_keras.data.sources import TFRecordSource
from efficientdet_keras.training.backup import latest_backup_step
from benchmarks.kill_harness import FINISHED_STEP, RESUMED_STEP, TrainProcess
from efficientdet_keras.training.runtime import check_tf_config, get_strategy
from efficientdet_keras.training.workers import is_chief, remove_write_dir, write_dir

TRAIN_TOOL = os.path.join(REPO_ROOT, "tools", "train.py")


@pytest.mark.quick
@pytest.mark.parametrize("tf_config, message", [
    (None, "--strategy=multi-worker needs the TF_CONFIG environment variable"),
    ("{cluster", "TF_CONFIG is not valid JSON"),
    ('{"task": {"type": "worker", "index": 0}}', 'TF_CONFIG needs "cluster"'),
    ('{"cluster": {"worker": []}, "task": {"type": "worker", "index": 0}}',
     'TF_CONFIG needs "cluster"'),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "chief", "index": 0}}',
     'TF_CONFIG "task" must name a job of its cluster \\(worker\\)'),
    ('{"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 2}}',
     "TF_CONFIG task index 2 is not one of the 2 'worker' addresses"),
])
def test_a_missing_or_malformed_tf_config_is_one_error_naming_it(tf_config, message):
    with pytest.raises(ValueError, match=message):
        check_tf_config(tf_config)


@pytest.mark.quick
def test_multi_worker_without_tf_config_fails_before_joining_any_cluster(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(ValueError, match="needs the TF_CONFIG environment variable"):
        get_strategy("multi-worker")
    check_tf_config('{"cluster": {"chief": ["a:1"], "worker": ["b:1"]}, '
                    '"task": {"type": "worker", "index": 0}}')  # A valid one passes.


@pytest.mark.quick
def test_a_single_process_is_the_chief_and_writes_into_model_dir(tmp_path, two_cpu_strategy):
    for strategy in (None, two_cpu_strategy):
        assert is_chief(strategy) and write_dir(str(tmp_path), strategy) == str(tmp_path)
        remove_write_dir(str(tmp_path), strategy)
        assert tmp_path.is_dir()  # The chief's model_dir is never removed.


def first_ids(pipeline, context, count):
    """The source ids of the first `count` images the pipeline gives under `context`."""
    ids = []
    for _, labels in pipeline(context):
        ids += labels["source_ids"].numpy().tolist()
        if len(ids) >= count:
            return ids[:count]


@pytest.mark.quick
def test_workers_read_different_records_of_a_single_file(tmp_path):
    # One file, two workers: the file cannot be split, so each worker keeps every
    # other record (DATA sharding); shuffled, augmented training pipelines.
    write_tfrecord(str(tmp_path / "one.tfrecord"), make_records(str(tmp_path), count=6))
    source = TFRecordSource(str(tmp_path / "one.tfrecord"))
    pipeline = InputPipeline(tiny_config(image_size=64, jitter_min=0.5, jitter_max=1.5), source,
                             is_training=True, batch_size=6, seed=5)
    seen = [first_ids(pipeline, tf.distribute.InputContext(2, worker, 2), 3)
            for worker in range(2)]
    assert len(set(seen[0])) == len(set(seen[1])) == 3, seen
    assert not set(seen[0]) & set(seen[1]) and set(seen[0]) | set(seen[1]) == set(range(100, 106))


def test_the_training_pipeline_runs_under_tf_data_service(tmp_path):
    write_tfrecord(str(tmp_path / "a.tfrecord"), make_records(str(tmp_path), count=4))
    pipeline = InputPipeline(tiny_config(jitter_min=0.5, jitter_max=1.5),
                             TFRecordSource(str(tmp_path / "a.tfrecord")), is_training=True,
                             batch_size=2, seed=3)
    # A local service: a dispatcher and one worker (serving while referenced).
    dispatcher = tf.data.experimental.service.DispatchServer()
    service = (dispatcher, tf.data.experimental.service.WorkerServer(
        tf.data.experimental.service.WorkerConfig(
            dispatcher_address=dispatcher.target.split("://")[1])))
    served = pipeline().apply(tf.data.experimental.service.distribute(
        "parallel_epochs", service[0].target))
    images, labels = next(iter(served))
    # The service's worker decodes and augments: the client's data report counts nothing.
    assert int(pipeline.health.good_records()) == 0
    local_images, local_labels = next(iter(pipeline()))
    np.testing.assert_array_equal(labels["source_ids"], local_labels["source_ids"])
    np.testing.assert_array_equal(images, local_images)  # Same order and augmentation draws.
    assert int(pipeline.health.good_records()) > 0


# One worker of the check below: 20 variables synchronised on read (MEAN), worker w holding
# i + w in variable i, saved in a checkpoint with the batched reduction a backup uses.
ON_READ_WORKER = """
import json, sys
import tensorflow as tf
from efficientdet_keras.training.workers import on_read_variables_reduced_together
strategy = tf.distribute.MultiWorkerMirroredStrategy()
index = strategy.cluster_resolver.task_id
with strategy.scope():
    on_read = [tf.Variable(tf.zeros([3]), synchronization=tf.VariableSynchronization.ON_READ,
                           aggregation=tf.VariableAggregation.MEAN) for _ in range(20)]
    mirrored = tf.Variable(tf.ones([2]))
for i, variable in enumerate(on_read):
    variable.values[0].assign(tf.fill([3], float(i + index)))
with on_read_variables_reduced_together(on_read + [mirrored], strategy):
    tf.train.Checkpoint(v=on_read, m=mirrored).write(sys.argv[1] + "/worker%d" % index)
print(json.dumps([variable.numpy().tolist() for variable in on_read]))
print(json.dumps(any("_get_cross_replica" in vars(v) for v in on_read)))
"""


def test_a_multi_worker_save_reads_the_on_read_variables_means_batched(tmp_path):
    """on_read_variables_reduced_together (each backup, checkpoint and EMA swap under
    multi-worker training): the checkpoint holds the means over the workers, not a worker's
    own values, and the variables read as before once the block ends."""
    addresses = ["127.0.0.1:%d" % port for port in free_ports(2)]
    processes = [TrainProcess([sys.executable, "-c", ON_READ_WORKER, str(tmp_path)], env=dict(
        os.environ, PYTHONPATH=REPO_ROOT, TF_CONFIG=json.dumps(
            {"cluster": {"worker": addresses}, "task": {"type": "worker", "index": index}})))
        for index in range(2)]
    wait_all(processes, 300)
    for index, process in enumerate(processes):
        reader = tf.train.load_checkpoint(str(tmp_path / ("worker%d" % index)))
        for i in range(20):
            np.testing.assert_array_equal(
                reader.get_tensor("v/%d/.ATTRIBUTES/VARIABLE_VALUE" % i), [i + 0.5] * 3)
        np.testing.assert_array_equal(reader.get_tensor("m/.ATTRIBUTES/VARIABLE_VALUE"), [1, 1])
        lines = [line for line in process.lines if line.startswith(("[", "true", "false"))]
        # After the block, a cross-replica read reduces again: still the means.
        assert json.loads(lines[-2]) == [[i + 0.5] * 3 for i in range(20)], process.output()
        assert lines[-1] == "false", process.output()


# The loopback run: D0 with a small BiFPN at 64 px on two synthetic images, 1 epoch of 2
# steps, global batch 2 (one image per worker), a backup after every step, then COCO
# evaluation. No random augmentation or drop-connect, so two workers and one process see
# the same global batches; BatchNorm trains, synchronised across the workers (the default
# sync_batch_norm, set for the one process too, so both use the same variance formula),
# so they make the same updates. SGD, not the demo's Adam: Adam turns the rounding-noise
# gradients of biases before a BatchNorm (truly zero) into whole steps of random sign.
HPARAMS = ("image_size=64,fpn_num_filters=16,fpn_cell_repeats=1,box_class_repeats=1,"
           "backbone_blocks_per_stage=1,"
           "batch_size=2,steps_per_epoch=2,num_epochs=1,backup_steps=1,map_freq=1,"
           "jitter_min=1.0,jitter_max=1.0,input_rand_hflip=false,backbone_survival_prob=1.0,"
           "sync_batch_norm=true,optimizer=sgd")
TOTAL_STEPS = 2


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def train_command(model_dir, strategy="", hparams=HPARAMS, flags=()):
    return [sys.executable, TRAIN_TOOL, "--demo", "--demo_images=2", "--eval_images=1",
            "--model_dir=%s" % model_dir, "--hparams=%s" % hparams, "--tf_random_seed=1",
            "--verbosity=1", "--strategy=%s" % strategy] + list(flags)


def start_workers(model_dir, **command):
    """Two training processes, worker 0 (the chief) and worker 1, on fresh loopback ports."""
    addresses = ["127.0.0.1:%d" % port for port in free_ports(2)]
    return [TrainProcess(train_command(model_dir, "multi-worker", **command), env=dict(
        os.environ, TF_CONFIG=json.dumps({"cluster": {"worker": addresses},
                                          "task": {"type": "worker", "index": index}})))
            for index in range(2)]


def wait_all(processes, timeout):
    for index, process in enumerate(processes):
        code = process.wait(timeout)
        assert code == 0, "process %d exited with %d:\n%s" % (index, code, process.output())


def files_under(folder):
    return sorted(os.path.relpath(os.path.join(root, name), folder)
                  for root, _, names in os.walk(folder) for name in names)


def read_checkpoint(prefix):
    reader = tf.train.load_checkpoint(prefix)
    return {key: reader.get_tensor(key) for key in reader.get_variable_to_shape_map()}


@pytest.mark.slow  # Two processes: make test runs it in its slow shard's turn (scheduling.py).
class TestTwoWorkersTraining:
    """A class of its own: a long test, run apart from its file (scheduling.py)."""

    def test_two_loopback_workers_train_like_one_process_write_only_the_chiefs_files_and_resume(
            self, tmp_path):
        pair_dir, single_dir = str(tmp_path / "pair"), str(tmp_path / "single")
        single = TrainProcess(train_command(single_dir))
        workers = start_workers(pair_dir)
        # Killed together (SIGKILL) once the chief has backed up step 1.
        backed_up = workers[0].wait_for(re.compile(r"Backed up step 1\b"), 900)
        for worker in workers:
            worker.kill()
        assert backed_up, workers[0].output()
        resume_step = latest_backup_step(pair_dir)
        assert resume_step == 1, workers[0].output()

        workers = start_workers(pair_dir)
        wait_all(workers + [single], 900)
        for worker in workers:  # Both went on from the chief's backup, to the last step.
            assert worker.resumed_step() == resume_step, worker.output()
            assert worker.finished_steps() == TOTAL_STEPS, worker.output()
        assert latest_backup_step(pair_dir) == TOTAL_STEPS

        # The same weights and averages as one process on the same global batches.
        got, want = (read_checkpoint(os.path.join(d, "last")) for d in (pair_dir, single_dir))
        assert sorted(got) == sorted(want)
        assert any(k.endswith("ExponentialMovingAverage") for k in got)
        # atol 3e-6: the all-reduced moving means (~1e-3) differ from one process's by float
        # rounding that depends on thread counts (1.5e-6 seen); unsynchronised BatchNorm or a
        # lost step differs by orders of magnitude more.
        for key in want:
            np.testing.assert_allclose(got[key], want[key], rtol=1e-4, atol=3e-6, err_msg=key)
        # The logged training values are counted once, not added up over the two workers: the
        # learning rate of the last step exactly; the epoch's mean loss only roughly, since the
        # pair's mean covers the step after its resume alone (added up, it would be twice).
        logged = [list(csv.DictReader(open(os.path.join(d, "results.csv"))))[-1]
                  for d in (pair_dir, single_dir)]
        np.testing.assert_allclose(float(logged[0]["learning_rate"]),
                                   float(logged[1]["learning_rate"]), rtol=1e-6)
        for name in ("loss", "det_loss"):
            assert 0.9 < float(logged[0][name]) / float(logged[1][name]) < 1.1, (name, logged)
        # The chief's evaluation equals the single process's.
        metrics = [json.load(open(os.path.join(d, "coco_metrics.json")))["1"]
                   for d in (pair_dir, single_dir)]
        assert sorted(metrics[0]) == sorted(metrics[1])
        np.testing.assert_allclose([metrics[0][k] for k in sorted(metrics[1])],
                                   [metrics[1][k] for k in sorted(metrics[1])],
                                   rtol=1e-3, atol=1e-5)

        # Only the chief's files: the one-process layout, one TensorBoard file per chief start,
        # and nothing left of worker 1's temporary folders (its own, and Keras' in backup/).
        pair_files, single_files = files_under(pair_dir), files_under(single_dir)
        assert not [f for f in pair_files if "workertemp" in f], pair_files
        assert not [d for _, dirs, _ in os.walk(pair_dir) for d in dirs if "workertemp" in d]
        assert {f.split(os.sep)[0] for f in pair_files} == \
            {f.split(os.sep)[0] for f in single_files}
        for name in ("config.yaml", "results.csv", "ckpt-1.index", "best.index",
                     "backup/chief/checkpoint"):
            assert name in pair_files, pair_files
        assert [f for f in pair_files
                if f.startswith("eval_images/epoch-1/") and f.endswith(".png")]
        assert len([f for f in pair_files if f.startswith("train/events.out")]) == 2, pair_files
        assert RESUMED_STEP.search(workers[0].output(10**6))


# NaN recovery from a real divergence. The pair trains epoch 1 (steps 1-2, backed up at its
# end) as above, then is started again for epoch 2 at a learning rate of 1e30 (3.2e31 per 64
# images; later keys win) with backups at epoch ends only. Step 3 (its loss finite) applies
# an update of that size; step 4's losses are NaN and its L2 term inf, so each worker must
# skip it, roll back to the backup of step 2 and redo epoch 2 at 1e-32 x 1e30 = 0.01, as one
# process does.
DIVERGING = HPARAMS + (",num_epochs=2,backup_steps=0,learning_rate=3.2e31,"
                       "lr_decay_method=constant,lr_warmup_epoch=0,nan_recovery_attempts=1,"
                       "nan_recovery_lr_factor=1e-32")
LR_FACTOR = np.float32(1e-32)
NON_FINITE_STEP_4 = re.compile(r"non-finite loss at step 4 \(epoch 2\): loss=(nan|inf)\b.*"
                               r"the weights are those after step 3\b")
RECOVERY = re.compile(r"NaN recovery 1 of 1: rolled back to the backup at step 2 \(epoch 1\); "
                      r"the learning rate is now 1e-32 x the schedule")
EPOCH_LOGS = re.compile(r"^2/2 - .* - loss: ")


def lines_matching(process, pattern):
    return [i for i, line in enumerate(process.lines) if pattern.search(line)]


def assert_recovered_once(process):
    """Step 3 done, step 4 reported non-finite, the rollback to step 2 at the scaled rate,
    then steps 3 and 4 again; returns the values logged at the end of epoch 2."""
    output = process.output(10 ** 6)
    bad, recovery = lines_matching(process, NON_FINITE_STEP_4), lines_matching(process, RECOVERY)
    assert len(bad) == 1 and len(recovery) == 1 and bad[0] < recovery[0], output
    assert [int(m.group(1)) for m in map(RESUMED_STEP.search, process.lines) if m] == [2, 2], output
    finished = [(i, int(m.group(1)))
                for i, m in enumerate(map(FINISHED_STEP.search, process.lines)) if m]
    assert [step for _, step in finished] == [3, 3, 4], output
    assert finished[0][0] < bad[0] and recovery[0] < finished[1][0], output
    epoch_logs = [process.lines[i] for i in lines_matching(process, EPOCH_LOGS)]
    assert epoch_logs, output
    values = {name: float(value) for name, value in
              re.findall(r"(\w+): ([-+.\w]+)", epoch_logs[-1].split(" - ", 2)[2])}
    assert values["nonfinite_steps"] == 0 and np.all(np.isfinite(list(values.values()))), values
    return values


@pytest.mark.slow  # make test keeps one process's recovery in test_nan_guard.
class TestTwoWorkersNanRecovery:
    """A class of its own: a long test, run apart from its file (scheduling.py)."""

    def test_two_loopback_workers_recover_from_a_nan_step_together(self, tmp_path):
        pair_dir, single_dir = str(tmp_path / "pair"), str(tmp_path / "single")
        processes = []
        try:
            processes = start_workers(pair_dir, flags=["--mode=train"])
            wait_all(processes, 900)
            assert latest_backup_step(pair_dir) == 2
            shutil.copytree(pair_dir, single_dir)  # One process from the very same backup.

            diverging = dict(hparams=DIVERGING, flags=["--mode=train", "--overwrite_config"])
            processes = start_workers(pair_dir, **diverging)
            processes.append(TrainProcess(train_command(single_dir, **diverging)))
            wait_all(processes, 900)
        finally:  # A hang fails the wait; no process outlives the test.
            for process in processes:
                process.kill()
        logged = [assert_recovered_once(process) for process in processes]
        # The workers logged the same epoch.
        assert logged[0] == logged[1], logged

        # The chief's backup: step 4, after one recovery, at the scaled rate.
        assert latest_backup_step(pair_dir) == 4
        backup = read_checkpoint(tf.train.latest_checkpoint(
            os.path.join(pair_dir, "backup", "chief")))
        assert backup["model/nan_recovery/lr_scale/.ATTRIBUTES/VARIABLE_VALUE"] == LR_FACTOR
        assert backup["model/nan_recovery/recoveries/.ATTRIBUTES/VARIABLE_VALUE"] == 1
        # Its final checkpoint is finite, and epoch 2 moved the weights at 0.01, not at 1e30.
        got, epoch_1 = (read_checkpoint(os.path.join(pair_dir, name))
                        for name in ("last", "ckpt-1"))
        assert not [k for k, v in got.items() if v.dtype.kind == "f" and not np.all(np.isfinite(v))]
        want = read_checkpoint(os.path.join(single_dir, "last"))
        assert sorted(got) == sorted(want)
        trained = [k for k in got
                   if not k.endswith("ExponentialMovingAverage") and "/moving_" not in k]
        got_update, want_update = (np.concatenate([(c[k] - epoch_1[k]).ravel() for k in trained])
                                   for c in (got, want))
        assert 0 < np.max(np.abs(got_update)) < 1, np.max(np.abs(got_update))
        # Where one process that recovered from the same backup ends. At 0.01 from this backup
        # the pair and one process differ by 0.2% of the update with or without a NaN step
        # (float rounding: seen training both at 0.01 directly); a lost or an extra step changes
        # the update by more than half.
        gap = np.linalg.norm(got_update - want_update) / np.linalg.norm(want_update)
        assert gap < 0.01, gap
