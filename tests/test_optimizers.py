"""Learning-rate schedules and optimizers, checked against formulas written here with `math`."""

import math

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from helpers import HPARAMS_DIR, tiny_config
from efficientdet_keras import Config
from efficientdet_keras.training.optimizers import (
    DEFAULT_BATCH_SIZE, ConstantSchedule, CosineDecaySchedule, FusedAdam, FusedSGD,
    PolynomialSchedule, StepwiseSchedule, clip_gradients, get_optimizer, learning_rate_schedule,
    scaled_learning_rates)

pytestmark = pytest.mark.quick  # All of this file is in the inner-loop set.

PEAK, INIT = 0.08, 0.008
WARMUP, TOTAL, FIRST_DROP, SECOND_DROP, POWER = 10, 100, 60, 85, 0.9
# Start, mid-warmup, end of warmup, decay points, total, beyond total.
STEPS = [0, 3, 5, 9, 10, 11, 30, 55, 59, 60, 84, 85, 99, 100, 101, 250]


def expected_lr(method, step, peak=PEAK, init=INIT, warmup=WARMUP, total=TOTAL,
                first=FIRST_DROP, second=SECOND_DROP, power=POWER):
    """The recipe in plain Python, for warmup < total."""
    if step < warmup:
        return init + (peak - init) * step / warmup
    progress = min((step - warmup) / (total - warmup), 1.0)
    if method == "cosine":
        return 0.5 * peak * (1 + math.cos(math.pi * progress))
    if method == "polynomial":
        return peak * (1 - progress) ** power
    if method == "stepwise":
        return peak * (0.01 if step >= second else 0.1 if step >= first else 1.0)
    return peak


def make_schedule(method, peak=PEAK, init=INIT, warmup=WARMUP, total=TOTAL):
    if method == "cosine":
        return CosineDecaySchedule(peak, init, warmup, total)
    if method == "polynomial":
        return PolynomialSchedule(peak, init, warmup, total, power=POWER)
    if method == "stepwise":
        return StepwiseSchedule(peak, init, warmup, total, FIRST_DROP, SECOND_DROP)
    return ConstantSchedule(peak, init, warmup, total)


def close(expected):
    # float32 arithmetic: relative 1e-6, plus a tiny absolute slack for values near 0
    # (cos near pi loses relative precision).
    return pytest.approx(expected, rel=1e-6, abs=1e-8)


METHODS = ["cosine", "stepwise", "polynomial", "constant"]


@pytest.mark.parametrize("batch_size, peak", [(64, 0.08), (8, 0.01), (256, 0.32)])
def test_scaled_learning_rates(batch_size, peak):
    # Only the peak follows the batch; the warm-up starts at lr_warmup_init as given.
    assert DEFAULT_BATCH_SIZE == 64
    got_peak, got_init = scaled_learning_rates(tiny_config(batch_size=batch_size))
    assert got_peak == pytest.approx(peak, rel=1e-12)
    assert got_init == pytest.approx(0.008, rel=1e-12)


@pytest.mark.parametrize("batch_size, rates", [
    # (step 0, step 5 = mid-warm-up, step 9, step 10 = end of warm-up), worked out by hand:
    # batch 8: peak 0.08 * 8 / 64 = 0.01, so 0.008 + 0.002 * t / 10.
    (8, (0.008, 0.009, 0.0098, 0.01)),
    # batch 128: peak 0.16, so 0.008 + 0.152 * t / 10.
    (128, (0.008, 0.084, 0.1448, 0.16)),
])
def test_warmup_starts_unscaled_and_peaks_scaled(batch_size, rates):
    schedule = learning_rate_schedule(tiny_config(batch_size=batch_size), steps_per_epoch=10)
    assert schedule.warmup_steps == 10
    assert [float(schedule(step)) for step in (0, 5, 9, 10)] == [close(r) for r in rates]


@pytest.mark.parametrize("method", METHODS)
def test_schedule_matches_formula(method):
    schedule = make_schedule(method)
    for step in STEPS:
        assert float(schedule(step)) == close(expected_lr(method, step)), "step %d" % step


def test_schedule_landmarks():
    # Values worked out by hand, independent of expected_lr.
    cosine = make_schedule("cosine")
    assert float(cosine(0)) == close(0.008)
    assert float(cosine(5)) == close(0.044)
    assert float(cosine(10)) == close(0.08)
    assert float(cosine(55)) == close(0.04)  # Half-way through the decay: cos(pi/2) = 0.
    assert float(cosine(100)) == close(0.0)
    assert float(cosine(1000)) == close(0.0)
    poly = make_schedule("polynomial")
    assert float(poly(55)) == close(0.08 * 0.5 ** 0.9)
    assert float(poly(100)) == 0.0 and float(poly(500)) == 0.0
    assert float(make_schedule("constant")(10 ** 6)) == close(0.08)


def test_stepwise_drops_exactly_at_drop_steps():
    schedule = make_schedule("stepwise")
    assert float(schedule(FIRST_DROP - 1)) == close(PEAK)
    assert float(schedule(FIRST_DROP)) == close(PEAK * 0.1)
    assert float(schedule(SECOND_DROP - 1)) == close(PEAK * 0.1)
    assert float(schedule(SECOND_DROP)) == close(PEAK * 0.01)
    assert float(schedule(10 * TOTAL)) == close(PEAK * 0.01)


@pytest.mark.parametrize("method", METHODS)
def test_int64_steps_eager_and_in_tf_function(method):
    schedule = make_schedule(method)
    graph_schedule = tf.function(lambda step: schedule(step))
    for step in [0, 5, 10, 55, 60, 85, 100, 150]:
        int64_step = tf.constant(step, tf.int64)
        eager = schedule(int64_step)
        graph = graph_schedule(int64_step)
        assert eager.dtype == tf.float32 and graph.dtype == tf.float32
        assert float(eager) == close(expected_lr(method, step)), "step %d" % step
        assert float(graph) == close(expected_lr(method, step)), "step %d" % step


@pytest.mark.parametrize("method", METHODS)
def test_serialization_round_trip(method):
    schedule = make_schedule(method)
    config = schedule.get_config()
    for key, value in config.items():
        assert type(value) in (int, float, str), "%s is %r" % (key, type(value))
    rebuilt = type(schedule).from_config(config)
    deserialized = keras.optimizers.schedules.deserialize(
        keras.optimizers.schedules.serialize(schedule))
    assert type(deserialized) is type(schedule)
    assert rebuilt.get_config() == config == deserialized.get_config()
    for step in STEPS:
        assert float(rebuilt(step)) == float(schedule(step)) == float(deserialized(step))


@pytest.mark.parametrize("method", METHODS)
def test_no_warmup(method):
    schedule = make_schedule(method, warmup=0)
    for step in [0, 1, 50, 100, 200]:
        value = float(schedule(step))
        assert math.isfinite(value)
        assert value == close(expected_lr(method, step, warmup=0)), "step %d" % step
    assert float(schedule(0)) == close(PEAK)  # No ramp: the first step is already at the peak.


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("total", [5, 10])
def test_total_not_after_warmup(method, total):
    # No room to decay: warmup is unchanged, then the decay counts as finished
    # (0 for cosine and polynomial; stepwise and constant stay peak-based).
    schedule = make_schedule(method, total=total)
    for step in range(0, 30):
        value = float(schedule(step))
        assert math.isfinite(value), "step %d" % step
        if step < WARMUP:
            assert value == close(INIT + (PEAK - INIT) * step / WARMUP)
    after = float(schedule(WARMUP))
    assert after == close({"cosine": 0.0, "polynomial": 0.0, "stepwise": PEAK,
                           "constant": PEAK}[method])


def test_demo_schedule_is_the_one_it_was_tuned_with():
    # hparams/demo.yaml at batch 8: warm-up over 40 steps from 0.00025 (as written, not
    # scaled with the batch) to 0.005 (0.04 per 64 images).
    from efficientdet_keras import get_efficientdet_config
    config = get_efficientdet_config("efficientdet-d0").override(HPARAMS_DIR + "/demo.yaml")
    schedule = learning_rate_schedule(config, config.steps_per_epoch)
    assert (schedule.warmup_steps, schedule.total_steps) == (40, 240)
    assert [float(schedule(step)) for step in (0, 20, 40)] == [
        close(0.00025), close(0.002625), close(0.005)]
    adam = get_optimizer(config, config.steps_per_epoch)
    assert adam.beta_1 == pytest.approx(0.9)  # momentum 0.9: Keras' default, as before.


def test_learning_rate_schedule_from_config():
    config = tiny_config(batch_size=8, lr_warmup_epoch=1.5, num_epochs=3, first_lr_drop_epoch=2.0,
                         second_lr_drop_epoch=2.5, lr_decay_method="stepwise")
    schedule = learning_rate_schedule(config, steps_per_epoch=10)
    assert isinstance(schedule, StepwiseSchedule)
    assert (schedule.warmup_steps, schedule.total_steps) == (15, 30)
    assert (schedule.first_drop_step, schedule.second_drop_step) == (20, 25)
    for step in [0, 7, 15, 19, 20, 25, 40]:
        assert float(schedule(step)) == close(expected_lr(
            "stepwise", step, peak=0.01, init=0.008, warmup=15, total=30, first=20, second=25))

    classes = dict(cosine=CosineDecaySchedule, polynomial=PolynomialSchedule,
                   constant=ConstantSchedule)
    for method, cls in classes.items():
        config.lr_decay_method = method
        schedule = learning_rate_schedule(config, steps_per_epoch=10)
        assert type(schedule) is cls
        assert float(schedule(22)) == close(expected_lr(
            method, 22, peak=0.01, init=0.008, warmup=15, total=30, power=config.poly_lr_power))


def unchecked_config(**values):
    """A config with `values` as a run's config.yaml gives them, before validate_config."""
    return Config(dict(tiny_config().as_dict(), **values))


def test_learning_rate_schedule_rejects_bad_input():
    with pytest.raises(ValueError, match="lr_decay_method must be one of cosine, stepwise, "
                                         "polynomial or constant, got 'exponential'"):
        tiny_config(lr_decay_method="exponential")  # The config refuses it first.
    with pytest.raises(ValueError, match="'exponential'.*cosine.*stepwise.*polynomial.*constant"):
        learning_rate_schedule(unchecked_config(lr_decay_method="exponential"), steps_per_epoch=10)
    with pytest.raises(ValueError, match="steps_per_epoch"):
        learning_rate_schedule(tiny_config(), steps_per_epoch=0)


@pytest.mark.parametrize("name, cls", [("sgd", FusedSGD),
                                       ("adam", FusedAdam),
                                       ("rmsprop", keras.optimizers.RMSprop)])
def test_get_optimizer_types(name, cls):
    optimizer = get_optimizer(tiny_config(optimizer=name, momentum=0.8), steps_per_epoch=10)
    assert type(optimizer) is cls
    assert isinstance(optimizer._learning_rate, CosineDecaySchedule)
    assert optimizer.clipnorm is None and optimizer.global_clipnorm is None
    if name in ("sgd", "rmsprop"):
        assert optimizer.momentum == pytest.approx(0.8)


def test_optimizers_carry_the_config_values():
    adam = get_optimizer(tiny_config(optimizer="adam", momentum=0.8), steps_per_epoch=10)
    assert adam.beta_1 == pytest.approx(0.8)  # The released trainer: beta_1 = momentum.
    rmsprop = get_optimizer(tiny_config(optimizer="rmsprop", momentum=0.7, rmsprop_rho=0.95,
                                        rmsprop_epsilon=0.01), steps_per_epoch=10)
    assert (rmsprop.momentum, rmsprop.rho, rmsprop.epsilon) == (
        pytest.approx(0.7), pytest.approx(0.95), pytest.approx(0.01))
    # Defaults: EfficientNet's released RMSprop (decay 0.9, epsilon 0.001 inside the root).
    default = get_optimizer(tiny_config(optimizer="rmsprop"), steps_per_epoch=10)
    assert (default.rho, default.epsilon) == (pytest.approx(0.9), pytest.approx(1e-3))


def test_optimizer_learning_rate_follows_schedule():
    # warmup 4 steps, total 12: the first applies walk up the warmup ramp.
    config = tiny_config(batch_size=32, lr_warmup_epoch=1.0, num_epochs=3)
    optimizer = get_optimizer(config, steps_per_epoch=4)
    variable = tf.Variable([1.0, 2.0])
    seen = []
    for applied in range(1, 9):
        optimizer.apply_gradients([(tf.zeros_like(variable), variable)])
        assert int(optimizer.iterations) == applied
        # The optimizer evaluates the schedule at the step it is about to take.
        seen.append(float(optimizer.learning_rate))
    expected = [expected_lr("cosine", step, peak=0.04, init=0.008, warmup=4, total=12)
                for step in range(8)]
    assert seen == [close(value) for value in expected]
    assert float(optimizer._learning_rate(optimizer.iterations)) == close(
        expected_lr("cosine", 8, peak=0.04, init=0.008, warmup=4, total=12))


def test_get_optimizer_rejects_unknown_names():
    with pytest.raises(ValueError, match="optimizer must be one of sgd, adam or rmsprop, got 'lamb'"):
        tiny_config(optimizer="lamb")  # The config refuses it first.
    with pytest.raises(ValueError, match="'lamb'.*sgd.*adam.*rmsprop"):
        get_optimizer(unchecked_config(optimizer="lamb"), steps_per_epoch=10)
    with pytest.raises(ValueError, match="'linear'"):
        get_optimizer(unchecked_config(lr_decay_method="linear"), steps_per_epoch=10)


def test_float16_wraps_in_loss_scale_optimizer():
    optimizer = get_optimizer(tiny_config(mixed_precision="float16"), steps_per_epoch=10)
    assert isinstance(optimizer, keras.mixed_precision.LossScaleOptimizer)
    assert optimizer.dynamic
    assert type(optimizer.inner_optimizer) is FusedSGD
    for precision in (False, "bfloat16"):
        plain = get_optimizer(tiny_config(mixed_precision=precision), steps_per_epoch=10)
        assert not isinstance(plain, keras.mixed_precision.LossScaleOptimizer)


def test_loss_scale_is_dynamic_or_a_fixed_number():
    for value in (None, "dynamic"):
        optimizer = get_optimizer(tiny_config(mixed_precision="float16", loss_scale=value),
                                  steps_per_epoch=10)
        assert optimizer.dynamic and float(optimizer.loss_scale) == 2.0 ** 15
    fixed = get_optimizer(tiny_config(mixed_precision="float16", loss_scale=128),
                          steps_per_epoch=10)
    assert not fixed.dynamic and float(fixed.loss_scale) == 128.0
    for bad in (0, -4, "static", True):
        with pytest.raises(ValueError, match="loss_scale must be null or dynamic"):
            tiny_config(loss_scale=bad)


def _clipped(grads, clip_norm, per_tensor):
    out, _ = clip_gradients([None if g is None else tf.constant(g) for g in grads], clip_norm,
                            per_tensor)
    return [None if g is None else g.numpy().tolist() for g in out]


def test_clip_gradients_global_norm_by_hand():
    grads = [[3.0, 4.0], [0.0, 0.5], None]  # Norms 5 and 0.5; global sqrt(25.25).
    scale = 1.0 / math.sqrt(25.25)
    assert _clipped(grads, 1.0, per_tensor=False) == [
        [close(3.0 * scale), close(4.0 * scale)], [0.0, close(0.5 * scale)], None]
    for off in (None, 0.0, -1.0):
        assert _clipped(grads, off, per_tensor=True) == [[3.0, 4.0], [0.0, 0.5], None]


def test_clip_gradients_per_tensor_then_global_by_hand():
    # Each tensor first: [3, 4] -> [0.6, 0.8]; [0, 0.5] stays. The global norm is then
    # sqrt(1.25) > 1, so everything is scaled by 1 / sqrt(1.25).
    scale = 1.0 / math.sqrt(1.25)
    assert _clipped([[3.0, 4.0], [0.0, 0.5], None], 1.0, per_tensor=True) == [
        [close(0.6 * scale), close(0.8 * scale)], [0.0, close(0.5 * scale)], None]
    # Within both limits nothing changes; an all-zero gradient stays zero.
    assert _clipped([[0.3, 0.4], [0.0, 0.5], [0.0, 0.0]], 1.0, per_tensor=True) == [
        [close(0.3), close(0.4)], [0.0, close(0.5)], [0.0, 0.0]]


def test_clip_gradients_returns_the_norm_before_clipping():
    for clip_norm, per_tensor in ((None, False), (1.0, False), (1.0, True)):
        _, norm = clip_gradients([tf.constant([3.0, 4.0]), None, tf.constant([[0.0, 0.5]])],
                                 clip_norm, per_tensor)
        assert float(norm) == close(math.sqrt(25.25))


@pytest.mark.parametrize("per_tensor", [False, True])
def test_clip_gradients_matches_tensorflow(per_tensor):
    """Against tf.clip_by_norm / tf.clip_by_global_norm on gradients of many sizes."""
    rng = tf.random.Generator.from_seed(3)
    grads = [rng.normal(shape) * scale for shape, scale in
             (([3, 3, 8, 16], 0.5), ([16], 4.0), ([1, 1, 16, 32], 0.01), ([7], 0.0))]
    reference = [tf.clip_by_norm(g, 0.9) for g in grads] if per_tensor else grads
    reference, _ = tf.clip_by_global_norm(reference, 0.9)
    clipped, norm = clip_gradients(grads, 0.9, per_tensor)
    assert float(norm) == pytest.approx(float(tf.linalg.global_norm(grads)), rel=1e-6)
    for ours, theirs in zip(clipped, reference):
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-8)


def test_clip_gradients_non_finite_norm_gives_nan():
    """As tf.clip_by_global_norm: an infinite norm makes every gradient NaN (so a
    LossScaleOptimizer skips the step), never a silent zero update."""
    clipped, norm = clip_gradients([tf.constant([float("inf"), 1.0]), tf.constant([1.0])], 1.0)
    assert not np.isfinite(float(norm))
    assert all(np.isnan(g.numpy()).all() for g in clipped)


def _train_steps(optimizer, steps=4):
    """Variables after `steps` updates with fixed gradients (one dense 2-D, one vector)."""
    variables = [tf.Variable([[1.0, -2.0], [0.5, 3.0]]), tf.Variable([0.1, -0.2, 0.3])]
    grads = [tf.constant([[0.3, -0.1], [2.0, 0.0]]), tf.constant([-1.0, 0.5, 0.25])]

    @tf.function
    def step(scale):
        optimizer.apply_gradients(zip([g * scale for g in grads], variables))

    for i in range(steps):
        step(tf.constant(1.0 + i))
    return [v.numpy() for v in variables]


@pytest.mark.parametrize("fused, plain", [
    (lambda lr: FusedSGD(lr, momentum=0.9), lambda lr: keras.optimizers.SGD(lr, momentum=0.9)),
    (lambda lr: FusedAdam(lr, beta_1=0.8), lambda lr: keras.optimizers.Adam(lr, beta_1=0.8))])
def test_fused_optimizers_make_keras_updates(fused, plain):
    schedule = make_schedule("cosine", peak=0.1, init=0.01, warmup=2, total=6)
    expected = _train_steps(plain(schedule))
    # float32 rounding of a different order of operations (Adam's bias correction in the
    # kernel): 1e-5 against updates of about 0.1, where a wrong formula differs by 1e-2.
    for ours, theirs in zip(_train_steps(fused(schedule)), expected):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)
    assert not np.allclose(expected[0], [[1.0, -2.0], [0.5, 3.0]])  # Steps were taken.


def test_fused_optimizers_keep_keras_slot_names():
    """Checkpoints of runs made with Keras's SGD and Adam restore into the fused ones."""
    for fused, plain in ((FusedSGD(0.1, momentum=0.9), keras.optimizers.SGD(0.1, momentum=0.9)),
                         (FusedAdam(0.1), keras.optimizers.Adam(0.1))):
        variables = [tf.Variable([1.0, 2.0], name="w")]
        fused.build(variables)
        plain.build(variables)
        assert [v.name for v in fused.variables] == [v.name for v in plain.variables]


@pytest.mark.parametrize("key, value", [("rmsprop_rho", 1.0), ("rmsprop_epsilon", 0.0),
                                        ("clip_gradients_per_tensor", "yes")])
def test_optimizer_keys_are_validated(key, value):
    from efficientdet_keras import validate_config
    config = tiny_config()
    with pytest.raises(ValueError, match=key):
        config[key] = value  # Direct assignment: no type coercion, the same check.
    values = config.as_dict()  # A config built from values is checked by validate_config.
    values[key] = value
    with pytest.raises(ValueError, match=key):
        validate_config(Config(values))
