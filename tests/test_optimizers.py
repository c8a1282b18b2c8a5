"""Learning-rate schedules and optimizers, checked against formulas written here with `math`."""

import math

import pytest
import tensorflow as tf
import tf_keras as keras

from conftest import tiny_config
from efficientdet_keras.training.optimizers import (
    DEFAULT_BATCH_SIZE, ConstantSchedule, CosineDecaySchedule, PolynomialSchedule,
    StepwiseSchedule, get_optimizer, learning_rate_schedule, scaled_learning_rates)

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


@pytest.mark.parametrize("batch_size, peak, init", [(64, 0.08, 0.008), (8, 0.01, 0.001),
                                                     (256, 0.32, 0.032)])
def test_scaled_learning_rates(batch_size, peak, init):
    assert DEFAULT_BATCH_SIZE == 64
    got_peak, got_init = scaled_learning_rates(tiny_config(batch_size=batch_size))
    assert got_peak == pytest.approx(peak, rel=1e-12)
    assert got_init == pytest.approx(init, rel=1e-12)


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


def test_learning_rate_schedule_from_config():
    config = tiny_config(batch_size=8, lr_warmup_epoch=1.5, num_epochs=3, first_lr_drop_epoch=2.0,
                         second_lr_drop_epoch=2.5, lr_decay_method="stepwise")
    schedule = learning_rate_schedule(config, steps_per_epoch=10)
    assert isinstance(schedule, StepwiseSchedule)
    assert (schedule.warmup_steps, schedule.total_steps) == (15, 30)
    assert (schedule.first_drop_step, schedule.second_drop_step) == (20, 25)
    for step in [0, 7, 15, 19, 20, 25, 40]:
        assert float(schedule(step)) == close(expected_lr(
            "stepwise", step, peak=0.01, init=0.001, warmup=15, total=30, first=20, second=25))

    classes = dict(cosine=CosineDecaySchedule, polynomial=PolynomialSchedule,
                   constant=ConstantSchedule)
    for method, cls in classes.items():
        config.lr_decay_method = method
        schedule = learning_rate_schedule(config, steps_per_epoch=10)
        assert type(schedule) is cls
        assert float(schedule(22)) == close(expected_lr(
            method, 22, peak=0.01, init=0.001, warmup=15, total=30, power=config.poly_lr_power))


def test_learning_rate_schedule_rejects_bad_input():
    with pytest.raises(ValueError, match="'exponential'.*cosine.*stepwise.*polynomial.*constant"):
        learning_rate_schedule(tiny_config(lr_decay_method="exponential"), steps_per_epoch=10)
    with pytest.raises(ValueError, match="steps_per_epoch"):
        learning_rate_schedule(tiny_config(), steps_per_epoch=0)


@pytest.mark.parametrize("name, cls", [("sgd", keras.optimizers.SGD),
                                       ("adam", keras.optimizers.Adam),
                                       ("rmsprop", keras.optimizers.RMSprop)])
def test_get_optimizer_types(name, cls):
    optimizer = get_optimizer(tiny_config(optimizer=name, momentum=0.8), steps_per_epoch=10)
    assert type(optimizer) is cls
    assert isinstance(optimizer._learning_rate, CosineDecaySchedule)
    assert optimizer.clipnorm is None and optimizer.global_clipnorm is None
    if name in ("sgd", "rmsprop"):
        assert optimizer.momentum == pytest.approx(0.8)


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
    expected = [expected_lr("cosine", step, peak=0.04, init=0.004, warmup=4, total=12)
                for step in range(8)]
    assert seen == [close(value) for value in expected]
    assert float(optimizer._learning_rate(optimizer.iterations)) == close(
        expected_lr("cosine", 8, peak=0.04, init=0.004, warmup=4, total=12))


def test_get_optimizer_rejects_unknown_names():
    with pytest.raises(ValueError, match="'lamb'.*sgd.*adam.*rmsprop"):
        get_optimizer(tiny_config(optimizer="lamb"), steps_per_epoch=10)
    with pytest.raises(ValueError, match="'linear'"):
        get_optimizer(tiny_config(lr_decay_method="linear"), steps_per_epoch=10)


def test_float16_wraps_in_loss_scale_optimizer():
    optimizer = get_optimizer(tiny_config(mixed_precision="float16"), steps_per_epoch=10)
    assert isinstance(optimizer, keras.mixed_precision.LossScaleOptimizer)
    assert optimizer.dynamic
    assert type(optimizer.inner_optimizer) is keras.optimizers.SGD
    for precision in (False, "bfloat16"):
        plain = get_optimizer(tiny_config(mixed_precision=precision), steps_per_epoch=10)
        assert not isinstance(plain, keras.mixed_precision.LossScaleOptimizer)
