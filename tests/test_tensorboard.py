"""EpochTensorBoard: the run's TensorBoard logs without summary calls after every step."""

import glob
import os

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras
from tf_keras.src import callbacks as keras_callbacks

from efficientdet_keras.training.callbacks.tensorboard import EpochTensorBoard

EPOCHS, STEPS = 2, 4


def fit_with(tensorboard, monkeypatch):
    """Fits a small model with `tensorboard` and a callback with batch hooks (as the run's
    guard and backup are: Keras then calls every callback's batch hooks); returns the names
    of the scalar summaries written or attempted."""
    scalars = []
    summary_scalar = keras_callbacks.tf.summary.scalar

    def counted(name, *args, **kwargs):
        scalars.append(name)
        return summary_scalar(name, *args, **kwargs)

    monkeypatch.setattr(keras_callbacks.tf.summary, "scalar", counted)
    model = keras.Sequential([keras.layers.Dense(1, input_shape=(2,))])
    model.compile(optimizer="sgd", loss="mse")
    batch_hooks = keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: None)
    model.fit(np.ones([STEPS * 2, 2], np.float32), np.zeros([STEPS * 2, 1], np.float32),
              batch_size=2, epochs=EPOCHS, verbose=0, callbacks=[batch_hooks, tensorboard])
    return scalars


def events(folder):
    return [event for path in glob.glob(os.path.join(folder, "events.out.*"))
            for event in tf.compat.v1.train.summary_iterator(path)]


def test_keras_tensorboard_makes_a_summary_call_per_step_and_log(tmp_path, monkeypatch):
    """What EpochTensorBoard leaves out (and why its test below can fail)."""
    scalars = fit_with(keras.callbacks.TensorBoard(str(tmp_path)), monkeypatch)
    assert scalars.count("batch_loss") == EPOCHS * STEPS


def test_epoch_tensorboard_writes_the_epoch_logs_graph_and_profile_only(tmp_path, monkeypatch):
    log_dir = str(tmp_path)
    scalars = fit_with(EpochTensorBoard(log_dir, profile_batch=(2, 3)), monkeypatch)
    assert scalars == ["epoch_loss"] * EPOCHS  # No call at any step.
    train = events(os.path.join(log_dir, "train"))
    epoch_steps = sorted(event.step for event in train for value in event.summary.value
                         if value.tag == "epoch_loss")
    assert epoch_steps == list(range(EPOCHS))
    assert any(event.graph_def for event in train)  # The training graph, after a step.
    assert glob.glob(os.path.join(log_dir, "plugins", "profile", "*", "*.xplane.pb"))


@pytest.mark.quick
def test_per_step_logs_still_reach_a_tensorboard_that_asks_for_them(tmp_path, monkeypatch):
    scalars = fit_with(EpochTensorBoard(str(tmp_path), update_freq=1), monkeypatch)
    assert scalars.count("batch_loss") == EPOCHS * STEPS
