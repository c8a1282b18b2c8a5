"""The NaN and inf guard (training/nan_guard.py), through the real train_step and model.fit.

The bad step comes from PoisonedLoss, the detection loss with one chosen call made NaN
(or given an infinite gradient), so the guard sees what a diverging run produces. One
model (graph mode) is shared by the tests of this module; float16 has its own (eager).
"""

import glob
import os

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from efficientdet_keras.checkpoint import variable_name
from efficientdet_keras.cli.common import run_or_exit
from efficientdet_keras.data.pipeline import InputPipeline
from efficientdet_keras.data.sources import TFRecordSource
from efficientdet_keras.data.synthetic import write_synthetic_dataset
from efficientdet_keras.detection.losses import DetectionLoss
from efficientdet_keras.training.callbacks import get_callbacks
from efficientdet_keras.training.nan_guard import (MAX_OVERFLOW_SKIPS, NaNGuard,
                                                   NonFiniteLossError, fit_with_nan_recovery)
from efficientdet_keras.training.optimizers import CosineDecaySchedule, ScaledSchedule
from efficientdet_keras.training.trainer import EfficientDetNetTrain
from test_trainer import small_config

STEPS_PER_EPOCH = 2


def scaled_gradient(x: tf.Tensor, factor: tf.Tensor) -> tf.Tensor:
    """x, with its gradient multiplied by `factor`."""
    @tf.custom_gradient
    def identity(value):
        return tf.identity(value), lambda dy: dy * factor
    return identity(x)


class PoisonedLoss:
    """DetectionLoss whose chosen call has cls_loss x NaN, or cls_loss with a gradient made
    inf or NaN (the loss itself finite), in that call or from it on.

    `poison(calls_from_now)` picks the call (1: the next train step). Counting in
    variables keeps one traced train_step for every test.
    """

    def __init__(self, config):
        self.loss = DetectionLoss(config)
        self.calls = tf.Variable(0, dtype=tf.int64, trainable=False)
        self.poisoned_call = tf.Variable(-1, dtype=tf.int64, trainable=False)
        self.gradient_factor = tf.Variable(1.0, trainable=False)  # 1: the loss is made NaN.
        self.lasting = tf.Variable(False, trainable=False)

    def poison(self, calls_from_now: int, infinite_gradient: bool = False,
               gradient_factor: float = 1.0, lasting: bool = False) -> None:
        self.poisoned_call.assign(self.calls + calls_from_now)
        self.gradient_factor.assign(np.inf if infinite_gradient else gradient_factor)
        self.lasting.assign(lasting)

    def __call__(self, labels, class_outputs, box_outputs):
        losses = dict(self.loss(labels, class_outputs, box_outputs))
        self.calls.assign_add(1)
        hit = tf.equal(self.calls, self.poisoned_call) | \
            (self.lasting & (self.calls >= self.poisoned_call) & (self.poisoned_call >= 0))
        bad_gradient = hit & tf.not_equal(self.gradient_factor, 1.0)
        nan_loss = hit & tf.logical_not(bad_gradient)
        cls_loss = losses["cls_loss"]
        poisoned = scaled_gradient(cls_loss, tf.where(bad_gradient, self.gradient_factor, 1.0)) * \
            tf.where(nan_loss, np.nan, 1.0)
        losses["det_loss"] = losses["det_loss"] - cls_loss + poisoned
        losses["cls_loss"] = poisoned
        return losses


def config_for_tests(**overrides):
    return small_config(batch_size=2, max_level=5, **overrides)  # 3 levels: a smaller graph.


def make_model(config, run_eagerly=False, optimizer=None):
    model = EfficientDetNetTrain(config)
    loss = PoisonedLoss(config)
    model.compile(optimizer, steps_per_epoch=STEPS_PER_EPOCH, loss=loss, run_eagerly=run_eagerly)
    return model, loss


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    data = write_synthetic_dataset(str(tmp_path_factory.mktemp("nan_data")), num_train=4,
                                   num_val=1, image_size=64, seed=3)
    return InputPipeline(config_for_tests(), TFRecordSource(data.train_tfrecord),
                         is_training=True, batch_size=2, seed=0)()


@pytest.fixture(scope="module")
def shared(dataset):
    """(model, PoisonedLoss): the graph-mode model the tests of this module share, after one
    healthy step (which makes the optimizer's slots)."""
    model, loss = make_model(config_for_tests())
    model.fit(dataset, epochs=1, steps_per_epoch=1, verbose=0)
    return model, loss


def training_state(model):
    """Every value a step may change: weights and BatchNorm statistics, EMA, optimizer."""
    state = {"model/" + variable_name(v): v.numpy().copy() for v in model.variables}
    state.update({"ema/%d" % i: v.numpy().copy() for i, v in enumerate(model.ema.shadows)})
    state.update({"optimizer/%d/%s" % (i, v.name): v.numpy().copy()
                  for i, v in enumerate(model.optimizer.variables)})
    return state


def assert_same_state(actual, expected):
    assert actual.keys() == expected.keys()
    changed = [name for name in expected if not np.array_equal(actual[name], expected[name])]
    assert not changed, "changed by the non-finite step: %s" % changed[:5]


class KeepState(keras.callbacks.Callback):
    """The training state at the end of the latest step that reached it."""

    def on_train_batch_end(self, batch, logs=None):
        self.state = training_state(self.model)


def checkpoint_tensors(prefix):
    reader = tf.train.load_checkpoint(prefix)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def assert_all_finite(prefix):
    tensors = checkpoint_tensors(prefix)
    bad = [name for name, value in tensors.items()
           if np.asarray(value).dtype.kind == "f" and not np.all(np.isfinite(value))]
    assert tensors and not bad, "%s holds NaN or inf: %s" % (prefix, bad[:5])


# First: a fit that raised leaves Keras' BackupAndRestore state on the model, which
# would make a later fit without that callback start at the backup's epoch.
def test_infinite_gradient_with_finite_loss_stops_in_float32(shared, dataset):
    model, loss = shared
    before = training_state(model)
    step = int(model.optimizer.iterations) + 1
    loss.poison(1, infinite_gradient=True)
    with pytest.raises(NonFiniteLossError,
                       match=r"^non-finite loss at step %d \(epoch 1\): gradient_norm=(nan|inf) "
                             r"\(finite: loss=" % step):
        model.fit(dataset, epochs=1, steps_per_epoch=1, callbacks=[NaNGuard()], verbose=0)
    assert_same_state(training_state(model), before)


def test_a_non_finite_step_stops_fit_at_the_end_of_the_next_step(shared, dataset):
    """The guard reads each step's flag on a thread of its own and looks at it a step later,
    so a long epoch stops right after the bad step, not at the epoch's end. (Before any fit
    with a backup callback raises: that leaves Keras' resume state on the shared model.)"""
    model, loss = shared
    loss.poison(3)
    calls_before = int(loss.calls)
    with pytest.raises(NonFiniteLossError):
        model.fit(dataset, epochs=1, steps_per_epoch=50, verbose=0, callbacks=[NaNGuard()])
    steps_after_the_bad_one = int(loss.calls) - calls_before - 3
    assert steps_after_the_bad_one == 1


def test_nan_loss_stops_at_its_step_and_nothing_written_holds_nan(shared, dataset, tmp_path):
    model, loss = shared
    model_dir = str(tmp_path)
    callbacks = get_callbacks(model.config, model_dir)
    guard_index = next(i for i, c in enumerate(callbacks) if isinstance(c, NaNGuard))
    assert guard_index < next(i for i, c in enumerate(callbacks)
                              if isinstance(c, keras.callbacks.BackupAndRestore))
    keep = KeepState()  # After the guard, which raises first at the bad step.
    callbacks.insert(guard_index + 1, keep)
    first = int(model.optimizer.iterations) + 1
    loss.poison(4)  # The second step of the second epoch.
    with pytest.raises(NonFiniteLossError) as raised:
        fit_with_nan_recovery(model, dataset, epochs=3, steps_per_epoch=STEPS_PER_EPOCH,
                              callbacks=callbacks, verbose=0)
    message = str(raised.value)
    assert message.startswith("non-finite loss at step %d (epoch 2): loss=nan, det_loss=nan, "
                              "cls_loss=nan, gradient_norm=nan (finite: box_loss="
                              % (first + 3)), message
    assert "weights are those after step %d" % (first + 2) in message
    assert "\n" not in message
    # The guard stopped in the step: the state is the one after the step before.
    assert int(model.optimizer.iterations) == first + 2
    assert_same_state(training_state(model), keep.state)
    # Epoch 1 wrote ckpt-1 and its backup; nothing was written for the bad epoch.
    assert sorted(os.listdir(model_dir)).count("ckpt-1.index") == 1
    assert not glob.glob(os.path.join(model_dir, "ckpt-2*"))
    assert_all_finite(os.path.join(model_dir, "ckpt-1"))
    backup = tf.train.latest_checkpoint(os.path.join(model_dir, "backup", "chief"))
    assert backup is not None
    assert_all_finite(backup)


def test_recovery_rolls_back_to_the_backup_with_a_lower_learning_rate(shared, dataset, tmp_path):
    model, loss = shared
    backup_dir = str(tmp_path / "backup")
    callbacks = [NaNGuard(attempts=1, lr_factor=0.25),
                 keras.callbacks.BackupAndRestore(backup_dir, delete_checkpoint=False)]
    start = int(model.optimizer.iterations)
    schedule = model.optimizer._learning_rate.schedule
    loss.poison(3)  # The first step of the second epoch, after the backup of epoch 1.
    history = fit_with_nan_recovery(model, dataset, epochs=2, steps_per_epoch=STEPS_PER_EPOCH,
                                    callbacks=callbacks, verbose=0)
    # Rolled back to the backup after 2 steps, then epoch 2: 4 steps in all (skipping the bad
    # step and going on would make 3, starting the fit over without the backup 6).
    assert int(model.optimizer.iterations) == start + 4
    assert history.epoch == [1]
    assert float(model.nan_recovery.lr_scale) == 0.25 and int(model.nan_recovery.recoveries) == 1
    last_step = start + 3  # The schedule's step of the last update (0-based).
    assert history.history["learning_rate"][-1] == pytest.approx(
        0.25 * float(schedule(last_step)), rel=1e-6)
    assert np.all(np.isfinite(history.history["loss"]))
    # The backup a later resume reads holds the scale, and no NaN.
    backup = tf.train.latest_checkpoint(os.path.join(backup_dir, "chief"))
    assert_all_finite(backup)
    scales = [value for name, value in checkpoint_tensors(backup).items()
              if "nan_recovery/lr_scale" in name]
    assert scales == [0.25]


def test_recovery_needs_a_backup_and_attempts_left(shared, dataset, tmp_path):
    model, loss = shared
    recoveries = int(model.nan_recovery.recoveries)
    callbacks = [NaNGuard(attempts=recoveries + 1),
                 keras.callbacks.BackupAndRestore(str(tmp_path / "first"), delete_checkpoint=False)]
    loss.poison(1)  # Before the first backup.
    with pytest.raises(NonFiniteLossError, match="; no backup to roll back to yet$"):
        fit_with_nan_recovery(model, dataset, epochs=1, steps_per_epoch=STEPS_PER_EPOCH,
                              callbacks=callbacks, verbose=0)
    callbacks = [NaNGuard(attempts=1),
                 keras.callbacks.BackupAndRestore(str(tmp_path / "second"), delete_checkpoint=False)]
    model.nan_recovery.recoveries.assign(1)  # As a resumed run that already recovered once.
    loss.poison(3)
    with pytest.raises(NonFiniteLossError, match="no NaN recovery attempts left "
                                                 r"\(nan_recovery_attempts=1\)$"):
        fit_with_nan_recovery(model, dataset, epochs=2, steps_per_epoch=STEPS_PER_EPOCH,
                              callbacks=callbacks, verbose=0)


def test_float16_skipped_steps_are_not_nan_events(dataset):
    # A low initial loss scale: the default 2 ** 15 overflows this model's first steps.
    optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.01),
                                                         initial_scale=2.0 ** 4)
    model, loss = make_model(config_for_tests(mixed_precision="float16"), run_eagerly=True,
                             optimizer=optimizer)

    class StepLogs(keras.callbacks.Callback):
        """Per step: the logged gradient_norm (epoch mean so far) and the loss scale after it."""

        def on_train_batch_end(self, batch, logs=None):
            self.steps = getattr(self, "steps", []) + [
                (logs["gradient_norm"], float(self.model.optimizer.loss_scale))]

    step_logs = StepLogs()
    scale = float(model.optimizer.loss_scale)
    loss.poison(2, infinite_gradient=True)
    history = model.fit(dataset, epochs=1, steps_per_epoch=2, verbose=0,
                        callbacks=[step_logs, NaNGuard()])
    # No NaN event, and every step counts as one (LossScaleOptimizer counts skipped ones).
    assert history.history["nonfinite_steps"] == [0.0]
    assert int(model.optimizer.iterations) == 2
    mean = 0.0  # The mean of no step.
    skipped = []
    for step, (norm, new_scale) in enumerate(step_logs.steps, start=1):
        if new_scale < scale:  # The loss-scale optimizer skipped this step...
            skipped.append(step)
            assert norm == mean, step  # ...and its gradient norm stayed out of the mean.
        else:
            assert norm != mean and np.isfinite(norm), step
        mean, scale = norm, new_scale
    assert skipped == [2]
    assert np.isfinite(history.history["gradient_norm"][0])


def test_float16_gradients_the_loss_scale_cannot_explain_stop_training(dataset):
    """A NaN made in the backward pass, the loss finite: under float16 the loss-scale
    optimizer takes it for an overflow, skips the step and halves its scale. Training stops
    with the guard's message once loss scaling cannot explain it, instead of skipping every
    later step with nothing logged: after MAX_OVERFLOW_SKIPS in a row from the default scale
    (2 ** 15, whose own overflows at the start, if any, stay well below that), at the scale's floor
    of 1 from a low one."""
    model, loss = make_model(config_for_tests(mixed_precision="float16"), run_eagerly=True)
    optimizer = model.optimizer
    assert isinstance(optimizer, keras.mixed_precision.LossScaleOptimizer) and optimizer.dynamic
    history = model.fit(dataset, epochs=1, steps_per_epoch=8, verbose=0, callbacks=[NaNGuard()])
    # Whether the default scale overflows in the first steps depends on the CPU's float16
    # kernels; if it did, the optimizer lowered it and training went on.
    scale = float(optimizer.loss_scale)
    assert scale <= 2.0 ** 15 and history.history["nonfinite_steps"] == [0.0]
    assert history.history["loss_scale"] == [scale]
    weights = [v.numpy() for v in model.trainable_variables]
    loss.poison(1, gradient_factor=np.nan, lasting=True)
    step = int(optimizer.iterations) + MAX_OVERFLOW_SKIPS
    last_scale = scale / 2 ** (MAX_OVERFLOW_SKIPS - 1)
    assert last_scale > 1.0  # This stop comes from the streak, not the floor.
    with pytest.raises(NonFiniteLossError, match=(
            r"^non-finite loss at step %d \(epoch 1\): gradient_norm=nan \(finite: loss=.*\); "
            r"not a float16 overflow: %d non-finite gradients in a row, the loss scale at %g "
            % (step, MAX_OVERFLOW_SKIPS, last_scale))):
        model.fit(dataset, epochs=1, steps_per_epoch=MAX_OVERFLOW_SKIPS + 4, verbose=0,
                  callbacks=[NaNGuard()])
    assert int(optimizer.iterations) == step - 1
    for variable, value in zip(model.trainable_variables, weights):  # All skipped.
        np.testing.assert_array_equal(variable.numpy(), value)

    # From a scale of 4: skipped at 4 and 2, stopped at 1.
    optimizer._loss_scale.current_loss_scale.assign(4.0)  # noqa: SLF001 (no public setter)
    loss.poison(1, gradient_factor=np.nan, lasting=True)
    with pytest.raises(NonFiniteLossError, match=(
            r"^non-finite loss at step %d .*: 3 non-finite gradients in a row, the loss scale at "
            r"1 " % (int(optimizer.iterations) + 3))):
        model.fit(dataset, epochs=1, steps_per_epoch=6, verbose=0, callbacks=[NaNGuard()])


def test_no_step_after_a_non_finite_one_is_applied(dataset):
    """With steps_per_execution > 1 the guard looks only after the whole call, and at the
    record as it was a call before: the steps after the non-finite one are computed but
    none of them changes anything, so the message's "weights after step N - 1" holds."""
    model, loss = make_model(config_for_tests(steps_per_execution=2))
    model.fit(dataset, epochs=1, steps_per_epoch=2, verbose=0)
    before = training_state(model)
    first = int(model.optimizer.iterations) + 1
    loss.poison(1)  # The first step of the next call; the call's second step is healthy.
    calls = []

    class CountCalls(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            calls.append(batch)

    with pytest.raises(NonFiniteLossError, match=r"^non-finite loss at step %d .*weights are "
                                                 r"those after step %d " % (first, first - 1)):
        model.fit(dataset, epochs=1, steps_per_epoch=8, verbose=0,
                  callbacks=[NaNGuard(), CountCalls()])
    assert calls == [1]  # Raised after two calls of two steps, at the fourth step.
    assert int(model.optimizer.iterations) == first - 1
    assert_same_state(training_state(model), before)


@pytest.mark.quick
def test_the_run_callbacks_leave_the_step_logs_on_the_device(tmp_path):
    """Keras copies each step's logs to the host (a wait for the device) unless every
    callback with batch hooks takes tensors: the run's callbacks do."""
    callbacks = keras.callbacks.CallbackList(get_callbacks(config_for_tests(backup_steps=5),
                                                           str(tmp_path)))
    batch_hooks = [c for c in callbacks.callbacks if c._implements_train_batch_hooks()]
    assert {type(c).__name__ for c in batch_hooks} >= {"NaNGuard", "StepBackup", "StopOnSignal"}
    assert callbacks._batch_hooks_support_tf_logs
    assert isinstance(callbacks.callbacks[0], NaNGuard)  # Its epoch-end look comes first.


@pytest.mark.quick
def test_guard_stops_other_models_on_a_nan_loss():
    model = keras.Sequential([keras.layers.Dense(1, input_shape=(2,))])
    model.compile(optimizer="sgd", loss="mse")
    inputs = np.array([[1.0, np.nan], [1.0, 2.0]], np.float32)
    with pytest.raises(NonFiniteLossError, match="^non-finite loss nan at batch 0 of epoch 1$"):
        model.fit(inputs, np.zeros([2, 1], np.float32), batch_size=2, epochs=2, verbose=0,
                  callbacks=[NaNGuard()])


@pytest.mark.quick
def test_scaled_schedule_multiplies_and_serializes():
    inner = CosineDecaySchedule(peak_lr=0.1, warmup_init_lr=0.01, warmup_steps=10,
                                total_steps=100)
    scale = tf.Variable(0.5)
    schedule = ScaledSchedule(inner, scale)
    assert float(schedule(40)) == pytest.approx(0.5 * float(inner(40)))
    scale.assign(0.25)  # What a recovery does: the next steps use the new scale.
    assert float(schedule(40)) == pytest.approx(0.25 * float(inner(40)))
    rebuilt = keras.optimizers.schedules.deserialize(
        keras.optimizers.schedules.serialize(schedule))
    assert isinstance(rebuilt, ScaledSchedule)
    assert float(rebuilt(40)) == pytest.approx(float(schedule(40)))


def test_cli_reports_the_error_in_one_line():
    def train():
        raise NonFiniteLossError("non-finite loss at step 5 (epoch 1): loss=nan")
    with pytest.raises(SystemExit) as exited:
        run_or_exit("efficientdet-train", train)
    assert exited.value.code == "efficientdet-train: non-finite loss at step 5 (epoch 1): loss=nan"


@pytest.mark.quick
@pytest.mark.parametrize("override, message", [
    ("nan_recovery_attempts=-1", "nan_recovery_attempts must be a non-negative integer"),
    ("nan_recovery_lr_factor=1.0", "nan_recovery_lr_factor must be a number in \\(0, 1\\)")])
def test_recovery_keys_are_checked(override, message):
    with pytest.raises(ValueError, match=message):
        config_for_tests().override(override)
