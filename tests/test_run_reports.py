"""Run reports: results.csv and its plots, precision-recall curves, the confusion matrix
and the per-class AP table at each evaluation, and the best/last checkpoints of a run
directory."""

import copy
import csv
import json
import logging
import os
import sys
import types

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from helpers import SMALL_NETWORK, absl_info_messages, tiny_config
from efficientdet_keras.checkpoint import resolve_checkpoint_path, variable_name
from efficientdet_keras.evaluation.coco_evaluator import COCOEvaluator
from efficientdet_keras.detection.postprocess import CocoRows
from efficientdet_keras.utils import figures
from efficientdet_keras.reports.pr_curves import plot_precision_recall, precision_recall_curves
from efficientdet_keras.reports.results_csv import read_results
from efficientdet_keras.training.callbacks.results import ResultsCallback

SMALL = SMALL_NETWORK
EPOCHS = 2


def read_png(path):
    with Image.open(path) as image:
        assert image.format == "PNG"
        return np.asarray(image.convert("RGB"))


def absl_messages(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "absl"]


# --- precision-recall curves ------------------------------------------------------------------

def scored_case():
    """Two images; class 1 found perfectly; class 2: of its 2 boxes one found, after a false
    positive that scores higher. Returns (evaluator, ground truth dict, COCO results)."""
    evaluator = COCOEvaluator(label_map={1: "circle", 2: "square"}, backend="pycocotools")
    boxes = np.array([[[10, 10, 50, 50], [60, 60, 90, 100]],
                      [[20, 30, 70, 80], [0, 0, 0, 0]]], np.float64)  # ymin, xmin, ymax, xmax
    classes = np.array([[1, 2], [2, 0]])
    evaluator.add_groundtruth([1, 2], boxes, classes)
    rows = np.array([[10, 10, 40, 40, 0.7, 1],      # x, y, w, h, score, class: circle, exact
                     [60, 60, 40, 30, 0.8, 2],      # square of image 1, exact
                     [5, 5, 20, 20, 0.9, 2]])       # a square where there is none
    evaluator.add_detections([1, 2], CocoRows(np.array([1, 1, 2], np.int64), rows))
    return evaluator


@pytest.mark.quick
def test_pr_curves_are_pycocotools_precision_at_iou_half(tmp_path):
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval
    evaluator = scored_case()
    metrics = evaluator.result()
    curves = precision_recall_curves(evaluator.last_precision)

    # The reference: pycocotools run directly on the same ground truth and detections.
    gt = COCO()
    gt.dataset = copy.deepcopy(evaluator.groundtruth_dataset())
    gt.createIndex()
    reference = COCOeval(gt, gt.loadRes(evaluator.detection_results()), "bbox")
    reference.evaluate()
    reference.accumulate()
    assert [(c.name, c.category_id) for c in curves] == [("circle", 1), ("square", 2)]
    for k, curve in enumerate(curves):
        np.testing.assert_array_equal(curve.precision, reference.eval["precision"][0, :, k, 0, -1])
        np.testing.assert_array_equal(curve.recall, reference.params.recThrs)
    # By hand: the circle is perfect; the square reaches recall 0.5 at precision 0.5.
    np.testing.assert_allclose(curves[0].precision, np.ones(101))
    recall = curves[1].recall
    np.testing.assert_allclose(curves[1].precision, np.where(recall <= 0.5, 0.5, 0.0))
    assert curves[1].ap == pytest.approx(0.5 * 51 / 101)
    assert np.mean([c.ap for c in curves]) == pytest.approx(metrics["AP50"])

    path = plot_precision_recall(curves, str(tmp_path / "pr.png"), "epoch 1")
    assert read_png(path).shape[:2] == (360, 500)
    with pytest.raises(ValueError, match="IoU threshold 0.3 is not one of"):
        precision_recall_curves(evaluator.last_precision, iou_threshold=0.3)


# --- results.csv ------------------------------------------------------------------------------

def train_logs(loss, learning_rate, ap=None):
    logs = {"loss": loss, "cls_loss": loss / 2, "box_loss": loss / 4,
            "learning_rate": np.float32(learning_rate), "gradient_norm": 3.0}
    if ap is not None:
        logs.update({"val_AP": ap, "val_AP50": 2 * ap, "val_ema_loss": loss + 1,
                     "val_AP_/circle": ap})
    return logs


def run_epochs(model_dir, epochs_and_logs, plots=True):
    callback = ResultsCallback(model_dir, plots=plots)
    callback.on_train_begin()
    for epoch, logs in epochs_and_logs:
        callback.on_epoch_begin(epoch)
        callback.on_epoch_end(epoch, logs)
    return read_results(os.path.join(model_dir, "results.csv"))


@pytest.mark.quick
def test_results_csv_rows_columns_and_resume(tmp_path):
    model_dir = str(tmp_path)
    columns, rows = run_epochs(model_dir, [(0, train_logs(4.0, 0.01)),
                                          (1, train_logs(3.0, 0.02, ap=0.25)),
                                          (2, train_logs(2.0, 0.03))], plots=False)
    assert columns == ["epoch", "epoch_seconds", "elapsed_seconds", "learning_rate", "loss",
                       "cls_loss", "box_loss", "gradient_norm", "val_AP", "val_AP50",
                       "val_ema_loss"]  # Per-class AP stays in coco_metrics.json.
    assert [r["epoch"] for r in rows] == ["1", "2", "3"]
    assert [float(r["learning_rate"]) for r in rows] == pytest.approx([0.01, 0.02, 0.03])
    assert [r["val_AP"] for r in rows] == ["", "0.25", ""]  # Empty: not evaluated.
    elapsed = [float(r["elapsed_seconds"]) for r in rows]
    assert elapsed == pytest.approx(np.cumsum([float(r["epoch_seconds"]) for r in rows]),
                                    abs=0.2)
    with open(os.path.join(model_dir, "results.csv")) as f:
        assert f.readline().startswith("epoch,epoch_seconds,elapsed_seconds,learning_rate,")

    # A resumed run redoes epoch 2 (0-based 1) with a new column: rows 1 kept, 2 replaced,
    # 3 (of the interrupted timeline) dropped until redone.
    logs = dict(train_logs(2.5, 0.025, ap=0.5), iou_loss=0.1)
    columns, rows = run_epochs(model_dir, [(1, logs)])
    assert [r["epoch"] for r in rows] == ["1", "2"]
    assert rows[0]["loss"] == "4" and rows[1]["loss"] == "2.5" and rows[1]["val_AP"] == "0.5"
    assert columns[-1] == "iou_loss" and rows[0]["iou_loss"] == ""

    for name in ("losses", "ap", "learning_rate"):
        assert read_png(os.path.join(model_dir, "plots", name + ".png")).size


def test_without_matplotlib_plots_are_skipped_with_one_note(tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # "import matplotlib" fails.
    monkeypatch.setattr(figures, "_MISSING_NOTE_LOGGED", [])
    with caplog.at_level(logging.INFO, logger="absl"):
        _, rows = run_epochs(str(tmp_path), [(0, train_logs(4.0, 0.01, ap=0.1)),
                                             (1, train_logs(3.0, 0.01, ap=0.2))])
    assert len(rows) == 2
    assert not os.path.exists(tmp_path / "plots")
    notes = [m for m in absl_messages(caplog) if "matplotlib is not installed" in m]
    assert len(notes) == 1, absl_messages(caplog)
    evaluator = scored_case()
    evaluator.result()
    assert plot_precision_recall(precision_recall_curves(evaluator.last_precision),
                                 str(tmp_path / "pr.png"), "epoch 1") is None


def test_results_csv_without_epoch_column_is_named(tmp_path):
    (tmp_path / "results.csv").write_text("step,loss\n1,2.0\n")
    with pytest.raises(ValueError, match="results.csv has no 'epoch' column"):
        read_results(str(tmp_path / "results.csv"))


# --- a real fit with get_callbacks -----------------------------------------------------------

@pytest.fixture(scope="module")
def fitted_run(tmp_path_factory):
    """A small model fitted for 2 epochs of 1 eager step with get_callbacks, COCO evaluated
    after each. Returns model, config, model_dir, history (History.history) and messages
    (the absl log)."""
    from efficientdet_keras.data.pipeline import InputPipeline
    from efficientdet_keras.data.sources import TFRecordSource
    from efficientdet_keras.data.synthetic import write_synthetic_dataset
    from efficientdet_keras.training.callbacks import get_callbacks
    from efficientdet_keras.training.trainer import EfficientDetNetTrain
    root = tmp_path_factory.mktemp("reports")
    data = write_synthetic_dataset(str(root / "data"), num_train=2, num_val=2, image_size=64,
                                   seed=3)
    config = tiny_config(image_size=64, batch_size=2, map_freq=1, moving_average_decay=0.9,
                         label_map=data.label_map, **SMALL)
    model = EfficientDetNetTrain(config)
    model.compile(steps_per_epoch=1, run_eagerly=True)
    train = InputPipeline(config, TFRecordSource(data.train_tfrecord), is_training=True, seed=0)
    val = InputPipeline(config, TFRecordSource(data.val_tfrecord), is_training=False,
                        batch_size=2)()
    model_dir = str(root / "run")
    with absl_info_messages() as messages:
        history = model.fit(train(), epochs=EPOCHS, steps_per_epoch=1, verbose=0,
                            callbacks=get_callbacks(config, model_dir, val, display_images=0))
    return types.SimpleNamespace(model=model, config=config, model_dir=model_dir,
                                 history=history.history, messages=messages, data=data)


def test_fit_writes_results_csv_from_its_logs(fitted_run):
    from efficientdet_keras.training.optimizers import learning_rate_schedule
    model_dir, history = fitted_run.model_dir, fitted_run.history
    columns, rows = read_results(os.path.join(model_dir, "results.csv"))
    assert [r["epoch"] for r in rows] == ["1", "2"]
    # The schedule's rate of each epoch's last step (one step per epoch: iterations 0, 1),
    # warm-up start then peak.
    schedule = learning_rate_schedule(fitted_run.config, steps_per_epoch=1)
    expected = [float(schedule(iteration)) for iteration in (0, 1)]
    assert expected[0] != pytest.approx(expected[1])
    assert [float(r["learning_rate"]) for r in rows] == pytest.approx(expected, rel=1e-6)
    for name in ("learning_rate", "loss", "cls_loss", "box_loss", "gradient_norm"):
        assert [float(r[name]) for r in rows] == pytest.approx(history[name], rel=1e-5), name
    for name in ("val_AP", "val_AP50", "val_ARmax100", "val_ema_loss"):
        assert [float(r[name]) for r in rows] == pytest.approx(history[name], abs=1e-6), name
    assert sorted(os.listdir(os.path.join(model_dir, "plots"))) == [
        "ap.png", "learning_rate.png", "losses.png"]


def test_fit_logs_the_per_class_table_and_draws_pr_curves_at_each_evaluation(fitted_run):
    model_dir = fitted_run.model_dir
    tables = [m for m in fitted_run.messages if m.startswith("COCO metrics after epoch")]
    assert [t.splitlines()[0] for t in tables] == [
        "COCO metrics after epoch %d (EMA weights):" % e for e in (1, 2)]
    assert "per-class AP:" in tables[0] and "ARmax100" in tables[0]
    assert sorted(os.listdir(os.path.join(model_dir, "pr_curves"))) == [
        "epoch-1.png", "epoch-2.png"]
    read_png(os.path.join(model_dir, "pr_curves", "epoch-2.png"))


def test_fit_writes_a_confusion_matrix_at_each_evaluation(fitted_run):
    model_dir = fitted_run.model_dir
    folder = os.path.join(model_dir, "confusion_matrix")
    assert sorted(os.listdir(folder)) == ["epoch-1.csv", "epoch-1.png", "epoch-2.csv",
                                          "epoch-2.png"]
    read_png(os.path.join(folder, "epoch-2.png"))
    with open(os.path.join(folder, "epoch-2.csv"), newline="") as f:
        header, *rows = list(csv.reader(f))
    names = [fitted_run.data.label_map[k] for k in sorted(fitted_run.data.label_map)]
    assert header == ["true \\ predicted"] + names + ["background"]
    assert [row[0] for row in rows] == names + ["background"]
    # Each class's row holds every box of it once: found, confused or missed.
    with open(fitted_run.data.val_json) as f:
        annotations = json.load(f)["annotations"]
    assert annotations
    categories = {name: k for k, name in fitted_run.data.label_map.items()}
    for row in rows[:-1]:
        assert sum(int(n) for n in row[1:]) == sum(
            1 for a in annotations if a["category_id"] == categories[row[0]]
            and not a.get("iscrowd")), row
    assert int(rows[-1][-1]) == 0
    logged = [m for m in fitted_run.messages if m.startswith("Confusion matrix after epoch")]
    assert len(logged) == 2 and "false positives" in logged[1], logged


def test_fit_leaves_best_and_last_for_the_next_command(fitted_run):
    from efficientdet_keras.checkpoint.archive import CheckpointArchive
    model_dir = fitted_run.model_dir
    best = CheckpointArchive(os.path.join(model_dir, "archive")).best()
    assert os.path.samefile(os.path.join(model_dir, "best.index"), best["path"] + ".index")
    assert os.path.samefile(os.path.join(model_dir, "last.index"),
                            os.path.join(model_dir, "ckpt-%d.index" % EPOCHS))
    assert resolve_checkpoint_path(os.path.join(model_dir, "best")) == os.path.join(
        model_dir, "best")


# --- best and last ----------------------------------------------------------------------------

@pytest.mark.quick
def test_best_and_last_survive_rotation_and_are_not_listed(tmp_path, fitted_run):
    from efficientdet_keras.evaluation.continuous import list_checkpoints
    from efficientdet_keras.training.callbacks.checkpoints import CheckpointCallback
    model = fitted_run.model  # Any built model; this one is at hand.
    bias = next(v for v in model.variables if variable_name(v).endswith("class-predict/bias"))
    callback = CheckpointCallback(str(tmp_path), keep=1, archive_keep=1)
    callback.set_model(model)
    for epoch, ap in enumerate([0.5, 0.2, 0.1]):  # Epoch 1 stays the best.
        bias.assign(np.full(bias.shape, float(epoch + 1), np.float32))
        callback.on_epoch_end(epoch, {"loss": 1.0, "val_AP": ap})

    def bias_in(prefix):
        return tf.train.load_checkpoint(resolve_checkpoint_path(prefix)).get_tensor(
            "class_net/class-predict/bias")[0]

    assert bias_in(str(tmp_path / "best")) == 1.0 and bias_in(str(tmp_path / "last")) == 3.0
    # ckpt-1 and ckpt-2 were rotated away; the links keep their files.
    assert [os.path.basename(p) for p in list_checkpoints(str(tmp_path))] == ["ckpt-3"]
    assert os.path.samefile(tmp_path / "last.index", tmp_path / "ckpt-3.index")
    assert os.path.samefile(tmp_path / "best.data-00000-of-00001",
                            tmp_path / "archive" / "ckpt-1.data-00000-of-00001")
    state = (tmp_path / "checkpoint").read_text()
    assert "best" not in state and "last" not in state
    assert resolve_checkpoint_path(str(tmp_path)).endswith("ckpt-3")
