"""Keras 3 objects (`import keras`) around a trainer that runs on tf_keras: the common
callbacks run as they do in Keras 3's own fit, the rest stop with one line, and a Keras 3
user loads the exported SavedModel as a TFSMLayer."""

import csv
import glob
import os
import re
import subprocess
import sys

import keras as keras3
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from helpers import SMALL_NETWORK, tiny_config
from efficientdet_keras import EfficientDetNet, EfficientDetNetTrain, InputPipeline
from efficientdet_keras.data.sources import TFRecordSource
from efficientdet_keras.data.synthetic import write_synthetic_dataset
from efficientdet_keras.inference.detector import Detector
from efficientdet_keras.exporters.saved_model import export_detector
from efficientdet_keras.training.keras3_objects import Keras3Callback, door_callbacks, is_keras3

# Another framework's callbacks, each around a trained model: make test-all.
pytestmark = pytest.mark.slow

SMALL = dict(SMALL_NETWORK, image_size=64, num_classes=4, batch_size=2, backbone_survival_prob=1.0, jitter_min=1.0,
             jitter_max=1.0)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """One compiled model (its steps traced once for the module) and fixed batches."""
    root = tmp_path_factory.mktemp("keras3")
    data = write_synthetic_dataset(str(root / "data"), num_train=4, num_val=2, image_size=64,
                                   seed=4)
    config = tiny_config(**SMALL)
    model = EfficientDetNetTrain(config)
    model.compile(steps_per_epoch=1)
    train = InputPipeline(config, TFRecordSource(data.train_tfrecord), is_training=True,
                          batch_size=2, seed=0)
    batch = next(iter(train()))
    batches = tf.data.Dataset.from_tensors(batch).repeat()
    return model, batches, config


def fit(setup, callbacks, epochs=3, **kwargs):
    model, batches, _ = setup
    return model.fit(batches, epochs=epochs, steps_per_epoch=1, validation_data=batches,
                     validation_steps=1, callbacks=callbacks, verbose=0, **kwargs)


class Logged(tf_keras.callbacks.Callback):
    """Puts a value of our choosing into each epoch's logs, as COCOCallback puts val_AP."""

    def __init__(self, name, values):
        super().__init__()
        self.name, self.values = name, values

    def on_epoch_end(self, epoch, logs=None):
        logs[self.name] = self.values[epoch]


@pytest.mark.quick
def test_keras3_objects_are_told_apart_from_tf_keras_ones():
    assert is_keras3(keras3.callbacks.EarlyStopping())
    assert is_keras3(keras3.optimizers.Adam())
    assert not is_keras3(tf_keras.callbacks.EarlyStopping())
    assert not is_keras3(tf_keras.optimizers.Adam())
    wrapped = door_callbacks([keras3.callbacks.CSVLogger("x.csv")], "fit")
    assert isinstance(wrapped[0], Keras3Callback)
    # Epoch hooks only: tf_keras calls no batch hook, so no step waits for its logs.
    assert not wrapped[0]._implements_train_batch_hooks()
    batch_hooks = door_callbacks([keras3.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: None)], "fit")[0]
    assert batch_hooks._implements_train_batch_hooks()
    assert not batch_hooks._implements_test_batch_hooks()


def test_early_stopping_stops_and_restores_as_in_keras3(setup):
    model, _, _ = setup
    # No epoch improves the loss by 1e9: Keras 3 stops after `patience` epochs past the first.
    stopper = keras3.callbacks.EarlyStopping(monitor="loss", min_delta=1e9, patience=1,
                                             restore_best_weights=True)
    after_first = {}

    class FirstEpoch(tf_keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 0:
                after_first["weights"] = [v.numpy().copy() for v in model.weights]

    history = fit(setup, [FirstEpoch(), stopper], epochs=6)
    assert len(history.history["loss"]) == 2
    assert stopper.stopped_epoch == 1
    # The best epoch was the first: its weights are back.
    for got, expected in zip(model.weights, after_first["weights"]):
        np.testing.assert_array_equal(got.numpy(), expected)


@pytest.mark.parametrize("make", [
    lambda monitor: keras3.callbacks.EarlyStopping(monitor=monitor, patience=0),
    lambda monitor: tf_keras.callbacks.EarlyStopping(monitor=monitor, patience=0),
], ids=["keras3", "tf_keras"])
def test_early_stopping_on_coco_ap_keeps_the_highest(setup, make):
    """In auto mode both Kerases get AP's direction from the trainer: Keras 3 alone refuses to
    guess, tf_keras alone would keep the lowest AP and stop while AP rises."""
    rising = make("val_AP")
    history = fit(setup, [Logged("val_AP", [0.1, 0.2, 0.3]), rising])
    assert len(history.history["loss"]) == 3
    falling = make("val_AP")
    history = fit(setup, [Logged("val_AP", [0.3, 0.2, 0.1]), falling])
    assert len(history.history["loss"]) == 2
    # The losses stay falling ones; Keras 3 would otherwise raise for any name but "loss".
    by_loss = make("val_det_loss")
    history = fit(setup, [Logged("val_det_loss", [3.0, 2.0, 1.0]), by_loss])
    assert len(history.history["loss"]) == 3


def test_model_checkpoint_keeps_the_best_epochs_weights(setup, tmp_path):
    model, _, config = setup
    path = str(tmp_path / "best.weights.h5")
    saved = {}

    class Snapshot(tf_keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            saved[epoch] = {v.name: v.numpy().copy() for v in model.weights}

    checkpoint = keras3.callbacks.ModelCheckpoint(path, monitor="val_AP", save_best_only=True,
                                                  save_weights_only=True)
    fit(setup, [Logged("val_AP", [0.2, 0.5, 0.3]), Snapshot(), checkpoint])
    assert checkpoint.best == 0.5
    fresh = EfficientDetNetTrain(config)
    fresh.build_variables()
    fresh.load_weights(path)
    loaded = {v.name: v.numpy() for v in fresh.weights}
    assert loaded.keys() <= saved[1].keys()
    for name, value in loaded.items():
        np.testing.assert_array_equal(value, saved[1][name], err_msg=name)


@pytest.mark.parametrize("overrides", [{}, dict(fold_batch_norm=True, separable_conv=False)],
                         ids=["training", "folded"])
def test_every_weight_survives_the_weights_h5_format(overrides, tmp_path):
    """The format Keras 3's ModelCheckpoint(save_weights_only=True) asks for: a fresh model
    gets every weight back, the per-level head layers included."""
    config = tiny_config(**dict(SMALL, **overrides))
    source, fresh = EfficientDetNet(config=config), EfficientDetNet(config=config)
    for model in (source, fresh):
        model.build_variables()
    rng = np.random.default_rng(1)
    for variable in source.weights:
        variable.assign(rng.uniform(0.5, 1.5, variable.shape).astype(np.float32))
    path = str(tmp_path / "all.weights.h5")
    source.save_weights(path)
    fresh.load_weights(path)
    assert len(fresh.weights) == len(source.weights)
    for got, expected in zip(fresh.weights, source.weights):
        np.testing.assert_array_equal(got.numpy(), expected.numpy(), err_msg=got.name)


def test_csv_logger_lambda_and_a_users_subclass_see_every_epoch(setup, tmp_path):
    model, _, _ = setup
    path = str(tmp_path / "log.csv")
    seen = []

    class Mine(keras3.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.batches = 0

        def on_train_begin(self, logs=None):
            self.model_seen = self.model

        def on_train_batch_end(self, batch, logs=None):
            self.batches += 1

        def on_epoch_end(self, epoch, logs=None):
            self.last = dict(logs)

    mine = Mine()
    lam = keras3.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: seen.append(
        (epoch, logs["det_loss"], logs["val_det_loss"])))
    history = fit(setup, [keras3.callbacks.CSVLogger(path), lam, mine])
    with open(path) as f:
        rows = list(csv.DictReader(f))
    assert [int(row["epoch"]) for row in rows] == [0, 1, 2]
    np.testing.assert_allclose([float(row["det_loss"]) for row in rows],
                               history.history["det_loss"], rtol=1e-6)
    assert [epoch for epoch, _, _ in seen] == [0, 1, 2]
    np.testing.assert_allclose([loss for _, loss, _ in seen], history.history["det_loss"])
    assert mine.model_seen is model and mine.batches == 3
    assert isinstance(mine.last["val_loss"], float)


def test_evaluate_and_predict_take_keras3_callbacks(setup):
    model, batches, _ = setup
    calls = []

    class Counting(keras3.callbacks.Callback):
        def on_test_batch_end(self, batch, logs=None):
            calls.append(("test batch", round(float(logs["det_loss"]), 4)))

        def on_test_end(self, logs=None):
            calls.append(("test end", round(float(logs["det_loss"]), 4)))

        def on_predict_end(self, logs=None):
            calls.append(("predict end", None))

    result = model.evaluate(batches, steps=1, callbacks=[Counting()], return_dict=True,
                            verbose=0)
    images = batches.map(lambda images, labels: images)
    model.predict(images, steps=1, callbacks=[Counting()], verbose=0)
    loss = round(result["det_loss"], 4)
    assert calls == [("test batch", loss), ("test end", loss), ("predict end", None)]


def test_tensorboard_writes_the_epochs_scalars(setup, tmp_path):
    log_dir = str(tmp_path / "tb")
    history = fit(setup, [keras3.callbacks.TensorBoard(log_dir)])
    values = []
    for path in glob.glob(os.path.join(log_dir, "train", "events.out.*")):
        for record in tf.data.TFRecordDataset(path):
            event = tf.compat.v1.Event.FromString(record.numpy())
            for value in event.summary.value:
                if value.tag == "epoch_det_loss":
                    values.append((event.step, float(tf.make_ndarray(value.tensor))))
    assert [step for step, _ in sorted(values)] == [0, 1, 2]
    np.testing.assert_allclose([v for _, v in sorted(values)], history.history["det_loss"],
                               rtol=1e-6)


def test_reduce_lr_on_plateau_needs_a_rate_it_can_set(setup):
    model, batches, config = setup
    reduce = keras3.callbacks.ReduceLROnPlateau(monitor="loss", min_delta=1e9, patience=1,
                                                factor=0.5)
    with pytest.raises(TypeError, match=r"^fit\(callbacks=\[keras.callbacks.ReduceLROnPlateau\]\)"
                                        r": it sets the learning rate.*compile with a number"):
        fit(setup, [reduce])
    fixed = EfficientDetNetTrain(config)
    fixed.compile(optimizer=tf_keras.optimizers.SGD(learning_rate=0.01, momentum=0.9))
    history = fixed.fit(batches, epochs=3, steps_per_epoch=1, callbacks=[reduce], verbose=0)
    # No epoch improves by 1e9: after each `patience` epoch the rate halves.
    np.testing.assert_allclose(history.history["learning_rate"], [0.01, 0.01, 0.005])
    assert float(fixed.optimizer.learning_rate.numpy()) == pytest.approx(0.0025)


@pytest.mark.quick
@pytest.mark.parametrize("make, instead", [
    (lambda tmp: keras3.callbacks.BackupAndRestore(str(tmp)), "tf_keras.callbacks.BackupAndRestore"),
    (lambda tmp: keras3.callbacks.SwapEMAWeights(), "moving_average_decay"),
], ids=["BackupAndRestore", "SwapEMAWeights"])
def test_keras3_callbacks_that_cannot_work_here_stop_with_one_line(make, instead, tmp_path):
    with pytest.raises(TypeError) as raised:
        door_callbacks([make(tmp_path)], "fit")
    message = str(raised.value)
    assert "\n" not in message and "a Keras 3 callback" in message and instead in message


@pytest.mark.quick
def test_compile_refuses_keras3_optimizers_keras_losses_and_metrics():
    model = EfficientDetNetTrain(tiny_config(**SMALL))
    with pytest.raises(TypeError, match=r"optimizer=keras.optimizers.Adam\): a Keras 3 optimizer.*pass "
                                        "tf_keras.optimizers.Adam"):
        model.compile(optimizer=keras3.optimizers.Adam(1e-3))
    for loss in (keras3.losses.Huber(), tf_keras.losses.Huber()):
        with pytest.raises(TypeError, match=r"loss\(labels, class_outputs, box_outputs\)"):
            model.compile(loss=loss, steps_per_epoch=1)
    with pytest.raises(TypeError, match="compiled metrics"):
        model.compile(metrics=[keras3.metrics.MeanIoU(num_classes=4)], steps_per_epoch=1)


def test_a_keras3_user_loads_the_export_as_a_tfsmlayer(tmp_path):
    """keras.layers.TFSMLayer on the serving signature gives the Detector's detections."""
    config = tiny_config(**SMALL)
    export_dir = export_detector(EfficientDetNet(config=config), str(tmp_path / "exported"))
    images = np.random.default_rng(0).integers(0, 255, [2, 80, 96, 3], dtype=np.uint8)

    layer = keras3.layers.TFSMLayer(export_dir, call_endpoint="serving_default")
    outputs = layer(tf.constant(images))
    found = Detector(export_dir).detect(list(images))
    for index, detections in enumerate(found):
        count = len(detections.scores)
        assert int(outputs["num_detections"][index]) == count > 0
        np.testing.assert_allclose(outputs["detection_scores"][index, :count], detections.scores,
                                   atol=1e-6)
        np.testing.assert_array_equal(
            outputs["detection_classes"][index, :count].numpy().astype(int),
            detections.class_ids)
        # Normalised, as TF Serving returns them; the Detector clips them to the image.
        height, width = images.shape[1:3]
        size = np.array([height, width, height, width], np.float32)
        pixels = np.clip(outputs["detection_boxes"][index, :count].numpy(), 0, 1) * size
        np.testing.assert_allclose(pixels, detections.boxes, atol=1e-3)
    # As a layer of a Keras 3 model, too.
    inputs = keras3.Input([None, None, 3], dtype="uint8")
    wrapped = keras3.Model(inputs, layer(inputs))
    np.testing.assert_allclose(wrapped(images)["detection_scores"], outputs["detection_scores"])


WANDB_SCRIPT = """
import sys
import tensorflow as tf                 # first, as user code often does: tf.keras is Keras 3
import wandb
from wandb.integration.keras import WandbMetricsLogger
from efficientdet_keras import EfficientDetNetTrain, InputPipeline, get_efficientdet_config
from efficientdet_keras.data.sources import TFRecordSource

config = get_efficientdet_config("efficientdet-d0")
config.override(dict(image_size=64, num_classes=4, fpn_num_filters=16, fpn_cell_repeats=1,
                     box_class_repeats=1, batch_size=2))
model = EfficientDetNetTrain(config)
model.compile(steps_per_epoch=1)
train = InputPipeline(config, TFRecordSource(sys.argv[1]), is_training=True, batch_size=2)()
wandb.init(mode="offline", dir=sys.argv[2], project="efficientdet", config=config.as_dict())
history = model.fit(train, epochs=2, steps_per_epoch=1, callbacks=[WandbMetricsLogger()],
                    verbose=0)
wandb.finish()
print("base", WandbMetricsLogger.__mro__[1].__module__)
print("det_loss", history.history["det_loss"][-1])
"""


def test_wandb_keras_callbacks_log_a_run_offline(tmp_path):
    """W&B's Keras callback, a Keras 3 one when TensorFlow is imported first, logs each
    epoch's values into an offline run."""
    data = write_synthetic_dataset(str(tmp_path / "data"), num_train=4, num_val=2,
                                   image_size=64, seed=2)
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    env["WANDB_SILENT"] = "false"
    result = subprocess.run([sys.executable, "-c", WANDB_SCRIPT, data.train_tfrecord,
                             str(tmp_path)], capture_output=True, text=True, env=env,
                            cwd=str(tmp_path), timeout=600)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "base keras.src.callbacks.callback" in output
    det_loss = float(re.search(r"^det_loss (\S+)$", result.stdout, re.M).group(1))
    # W&B's closing summary holds the last epoch's values it was sent.
    logged = re.search(r"epoch/det_loss ([0-9.]+)", output)
    assert logged, output[-3000:]
    assert abs(float(logged.group(1)) - det_loss) < 1e-4
    assert re.search(r"epoch/epoch 1\b", output)
    assert glob.glob(str(tmp_path / "wandb" / "offline-run-*" / "run-*.wandb"))
