"""Resume to the step: StepBackup, the reseeded input pipeline, and a real training process
killed with SIGKILL at chosen moments."""

import dataclasses
import json
import os
import random
import sys

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from helpers import REPO_ROOT, TinyTrainer, make_records, tiny_config
from efficientdet_keras.data.pipeline import InputPipeline
from efficientdet_keras.data.sources import RecordsSource
from efficientdet_keras.training.background_checkpoint import BackgroundCheckpointWriter
from efficientdet_keras.training.backup import (StepBackup, latest_backup_step,
                                                remove_interrupted_backup_writes)

STEPS_PER_EPOCH, EPOCHS, BACKUP_STEPS = 5, 2, 2


class Interrupted(Exception):
    """Stands for a kill in the in-process tests."""


class Interrupter(keras.callbacks.Callback):
    """Raises Interrupted after the step that reaches `at_step`, or at the end of epoch
    `at_epoch_end`; records where fit started and which epochs ended."""

    def __init__(self, at_step=None, at_epoch_end=None):
        super().__init__()
        self.at_step, self.at_epoch_end = at_step, at_epoch_end
        self.started_at, self.ended_epochs = None, []
        self._epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        if self.started_at is None:
            self.started_at = (self._epoch, batch)

    def on_train_batch_end(self, batch, logs=None):
        if self.at_step is not None and int(self.model.optimizer.iterations) >= self.at_step:
            raise Interrupted()

    def on_epoch_end(self, epoch, logs=None):
        self.ended_epochs.append(epoch)
        if epoch == self.at_epoch_end:
            raise Interrupted()


def fit(model_dir, steps_per_execution, interrupter):
    """A fresh TinyTrainer (a restarted process) fitted with StepBackup in model_dir/backup;
    the interrupter comes first, as a kill comes before the backup of its step."""
    model = TinyTrainer()
    model.compile(optimizer=model.optimizer, steps_per_execution=steps_per_execution)
    data = tf.data.Dataset.from_tensors(([[1.0, 2.0, 3.0]], [[1.0, -1.0]])).repeat()
    callbacks = [interrupter, StepBackup(os.path.join(model_dir, "backup"), BACKUP_STEPS)]
    try:
        model.fit(data, epochs=EPOCHS, steps_per_epoch=STEPS_PER_EPOCH, callbacks=callbacks,
                  verbose=0)
    except Interrupted:
        pass
    return model


@pytest.mark.quick
@pytest.mark.parametrize("steps_per_execution", [1, 2])
def test_an_interrupted_fit_resumes_at_the_step_with_everything_it_had(tmp_path,
                                                                       steps_per_execution):
    reference = fit(str(tmp_path / "whole"), steps_per_execution, Interrupter())
    model_dir = str(tmp_path / "run")
    # Stopped after step 3: the backup of step 2 is the latest.
    fit(model_dir, steps_per_execution, Interrupter(at_step=3))
    assert latest_backup_step(model_dir) == 2
    # Resumed at step 2 (epoch 0, batch 2); stopped in the end-of-epoch callbacks, before
    # the epoch-end backup: the latest backup is step 4, not the epoch's last step.
    second = Interrupter(at_epoch_end=0)
    fit(model_dir, steps_per_execution, second)
    assert second.started_at == (0, 2)
    assert latest_backup_step(model_dir) == 4
    # Resumed at the epoch's last step: epoch 0 ends again (its evaluation and checkpoint
    # are redone, not skipped), then epoch 1.
    third = Interrupter()
    resumed = fit(model_dir, steps_per_execution, third)
    assert third.started_at == (0, 4) and third.ended_epochs == [0, 1]
    assert int(resumed.optimizer.iterations) == STEPS_PER_EPOCH * EPOCHS
    assert latest_backup_step(model_dir) == STEPS_PER_EPOCH * EPOCHS
    # Same weights, EMA, momentum and step as the uninterrupted run, to the bit.
    for got, want in zip(resumed.state(), reference.state()):
        np.testing.assert_array_equal(got, want)
    # A finished run started again trains nothing more.
    again = Interrupter()
    fit(model_dir, steps_per_execution, again)
    assert again.started_at is None and again.ended_epochs == []


def assert_same_checkpoint(path, expected_path):
    """Same object graph keys and values; the save counters may differ."""
    got, want = tf.train.load_checkpoint(path), tf.train.load_checkpoint(expected_path)
    names = want.get_variable_to_shape_map()
    assert got.get_variable_to_shape_map() == names
    for name in names:
        if name != "_CHECKPOINTABLE_OBJECT_GRAPH" and not name.startswith("save_counter"):
            np.testing.assert_array_equal(got.get_tensor(name), want.get_tensor(name), name)


@pytest.mark.quick
def test_a_background_backup_is_the_managers_checkpoint_of_the_state_it_was_given(tmp_path):
    """The writer reads the state in save() and writes it later, eagerly until its traced
    function is ready, then through it: either way what TensorFlow's CheckpointManager writes
    at that moment, though the model changes after, and one checkpoint kept."""
    model = fit(str(tmp_path / "run"), 1, Interrupter())
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model),
                                         str(tmp_path / "in_place"), max_to_keep=1)
    folder = tmp_path / "background"
    writer = BackgroundCheckpointWriter(tf.train.Checkpoint(model=model), str(folder))
    for _ in range(2):
        expected = manager.save()
        written = writer.save()
        for variable in model.variables:  # Before the write is done.
            variable.assign(variable + 1.0)
        writer.wait()
        assert_same_checkpoint(written, expected)
        assert tf.train.latest_checkpoint(str(folder)) == written
        assert sorted(os.listdir(folder)) == ["checkpoint"] + [
            os.path.basename(written) + suffix for suffix in (".data-00000-of-00001", ".index")]
        writer.finish_tracing()


@pytest.mark.quick
def test_disk_full_during_a_backup_is_one_error_naming_the_folder_and_keeps_the_last(
        tmp_path, monkeypatch):
    model_dir = str(tmp_path / "run")
    fit(model_dir, 1, Interrupter(at_step=3))
    assert latest_backup_step(model_dir) == 2

    def full_disk(self, epoch, batch=0):
        raise tf.errors.ResourceExhaustedError(
            None, None, "runs/x/backup/chief/ckpt-2_temp/part-00000-of-00001.data-00000-of-"
            "00001.tempstate1; No space left on device")

    monkeypatch.setattr(keras.callbacks.BackupAndRestore, "_backup", full_disk)
    with pytest.raises(OSError) as error:
        fit(model_dir, 1, Interrupter())
    backup_dir = os.path.join(model_dir, "backup")
    assert str(error.value) == "cannot write %s: No space left on device" % backup_dir
    assert latest_backup_step(model_dir) == 2  # The last good backup is still there.


@pytest.mark.quick
def test_leftovers_of_killed_backup_writes_are_removed(tmp_path):
    folder = tmp_path / "backup" / "chief"
    folder.mkdir(parents=True)
    checkpoint = tf.train.Checkpoint(step=tf.Variable(3))
    manager = tf.train.CheckpointManager(checkpoint, str(folder), max_to_keep=1)
    manager.save()
    manager.save()  # ckpt-2 is the latest, ckpt-1 was deleted by the manager.
    (folder / "ckpt-3_temp").mkdir()
    (folder / "ckpt-3_temp" / "part-00000-of-00001.index").write_bytes(b"x")
    (folder / "ckpt-1.index").write_bytes(b"half")  # Written, but never listed.
    (folder / "checkpoint.tmp0123abcd").write_text("model_checkpoint_path")
    remove_interrupted_backup_writes(str(folder))
    assert sorted(os.listdir(folder)) == ["checkpoint", "ckpt-2.data-00000-of-00001",
                                          "ckpt-2.index"]
    with pytest.raises(ValueError, match="ckpt-2 holds no optimizer step"):
        latest_backup_step(str(tmp_path))


@pytest.mark.quick
def test_a_model_fitted_with_a_backup_fits_again_without_one(tmp_path):
    model = TinyTrainer()
    model.compile(optimizer=model.optimizer)
    data = tf.data.Dataset.from_tensors(([[1.0, 2.0, 3.0]], [[1.0, -1.0]])).repeat()
    model.fit(data, epochs=1, steps_per_epoch=2, verbose=0,
              callbacks=[StepBackup(str(tmp_path / "backup"), BACKUP_STEPS)])
    model.fit(data, epochs=1, steps_per_epoch=2, verbose=0)  # Keras alone failed here.
    assert int(model.optimizer.iterations) == 4


def test_backup_steps_is_checked_and_defaults_to_a_step_count():
    config = tiny_config()
    assert config.backup_steps == 200
    with pytest.raises(ValueError, match="backup_steps must be a non-negative integer"):
        config.override("backup_steps=-5")
    with pytest.raises(ValueError, match="backup_steps must be >= 0"):
        StepBackup("/tmp/unused", -1)


def image_batches(pipeline, count):
    """The first `count` batches: (images, source ids) as NumPy arrays."""
    return [(images.numpy(), labels["source_ids"].numpy())
            for images, labels in pipeline().take(count)]


def test_a_resumed_pipeline_does_not_replay_the_batches_before_its_step(tmp_path):
    config = tiny_config(num_classes=3, jitter_min=0.5, jitter_max=1.5)
    # Six ids of one image: pixels show the augmentation draws, ids show the order.
    image = make_records(str(tmp_path), count=1)[0]
    source = RecordsSource([dataclasses.replace(image, image_id=100 + i) for i in range(6)])
    whole = image_batches(InputPipeline(config, source, True, batch_size=2, seed=4), 4)
    resumed = image_batches(InputPipeline(config, source, True, batch_size=2, seed=4,
                                          start_step=3), 3)
    # The augmentation continues where step 3 of an uninterrupted run would draw...
    np.testing.assert_array_equal(resumed[0][0], whole[3][0])
    assert not np.array_equal(resumed[0][0], whole[0][0])
    # ... and the order is reseeded from the step: not the batches the run began with.
    first_ids = [ids.tolist() for _, ids in whole[:3]]
    resumed_ids = [ids.tolist() for _, ids in resumed]
    assert resumed_ids != first_ids
    assert sorted(sum(resumed_ids, [])) == sorted(sum(first_ids, [])) == list(range(100, 106))


# The kill test: D0 with a small BiFPN and heads at 64 px on the demo's synthetic shapes,
# 2 epochs of 4 steps, a backup every 2 steps, COCO evaluation after each epoch.
TRAIN_TOOL = os.path.join(REPO_ROOT, "tools", "train.py")
KILL_RUN = dict(steps_per_epoch=4, num_epochs=2, backup_steps=2)
# The random moments are drawn from this seed (set EFFICIENTDET_KILL_SEED to vary them).
KILL_SEED = int(os.environ.get("EFFICIENTDET_KILL_SEED", "11"))


def kill_run_command(model_dir):
    hparams = ("image_size=64,fpn_num_filters=16,fpn_cell_repeats=1,box_class_repeats=1,"
               "backbone_blocks_per_stage=1,"
               "batch_size=2,map_freq=1," + ",".join("%s=%d" % kv for kv in KILL_RUN.items()))
    return [sys.executable, TRAIN_TOOL, "--demo", "--demo_images=8", "--model_dir=%s" % model_dir,
            "--hparams=%s" % hparams, "--tf_random_seed=1", "--verbosity=1"]


@pytest.mark.slow
def test_a_sigkilled_run_resumes_at_its_last_backup_and_finishes_like_an_unkilled_one(tmp_path):
    from benchmarks.kill_harness import (TrainProcess, kill_during_backup_write,
                                         kill_during_coco_evaluation, read_every_checkpoint)
    rng = random.Random(KILL_SEED)
    model_dir = str(tmp_path / "run")
    command = kill_run_command(model_dir)
    total_steps = KILL_RUN["steps_per_epoch"] * KILL_RUN["num_epochs"]
    # Kill 1: during the COCO evaluation after epoch 1 (a moment into it).
    first = TrainProcess(command)
    assert kill_during_coco_evaluation(first, 400, rng.uniform(0.1, 1.0)), first.output()
    # Kill 2: the resumed run, while it writes its backup of a step of epoch 2.
    second = TrainProcess(command)
    assert kill_during_backup_write(second, model_dir, 400,
                                    after_step=KILL_RUN["steps_per_epoch"]), second.output()
    # The same command again finishes the run.
    last = TrainProcess(command)
    assert last.wait(600) == 0, last.output()

    done_at_kill = [first.finished_steps(), second.finished_steps()]
    resumed_at = [second.resumed_step(), last.resumed_step()]
    lost = [done - resumed for done, resumed in zip(done_at_kill, resumed_at)]
    message = "steps done at each kill %s, resumed at %s" % (done_at_kill, resumed_at)
    assert all(0 <= n <= KILL_RUN["backup_steps"] for n in lost), message
    assert done_at_kill[0] == KILL_RUN["steps_per_epoch"], message  # Killed after its steps.
    assert last.finished_steps() == total_steps, last.output()
    # The step count of an unkilled run, in the backup a rerun would start from.
    assert latest_backup_step(model_dir) == total_steps
    # Both epochs evaluated once in the history, both checkpoints and the archive in place.
    metrics = json.loads(open(os.path.join(model_dir, "coco_metrics.json")).read())
    assert sorted(metrics, key=int) == ["1", "2"]
    archive = json.loads(open(os.path.join(model_dir, "archive", "archive.json")).read())
    archived = {entry["name"] for entry in archive["checkpoints"]}
    assert archived and archived <= {"ckpt-1", "ckpt-2"}
    # Every checkpoint on disk reads back tensor by tensor; no half-written one is left.
    checkpoints = read_every_checkpoint(model_dir)
    names = {os.path.relpath(prefix, model_dir) for prefix in checkpoints}
    assert {"ckpt-1", "ckpt-2"} | {"archive/" + name for name in archived} <= names
    assert len([n for n in names if n.startswith("backup/")]) == 1, names
    assert not [name for _, dirs, _ in os.walk(model_dir) for name in dirs
                if name.endswith("_temp")]
    # The last start went on in epoch 2 and reported the run as an unkilled one does.
    out = last.output(10**6)
    assert "Resumed from the backup at step %d" % resumed_at[1] in out
    assert "Epoch 1/2" not in out and "Epoch 2/2" in out
    assert "COCO metrics after epoch 2" in out and "Best checkpoint:" in out
    assert "ema_loss" in metrics["2"] and "AP_/circle" in metrics["2"]
    assert "steps_per_epoch: 4" in open(os.path.join(model_dir, "config.yaml")).read()
    # Evaluation images of the resumed epoch's evaluation (ground truth | detections).
    assert [name for name in os.listdir(os.path.join(model_dir, "eval_images", "epoch-2"))
            if name.endswith(".png")]
    assert "val_AP" in out  # COCO results reach the Keras logs.
    assert any(name.startswith("events.out") for _, _, files in os.walk(model_dir)
               for name in files)  # TensorBoard
