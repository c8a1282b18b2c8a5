import csv
import glob
import json
import logging
import os
import shutil
import subprocess
import time

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from helpers import REPO_ROOT, SMALL_NETWORK, python, tiny_config
from efficientdet_keras import EfficientDetNet, save_ckpt
from efficientdet_keras.checkpoint.archive import CheckpointArchive
from efficientdet_keras.checkpoint import variable_name
from efficientdet_keras.data.synthetic import write_synthetic_dataset

EVAL_TOOL = os.path.join(REPO_ROOT, "tools", "eval.py")
TRAIN_TOOL = os.path.join(REPO_ROOT, "tools", "train.py")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A model dir with config.yaml and two checkpoints (ckpt-2 has EMA values), plus data."""
    root = tmp_path_factory.mktemp("eval_tool")
    data = write_synthetic_dataset(str(root / "data"), num_train=1, num_val=6, image_size=96, seed=3)
    config = tiny_config(num_classes=4, num_epochs=2, label_map=data.label_map, **SMALL_NETWORK)
    model_dir = root / "model"
    model_dir.mkdir()
    config.save_yaml(str(model_dir))
    model = EfficientDetNet(config=config)
    model.build_variables()
    save_ckpt(model, str(model_dir / "ckpt-1"))
    ema = {variable_name(v): v.numpy() for v in model.variables}
    ema["class_net/class-predict/bias"] = ema["class_net/class-predict/bias"] + 3.0  # Other scores.
    save_ckpt(model, str(model_dir / "ckpt-2"), ema_values=ema)
    return model_dir, data


def run_tool(*args):
    return subprocess.run([python(), EVAL_TOOL, *args, "--progress=false"],
                          capture_output=True, text=True, timeout=600)


@pytest.mark.quick
def test_single_evaluation_prints_metrics_and_writes_detections(run_dir, tmp_path):
    model_dir, data = run_dir
    results_json = tmp_path / "detections.json"
    result = run_tool("--model_dir=%s" % model_dir, "--val_file_pattern=%s" % data.val_tfrecord,
                      "--val_json_file=%s" % data.val_json, "--nms_max_output_size=7",
                      "--results_json=%s" % results_json, "--batch_size=4", "--write_images=5",
                      "--confusion_score_thresh=0.2")
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    header = [l for l in lines if "ckpt-2" in l and "6 images" in l]
    assert header, result.stdout
    assert [l.split()[0] for l in lines if l.split() and l.split()[0].startswith(("AP", "AR"))] == [
        "AP", "AP50", "AP75", "APs", "APm", "APl", "ARmax1", "ARmax10", "ARmax100", "ARs", "ARm",
        "ARl"]
    assert "per-class AP:" in result.stdout and "triangle" in result.stdout
    assert "EMA weights" in result.stderr
    detections = json.load(open(results_json))
    val_ids = {im["id"] for im in json.load(open(data.val_json))["images"]}
    per_image = {}
    for d in detections:
        per_image[d["image_id"]] = per_image.get(d["image_id"], 0) + 1
    assert set(per_image) <= val_ids and max(per_image.values()) <= 7
    # --write_images=5: the first 5 images (ids 2..6), truth | detections, in eval_images/ckpt-2.
    images_dir = model_dir / "eval_images" / "ckpt-2"
    assert "5 evaluation images written to %s" % images_dir in result.stdout
    assert sorted(os.listdir(images_dir))[:-1] == ["%d.png" % i for i in range(2, 7)]
    [events] = glob.glob(str(images_dir / "events.out.tfevents.*"))
    summaries = [(event.step, value.tag, len(value.tensor.string_val) - 2)
                 for event in tf.compat.v1.train.summary_iterator(events)
                 for value in event.summary.value]
    assert summaries == [(2, "eval_images", 5)]
    assert np.asarray(Image.open(images_dir / "2.png")).shape == (14 + 128, 2 * 128 + 4, 3)
    # The confusion matrix, named after the checkpoint: each box once in its class's row,
    # each detection scoring >= 0.2 once in its class's column (the data has no crowds).
    matrix_dir = model_dir / "confusion_matrix"
    assert ("written to %s and %s" % (matrix_dir / "ckpt-2.csv", matrix_dir / "ckpt-2.png")
            in result.stdout)
    assert "true \\ predicted" in result.stdout  # 4 classes: printed too.
    Image.open(matrix_dir / "ckpt-2.png").verify()
    with open(matrix_dir / "ckpt-2.csv", newline="") as f:
        header, *rows = list(csv.reader(f))
    names = [data.label_map[k] for k in sorted(data.label_map)]
    assert header[1:] == names + ["background"] and [r[0] for r in rows] == header[1:]
    counts = np.array([[int(n) for n in row[1:]] for row in rows])
    truth = json.load(open(data.val_json))["annotations"]
    assert counts[:-1].sum(axis=1).tolist() == [
        sum(a["category_id"] == k for a in truth) for k in sorted(data.label_map)]
    assert counts[:, :-1].sum(axis=0).tolist() == [
        sum(d["category_id"] == k and d["score"] >= 0.2 for d in detections)
        for k in sorted(data.label_map)]


def test_continuous_mode_evaluates_each_checkpoint_once_and_archives(run_dir):
    model_dir, data = run_dir
    result = run_tool("--model_dir=%s" % model_dir, "--val_file_pattern=%s" % data.val_tfrecord,
                      "--continuous", "--archive_keep=1", "--eval_timeout=60", "--write_images=1")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Final epoch 2 evaluated" in result.stdout
    for checkpoint in ("ckpt-1", "ckpt-2"):  # --write_images: a folder per checkpoint.
        images_dir = model_dir / "eval_images" / checkpoint
        assert "1 evaluation image written to %s" % images_dir in result.stdout
        assert (images_dir / "2.png").exists()
    assert [n for n in os.listdir(model_dir / "eval_images" / "ckpt-1")
            if n.endswith(".png")] == ["2.png"]
    for checkpoint in ("ckpt-1", "ckpt-2"):  # A confusion matrix per checkpoint.
        matrix = model_dir / "confusion_matrix" / checkpoint
        assert "written to %s.csv and %s.png" % (matrix, matrix) in result.stdout
    metrics = json.load(open(model_dir / "eval" / "metrics.json"))
    assert sorted(metrics) == ["ckpt-1", "ckpt-2"] and metrics["ckpt-2"]["epoch"] == 2
    assert any(name.startswith("events.out.tfevents") for name in os.listdir(model_dir / "eval"))
    archive = CheckpointArchive(str(model_dir / "archive"), keep=1)
    entries = archive.entries()
    assert len(entries) == 1
    best = max(metrics.values(), key=lambda m: m["AP"])
    assert entries[0]["AP"] == pytest.approx(best["AP"])
    assert os.path.exists(archive.best()["path"] + ".index")
    # Run again: nothing new to evaluate, it stops at once.
    again = run_tool("--model_dir=%s" % model_dir, "--val_file_pattern=%s" % data.val_tfrecord,
                     "--continuous")
    assert again.returncode == 0 and "ckpt-1:" not in again.stdout


def test_bad_flags_are_one_line_errors(tmp_path):
    result = run_tool("--model_dir=%s" % (tmp_path / "missing"), "--val_file_pattern=x")
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("efficientdet-eval: --model_dir")
    result = run_tool("--ckpt=%s" % tmp_path, "--val_file_pattern=%s" % (tmp_path / "none-*"))
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "none-*" in result.stderr.strip().splitlines()[-1]
    result = run_tool("--ckpt=%s" % tmp_path, "--val_file_pattern=x", "--write_images=2")
    assert result.returncode != 0 and result.stderr.strip().splitlines()[-1] == (
        "efficientdet-eval: write_images needs images_dir (or model_dir, for "
        "<model_dir>/eval_images)")
    result = run_tool("--ckpt=%s" % tmp_path, "--val_file_pattern=x",
                      "--confusion_iou_thresh=0")
    assert result.returncode != 0 and result.stderr.strip().splitlines()[-1] == (
        "efficientdet-eval: confusion_iou_thresh must be in (0, 1]")


@pytest.mark.quick
def test_archive_keeps_the_best_and_survives_reloads(tmp_path):
    config = tiny_config(fpn_num_filters=16, fpn_cell_repeats=1, box_class_repeats=1)
    model = EfficientDetNet(config=config)
    model.build_variables()
    archive = CheckpointArchive(str(tmp_path / "archive"), keep=2, monitor="val_AP")
    for epoch, ap in [(1, 0.2), (2, 0.5), (3, 0.1), (4, 0.4)]:
        prefix = save_ckpt(model, str(tmp_path / ("ckpt-%d" % epoch)))
        kept = archive.consider(prefix, epoch, {"val_AP": ap, "val_AP50": ap * 2})
        assert kept == (epoch != 3)
    reloaded = CheckpointArchive(str(tmp_path / "archive"), keep=2, monitor="val_AP")
    assert [e["epoch"] for e in reloaded.entries()] == [2, 4]
    assert sorted(os.listdir(tmp_path / "archive")) == [
        "archive.json", "ckpt-2.data-00000-of-00001", "ckpt-2.index",
        "ckpt-4.data-00000-of-00001", "ckpt-4.index"]
    assert reloaded.best()["metrics"]["val_AP50"] == pytest.approx(1.0)
    with pytest.raises(KeyError, match="val_AP"):
        archive.consider(prefix, 5, {"AP": 1.0})


def copy_run(model_dir, target):
    """config.yaml and the checkpoints of a run, without any evaluation results."""
    target.mkdir()
    for path in glob.glob(str(model_dir / "ckpt-*")) + [str(model_dir / "config.yaml")]:
        shutil.copy(path, target)
    return target


def test_continuous_evaluation_skips_a_checkpoint_the_trainer_deleted(run_dir, tmp_path, caplog):
    from efficientdet_keras import Config
    from efficientdet_keras.data.sources import TFRecordSource
    from efficientdet_keras.evaluation.continuous import (CheckpointEvaluation,
                                                          evaluate_continuously)
    model_dir, data = run_dir
    model_dir = copy_run(model_dir, tmp_path / "run")
    config = Config.from_yaml(str(model_dir / "config.yaml"))
    evaluation = CheckpointEvaluation(config, TFRecordSource(data.val_tfrecord), data.val_json,
                                      batch_size=6, backend="pycocotools", progress=False)
    evaluate_checkpoint = evaluation.run

    def run_after_rotation(prefix):  # The trainer deletes ckpt-1 after it was listed.
        if prefix.endswith("ckpt-1"):
            for path in glob.glob(prefix + ".*"):
                os.remove(path)
        return evaluate_checkpoint(prefix)

    evaluation.run = run_after_rotation
    with caplog.at_level(logging.WARNING):
        best, finished = evaluate_continuously(evaluation, str(model_dir), timeout=30,
                                               poll_seconds=0.1)
    assert finished and best["name"] == "ckpt-2"
    assert any("Skipping" in r.getMessage() and "ckpt-1" in r.getMessage() for r in caplog.records)
    assert sorted(json.load(open(model_dir / "eval" / "metrics.json"))) == ["ckpt-2"]


def test_train_eval_mode_follows_the_runs_config_and_stops_after_its_final_epoch(run_dir,
                                                                                 tmp_path):
    model_dir, data = run_dir
    model_dir = copy_run(model_dir, tmp_path / "run")
    # No --hparams or --num_epochs: the tiny model and num_epochs=2 come from config.yaml.
    args = [python(), TRAIN_TOOL, "--mode=eval", "--model_dir=%s" % model_dir,
            "--val_file_pattern=%s" % data.val_tfrecord, "--val_json_file=%s" % data.val_json,
            "--eval_timeout=120"]
    result = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Final epoch 2 evaluated" in result.stdout
    assert sorted(json.load(open(model_dir / "eval" / "metrics.json"))) == ["ckpt-1", "ckpt-2"]


def unfinished_run(run_dir, tmp_path, checkpoint_age_s):
    """A copy of the run whose config asks for 3 epochs (only 2 checkpoints exist), its
    checkpoints `checkpoint_age_s` old."""
    from efficientdet_keras import Config
    model_dir, data = run_dir
    model_dir = copy_run(model_dir, tmp_path / "run")
    config = Config.from_yaml(str(model_dir / "config.yaml"))
    config.num_epochs = 3
    config.save_yaml(str(model_dir))
    old = time.time() - checkpoint_age_s
    for path in glob.glob(str(model_dir / "ckpt-*")):
        os.utime(path, (old, old))
    return model_dir, data, config


def test_the_evaluator_waits_while_a_trainer_runs_then_stops_on_its_own(run_dir, tmp_path,
                                                                        caplog):
    from efficientdet_keras.data.sources import TFRecordSource
    from efficientdet_keras.evaluation.continuous import (CheckpointEvaluation,
                                                          evaluate_continuously)
    model_dir, data, config = unfinished_run(run_dir, tmp_path, checkpoint_age_s=7200)
    evaluation = CheckpointEvaluation(config, TFRecordSource(data.val_tfrecord), data.val_json,
                                      batch_size=6, backend="pycocotools", progress=False)
    asked = []

    def trainer():  # Alive for its first three polls, then gone.
        asked.append(1)
        return "efficientdet-train, pid 7 on host h" if len(asked) <= 3 else None

    with caplog.at_level(logging.WARNING):
        best, finished = evaluate_continuously(evaluation, str(model_dir), timeout=60,
                                               poll_seconds=0.01, running_trainer=trainer)
    assert not finished and best is not None and len(asked) == 4
    assert "no trainer runs in %s and its newest checkpoint is more than 60 s old" % model_dir \
        in caplog.text


def test_train_eval_mode_stops_by_default_when_the_trainer_is_gone(run_dir, tmp_path):
    model_dir, data, _ = unfinished_run(run_dir, tmp_path, checkpoint_age_s=7200)
    args = [python(), TRAIN_TOOL, "--mode=eval", "--model_dir=%s" % model_dir,
            "--val_file_pattern=%s" % data.val_tfrecord, "--val_json_file=%s" % data.val_json]
    result = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Stopped before the final epoch's checkpoint." in result.stdout
    [line] = [line for line in result.stderr.splitlines() if "Stopping: no trainer" in line]
    assert "newest checkpoint is more than 600 s old" in line
    assert sorted(json.load(open(model_dir / "eval" / "metrics.json"))) == ["ckpt-1", "ckpt-2"]


def test_ids_that_do_not_match_the_json_stop_both_tools_before_any_work(run_dir, tmp_path):
    model_dir, data = run_dir
    groundtruth = json.load(open(data.val_json))
    for image in groundtruth["images"]:  # Another numbering of the same images.
        image["id"] = "val_%s.jpg" % image["id"]
    other_json = tmp_path / "renumbered.json"
    other_json.write_text(json.dumps(groundtruth))
    train_dir = tmp_path / "train_run"
    commands = {
        "efficientdet-eval": [python(), EVAL_TOOL, "--model_dir=%s" % model_dir,
                              "--val_file_pattern=%s" % data.val_tfrecord,
                              "--val_json_file=%s" % other_json],
        "efficientdet-train": [python(), TRAIN_TOOL, "--mode=traineval",
                               "--model_dir=%s" % train_dir,
                               "--train_file_pattern=%s" % data.train_tfrecord,
                               "--val_file_pattern=%s" % data.val_tfrecord,
                               "--val_json_file=%s" % other_json, "--hparams=image_size=64"],
    }
    for tool, args in commands.items():
        result = subprocess.run(args, capture_output=True, text=True, timeout=300)
        assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
        last = result.stderr.strip().splitlines()[-1]
        assert last.startswith(tool + ": 6 of 6 image ids of ") and str(other_json) in last
        first_id = str(groundtruth["images"][0]["id"])
        assert "'val_" in last and repr(first_id) in last, last
    assert not glob.glob(str(train_dir / "ckpt-*")) and not (train_dir / "config.yaml").exists()
