"""The trainer's evaluation callbacks next to the continuous evaluator: one archive,
metrics that survive a resume, and the EMA validation loss."""

import json

import numpy as np
import pytest

from helpers import SMALL_NETWORK, tiny_config
from efficientdet_keras import EfficientDetNet
from efficientdet_keras.checkpoint.archive import CheckpointArchive
from efficientdet_keras.evaluation.continuous import evaluate_continuously
from efficientdet_keras.evaluation.runner import EvaluationTiming
from efficientdet_keras.training.callbacks.checkpoints import CheckpointCallback
from efficientdet_keras.training.callbacks.coco_evaluation import COCOCallback

SMALL = SMALL_NETWORK


class ScoresByEpoch:
    """Stands in for CheckpointEvaluation: a fixed AP per checkpoint epoch."""

    def __init__(self, config, ap_by_epoch):
        self.config, self.ap_by_epoch = config, ap_by_epoch

    def run(self, prefix):
        ap = self.ap_by_epoch[int(prefix.rsplit("-", 1)[1])]
        return prefix, {"AP": ap, "AP50": 2 * ap}, EvaluationTiming()


@pytest.mark.quick
def test_trainer_and_continuous_evaluator_share_one_archive(tmp_path):
    config = tiny_config(num_epochs=3, **SMALL)
    model = EfficientDetNet(config=config)
    model.build_variables()
    trainer = CheckpointCallback(str(tmp_path), archive_keep=3)
    trainer.set_model(model)
    trainer.on_epoch_end(0, {"loss": 3.0, "val_loss": 2.0, "val_AP": 0.2, "val_AP50": 0.4})
    trainer.on_epoch_end(1, {"loss": 2.5, "val_loss": 1.8, "val_AP": 0.45, "val_AP50": 0.6})

    # The continuous evaluator scores the same checkpoints again (other data, say).
    best, finished = evaluate_continuously(ScoresByEpoch(config, {1: 0.3, 2: 0.5}), str(tmp_path),
                                           timeout=0.2, poll_seconds=0.05)
    assert not finished and best["name"] == "ckpt-2" and best["AP"] == pytest.approx(0.5)

    trainer.on_epoch_end(2, {"loss": 2.0, "val_loss": 1.7, "val_AP": 0.4, "val_AP50": 0.7})
    archive = json.loads((tmp_path / "archive" / "archive.json").read_text())
    assert (archive["monitor"], archive["mode"]) == ("AP", "max")
    assert [(e["name"], e["AP"]) for e in archive["checkpoints"]] == [
        ("ckpt-2", 0.5), ("ckpt-3", 0.4), ("ckpt-1", pytest.approx(0.3))]
    # The trainer's entry holds its validation metrics under the evaluator's names.
    assert archive["checkpoints"][1]["metrics"] == {"AP": 0.4, "AP50": 0.7, "loss": 1.7}

    with pytest.raises(ValueError, match="archive.json ranks checkpoints by 'AP'"):
        CheckpointArchive(str(tmp_path / "archive"), monitor="loss", mode="min").entries()


def test_archive_written_by_the_previous_trainer_is_read_in_the_new_names(tmp_path):
    """Version 0.1's trainer ranked by the Keras name val_AP; its archive keeps working."""
    (tmp_path / "archive").mkdir()
    old = {"monitor": "val_AP", "mode": "max", "checkpoints": [
        {"name": "ckpt-4", "epoch": 4, "val_AP": 0.5,
         "metrics": {"loss": 1.0, "val_AP": 0.5, "val_AP50": 0.8}}]}
    (tmp_path / "archive" / "archive.json").write_text(json.dumps(old))
    archive = CheckpointArchive(str(tmp_path / "archive"))
    assert archive.entries() == [{"name": "ckpt-4", "epoch": 4, "AP": 0.5,
                                  "metrics": {"AP": 0.5, "AP50": 0.8}}]
    assert archive.best()["AP"] == 0.5


def test_coco_metrics_json_keeps_the_epochs_before_a_resume(tmp_path):
    (tmp_path / "coco_metrics.json").write_text(json.dumps({"1": {"AP": 0.25}}))
    callback = COCOCallback(tiny_config(), val_dataset=None, model_dir=str(tmp_path))
    callback.evaluate = lambda: {"AP": 0.5}  # The resumed run's evaluation of epoch 2.
    callback.set_params({"epochs": 2})
    callback.on_train_begin()
    logs = {}
    callback.on_epoch_end(1, logs)
    assert logs == {"val_AP": 0.5}
    assert json.loads((tmp_path / "coco_metrics.json").read_text()) == {
        "1": {"AP": 0.25}, "2": {"AP": 0.5}}
    assert sorted(callback.history) == [1, 2]


def test_val_ema_loss_is_the_validation_loss_of_the_ema_weights(tmp_path, capsys):
    from efficientdet_keras.data.pipeline import InputPipeline
    from efficientdet_keras.data.sources import TFRecordSource
    from efficientdet_keras.data.synthetic import write_synthetic_dataset
    from efficientdet_keras.training.trainer import EfficientDetNetTrain

    data = write_synthetic_dataset(str(tmp_path / "data"), num_train=1, num_val=4,
                                   image_size=96, seed=4)
    config = tiny_config(moving_average_decay=0.9, label_map=data.label_map, **SMALL)
    model = EfficientDetNetTrain(config)
    model.compile(steps_per_epoch=1)
    bias = next(v for v in model.variables if "class-predict/bias" in v.name)
    bias.assign_add(np.full(bias.shape, 2.0, np.float32))  # Raw weights move; the EMA does not.
    val_data = InputPipeline(config, TFRecordSource(data.val_tfrecord), is_training=False,
                             batch_size=2)()

    raw_loss = model.evaluate(val_data, return_dict=True, verbose=0)
    with model.ema.swapped_in():
        ema_loss = model.evaluate(val_data, return_dict=True, verbose=0)
    assert abs(raw_loss["loss"] - ema_loss["loss"]) > 0.1  # The two really differ.

    callback = COCOCallback(config, val_data)
    callback.set_model(model)
    callback.set_params({"epochs": 1})
    logs = {}
    capsys.readouterr()
    callback.on_epoch_end(0, logs)
    # The evaluation's progress bar: one final line (stdout is not a terminal).
    progress = capsys.readouterr().out
    assert "4/4 - " in progress and "images/s:" in progress
    for name in ("loss", "det_loss", "cls_loss", "box_loss", "reg_l2_loss"):
        assert logs["val_ema_" + name] == pytest.approx(ema_loss[name], rel=1e-4), name
    assert "val_AP" in logs
    # The raw weights are back after the evaluation.
    assert model.evaluate(val_data, return_dict=True, verbose=0)["loss"] == pytest.approx(
        raw_loss["loss"], rel=1e-5)
