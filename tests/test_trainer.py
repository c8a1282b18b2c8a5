
import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras
from tensorflow.core.protobuf import rewriter_config_pb2
from tensorflow.python.eager import context

from helpers import keras_seeded, tiny_config
from efficientdet_keras.checkpoint import variable_name
from efficientdet_keras.data.pipeline import InputPipeline
from efficientdet_keras.data.sources import TFRecordSource
from efficientdet_keras.data.synthetic import write_synthetic_dataset
from efficientdet_keras.training.ema import ExponentialMovingAverage
from efficientdet_keras.training.grappler import CPU_PASSES_OFF, resolve_passes
from efficientdet_keras.training.optimizers import (CosineDecaySchedule, FusedSGD,
                                                   learning_rate_schedule)
from efficientdet_keras.training.trainer import EfficientDetNetTrain


def small_config(**overrides):
    """A block per backbone stage, small heads, 64 px: quick to trace and run."""
    values = dict(image_size=64, num_classes=4, fpn_num_filters=16, fpn_cell_repeats=1,
                  backbone_blocks_per_stage=1,
                  box_class_repeats=1, batch_size=4, backbone_survival_prob=1.0,
                  moving_average_decay=0.9, num_epochs=2, map_freq=1, jitter_min=1.0,
                  jitter_max=1.0, input_rand_hflip=False)
    values.update(overrides)
    return tiny_config(**values)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_synthetic_dataset(str(tmp_path_factory.mktemp("trainer_data")), num_train=16,
                                   num_val=8, image_size=64, seed=11)


def one_batch(config, data, batch_size=4):
    pipeline = InputPipeline(config, TFRecordSource(data.train_tfrecord), is_training=True,
                             batch_size=batch_size, seed=0)
    return next(iter(pipeline()))


def weights(model):
    return {variable_name(v): v.numpy().copy() for v in model.variables}


def model_starting_at(config, values=None):
    """EfficientDetNetTrain(config) with its variables set to `values` (None: its own initial
    ones), and the values it starts from."""
    model = EfficientDetNetTrain(config)
    for variable, value in zip(model.variables, values or []):
        variable.assign(value)
    return model, [v.numpy() for v in model.variables]


@pytest.mark.quick
def test_compile_builds_optimizer_and_schedule_from_config():
    model = EfficientDetNetTrain(small_config())
    model.compile(steps_per_epoch=10)
    assert isinstance(model.optimizer, keras.optimizers.SGD)
    schedule = learning_rate_schedule(model.config, 10)
    assert isinstance(schedule, CosineDecaySchedule)
    assert float(model.optimizer.learning_rate) == pytest.approx(float(schedule(0)))
    assert float(schedule(0)) == pytest.approx(0.008)  # Warm-up start, not scaled to batch 4.
    assert model.optimizer.momentum == pytest.approx(0.9)
    custom = keras.optimizers.Adam(1e-3)
    model.compile(optimizer=custom)
    assert model.optimizer is custom
    with pytest.raises(ValueError, match="steps_per_epoch"):
        EfficientDetNetTrain(small_config()).compile()


@pytest.mark.quick
def test_l2_covers_conv_kernels_of_trained_variables_only():
    model = EfficientDetNetTrain(small_config(var_freeze_expr="efficientnet", weight_decay=1e-3))
    trained = model.variables_to_train
    assert trained and not any(variable_name(v).startswith("efficientnet") for v in trained)
    expected = sum(0.5 * float(np.sum(v.numpy() ** 2)) for v in trained
                   if variable_name(v).endswith("kernel"))
    assert float(model.l2_loss(trained)) == pytest.approx(1e-3 * expected, rel=1e-5)
    assert not any("bias" in variable_name(v) or "gamma" in variable_name(v)
                   for v in trained if variable_name(v).endswith("kernel"))


def test_train_step_logs_learns_and_respects_frozen_variables(data):
    config = small_config(var_freeze_expr="efficientnet", learning_rate=0.5)
    model = EfficientDetNetTrain(config)
    model.compile(steps_per_epoch=5)
    batch = one_batch(config, data)
    before = weights(model)
    first = model.train_on_batch(*batch, return_dict=True)
    for name in ("loss", "det_loss", "cls_loss", "box_loss", "reg_l2_loss", "gradient_norm",
                 "learning_rate"):
        assert np.isfinite(first[name]), name
    assert first["loss"] == pytest.approx(first["det_loss"] + first["reg_l2_loss"], rel=1e-5)
    for _ in range(8):
        last = model.train_on_batch(*batch, return_dict=True)
    model.reset_metrics()
    assert model.test_on_batch(*batch, return_dict=True)["det_loss"] < first["det_loss"]
    after = weights(model)
    backbone = [n for n in before if n.startswith("efficientnet")]
    heads = [n for n in before if n.startswith("class_net") and "moving" not in n]
    assert all(np.array_equal(before[n], after[n]) for n in backbone)  # Incl. BN statistics.
    assert any(not np.array_equal(before[n], after[n]) for n in heads)
    assert int(model.optimizer.iterations) == 9 and np.isfinite(last["loss"])


def test_gradient_clipping_by_global_norm(data):
    config = small_config(clip_gradients_norm=1e-3, moving_average_decay=0.0)
    model = EfficientDetNetTrain(config)
    model.compile(optimizer=keras.optimizers.SGD(1.0))
    batch = one_batch(config, data)
    before = {variable_name(v): v.numpy() for v in model.variables_to_train}
    logs = model.train_on_batch(*batch, return_dict=True)
    update = np.sqrt(sum(np.sum((v.numpy() - before[variable_name(v)]) ** 2)
                         for v in model.variables_to_train))
    assert logs["gradient_norm"] > 1e-2  # The raw norm is logged before clipping...
    assert update == pytest.approx(1e-3, rel=1e-3)  # ...and the step is clipped to the limit.


@pytest.mark.slow  # test_recompute keeps the checkpointed gradients in make test.
def test_grad_checkpoint_makes_the_same_training_step(data):
    """Gradient checkpointing recomputes the backbone in the backward pass: one fit step with
    it leaves every variable (weights, BatchNorm statistics, optimizer slots, EMA) as without."""
    results = []
    for grad_checkpoint in (False, True):
        tf.random.set_seed(1)
        config = small_config(grad_checkpoint=grad_checkpoint)
        model, initial = model_starting_at(config, results[0][1] if results else None)
        model.compile(steps_per_epoch=10)
        logs = model.train_on_batch(*one_batch(config, data), return_dict=True)
        results.append((logs, initial, weights(model), model.optimizer.variables))
    (plain_logs, _, plain, plain_slots), (logs, initial, ours, slots) = results
    assert logs["det_loss"] == pytest.approx(plain_logs["det_loss"], rel=1e-5)
    assert logs["gradient_norm"] == pytest.approx(plain_logs["gradient_norm"], rel=1e-4)
    for name, value in plain.items():
        np.testing.assert_allclose(ours[name], value, rtol=1e-4, atol=1e-6, err_msg=name)
    for ours_slot, plain_slot in zip(slots, plain_slots):
        np.testing.assert_allclose(ours_slot.numpy(), plain_slot.numpy(), rtol=1e-3, atol=1e-7)
    assert sum(not np.array_equal(a, b) for a, b in zip(initial, ours.values())) > 100


@pytest.mark.parametrize("grad_checkpoint", [False, True], ids=["plain", "grad_checkpoint"])
def test_the_last_batch_norm_fixed_epochs_train_with_the_moving_statistics(data, grad_checkpoint):
    """batch_norm_fixed_epochs=1 of 2, two steps an epoch: steps 1-2 normalise with the
    batch's statistics and update the moving ones; steps 3-4 leave them as they are and
    normalise with them, so their training loss is the inference-mode loss of the same
    weights, while the other weights (gamma and beta too) go on learning."""
    config = small_config(num_epochs=2, batch_norm_fixed_epochs=1, learning_rate=0.5,
                          grad_checkpoint=grad_checkpoint)
    with keras_seeded(0):  # The same start in every run: the losses below are repeatable.
        model = EfficientDetNetTrain(config)
    model.compile(steps_per_epoch=2)
    batch = one_batch(config, data)
    statistics = [n for n in weights(model) if "moving_" in n]
    gammas = [n for n in weights(model) if n.endswith("gamma")]
    assert statistics and gammas
    batch_statistics_effect = []
    for step in range(1, 5):
        before = weights(model)
        model.reset_metrics()
        inference_loss = model.test_on_batch(*batch, return_dict=True)["det_loss"]
        model.reset_metrics()
        training_loss = model.train_on_batch(*batch, return_dict=True)["det_loss"]
        after = weights(model)
        moved = [n for n in statistics if not np.array_equal(before[n], after[n])]
        assert any(not np.array_equal(before[n], after[n]) for n in gammas), step
        if step <= 2:
            assert len(moved) == len(statistics), step
            batch_statistics_effect.append(abs(training_loss - inference_loss) / inference_loss)
        else:
            assert moved == [], step
            assert training_loss == pytest.approx(inference_loss, rel=1e-5), step
    # Batch statistics change the loss by 0.2-15% a step from random starts; one step's
    # change can come near 0 by chance, both steps' together do not.
    assert max(batch_statistics_effect) > 1e-2, batch_statistics_effect


@pytest.mark.quick
def test_batch_norm_fixed_epochs_need_steps_per_epoch_and_a_part_of_the_run_before_them(caplog):
    model = EfficientDetNetTrain(small_config(batch_norm_fixed_epochs=0.5))
    with pytest.raises(ValueError, match=r"^batch_norm_fixed_epochs=0.5 needs steps_per_epoch"):
        model.compile(optimizer=keras.optimizers.Adam(1e-3))
    model.compile(steps_per_epoch=10)
    assert model._batch_norm_fixed_from == 15.0  # noqa: SLF001 (2 epochs of 10, the last half)
    # A one-epoch run of a preset that fixes its last epoch (`--demo --num_epochs=1`): the
    # statistics would never have followed a batch, so the key stands down and says so.
    whole = EfficientDetNetTrain(small_config(num_epochs=1, batch_norm_fixed_epochs=1))
    with caplog.at_level("WARNING"):
        whole.compile(steps_per_epoch=10)
    assert whole._batch_norm_fixed_from is None  # noqa: SLF001
    assert "batch_norm_fixed_epochs=1 covers all 1 epochs" in caplog.text


def rewrite_options():
    """The Grappler options of the tf.function calls this thread makes now."""
    serialized = context.context().function_call_options.config_proto_serialized
    return tf.compat.v1.ConfigProto.FromString(serialized).graph_options.rewrite_options


@pytest.mark.slow
def test_fit_and_evaluate_run_with_the_grappler_passes_off_and_the_same_results(data):
    """grappler_off: the train and test steps of fit run without those passes, and so does
    evaluate; the thread's options are back after; the step's results do not change."""
    before = rewrite_options()
    off = ["memory_optimization", "arithmetic_optimization", "second_iteration"]
    seen, results = {}, []

    class Record(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            seen["train"] = rewrite_options()

        def on_test_batch_end(self, batch, logs=None):
            seen["test"] = rewrite_options()

    for setting in ([], off):
        config = small_config(grappler_off=setting)
        model, initial = model_starting_at(config, results[0][1] if results else None)
        model.compile(steps_per_epoch=1)
        batches = tf.data.Dataset.from_tensors(one_batch(config, data)).repeat()
        history = model.fit(batches, epochs=1, steps_per_epoch=1, validation_data=batches,
                            validation_steps=1, callbacks=[Record()], verbose=0)
        evaluated = model.evaluate(batches, steps=1, callbacks=[Record()], return_dict=True,
                                   verbose=0)
        results.append((history.history, initial, weights(model), evaluated))
        assert rewrite_options() == before
        for step in ("train", "test"):
            expected = tf.compat.v1.ConfigProto().graph_options.rewrite_options
            expected.CopyFrom(before)
            if setting:
                expected.memory_optimization = rewriter_config_pb2.RewriterConfig.NO_MEM_OPT
                expected.arithmetic_optimization = rewriter_config_pb2.RewriterConfig.OFF
                expected.meta_optimizer_iterations = rewriter_config_pb2.RewriterConfig.ONE
            assert seen[step] == expected, step
    (plain_history, _, plain, plain_eval), (history, _, ours, evaluated) = results
    # rel 1e-4 for the gradient norm: with arithmetic optimization off, its float32 sum over
    # hundreds of gradients runs in another order, as the weights' rtol allows.
    for key, rel in (("det_loss", 1e-5), ("val_det_loss", 1e-5), ("gradient_norm", 1e-4)):
        assert history[key][0] == pytest.approx(plain_history[key][0], rel=rel), key
    assert evaluated["det_loss"] == pytest.approx(plain_eval["det_loss"], rel=1e-5)
    for name, value in plain.items():
        np.testing.assert_allclose(ours[name], value, rtol=1e-4, atol=1e-6, err_msg=name)


@pytest.mark.quick
def test_grappler_off_auto_and_bad_names():
    from efficientdet_keras import get_efficientdet_config
    assert resolve_passes("auto") == CPU_PASSES_OFF  # This machine has no GPU or TPU.
    assert resolve_passes(None) == () and resolve_passes([]) == ()
    assert resolve_passes("remapping") == ("remapping",)
    with pytest.raises(ValueError, match="grappler_off.*'fast'"):
        resolve_passes(["fast"])
    with pytest.raises(ValueError, match="grappler_off must be auto, none or a list"):
        get_efficientdet_config("efficientdet-d0").override({"grappler_off": ["fast"]})
    config = get_efficientdet_config("efficientdet-d0")
    assert config.grappler_off == "auto"
    config.override("grappler_off=none")  # The docs' spelling for every pass on.
    assert resolve_passes(config.grappler_off) == ()
    config.override({"grappler_off": ["memory_optimization", "remapping"]})  # YAML's list.
    assert resolve_passes(config.grappler_off) == ("memory_optimization", "remapping")


@pytest.mark.parametrize("make_optimizer", [
    pytest.param(lambda: keras.optimizers.SGD(0.1), marks=pytest.mark.slow),
    lambda: FusedSGD(0.1, momentum=0.9)],
                         ids=["keras_sgd", "fused_sgd"])
def test_two_replicas_make_the_same_update_as_one(data, two_cpu_strategy, make_optimizer):
    # BatchNorm in inference mode: per-replica batch statistics would differ by design.
    config = small_config(is_training_bn=False, moving_average_decay=0.0)
    batch = one_batch(config, data, batch_size=4)
    single = EfficientDetNetTrain(config)
    initial = [v.numpy() for v in single.variables]
    single.compile(optimizer=make_optimizer())
    single_logs = single.train_on_batch(*batch, return_dict=True)

    strategy = two_cpu_strategy
    with strategy.scope():
        mirrored = EfficientDetNetTrain(config)
        for v, value in zip(mirrored.variables, initial):
            v.assign(value)
        mirrored.compile(optimizer=make_optimizer())
    dataset = tf.data.Dataset.from_tensors(batch)
    history = mirrored.fit(dataset, epochs=1, verbose=0)
    assert history.history["det_loss"][0] == pytest.approx(single_logs["det_loss"], rel=1e-4)
    for a, b in zip(single.variables, mirrored.variables):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-6,
                                   err_msg=variable_name(a))


@pytest.mark.parametrize("precision", [pytest.param("bfloat16", marks=pytest.mark.slow),
                                       "float16"])
def test_mixed_precision_steps(data, precision):
    config = small_config(mixed_precision=precision)
    model = EfficientDetNetTrain(config)
    model.compile(steps_per_epoch=5)
    if precision == "float16":
        assert isinstance(model.optimizer, keras.mixed_precision.LossScaleOptimizer)
    images, labels = one_batch(config, data)
    assert images.dtype == tf.as_dtype(precision)
    logs = model.train_on_batch(images, labels, return_dict=True)
    assert np.isfinite(logs["loss"])
    class_outputs, _ = model(images)
    assert class_outputs[0].dtype == tf.float32


@pytest.mark.slow  # test_gpu_kernels.TestOneDevice keeps XLA-compiled steps in make test.
def test_xla_and_steps_per_execution_from_config(data):
    # The backbone frozen: XLA compiles its forward pass but no gradients through it, which
    # cuts the compile (most of this test) by more than half and keeps what is checked here.
    config = small_config(jit_compile=True, steps_per_execution=2,
                          var_freeze_expr="efficientnet")
    model = EfficientDetNetTrain(config)
    model.compile(steps_per_epoch=4)
    assert model._jit_compile and int(model._steps_per_execution) == 2
    dataset = tf.data.Dataset.from_tensors(one_batch(config, data)).repeat()
    history = model.fit(dataset, epochs=1, steps_per_epoch=4, verbose=0)
    assert np.isfinite(history.history["loss"][0]) and int(model.optimizer.iterations) == 4


@pytest.mark.quick
def test_ema_follows_the_warmup_rule():
    layer = keras.layers.Dense(2)
    model = keras.Sequential([layer])
    model.build([None, 3])
    with pytest.raises(ValueError, match="decay must be in"):
        ExponentialMovingAverage(model, decay=0.0)
    ema = ExponentialMovingAverage(model, decay=0.9)
    start = layer.kernel.numpy().copy()
    layer.kernel.assign(start + 1.0)
    ema.update(tf.constant(0))  # decay = min(0.9, 1/10) = 0.1
    np.testing.assert_allclose(ema.shadows[0].numpy(), 0.1 * start + 0.9 * (start + 1.0), rtol=1e-6, atol=1e-6)
    ema.update(tf.constant(1000))  # decay = 0.9
    expected = 0.9 * (0.1 * start + 0.9 * (start + 1.0)) + 0.1 * (start + 1.0)
    np.testing.assert_allclose(ema.shadows[0].numpy(), expected, rtol=1e-6, atol=1e-6)
    layer.kernel.assign(start + 5.0)
    kept = ema.shadows[0].numpy().copy()
    ema.update(tf.constant(1001), apply=tf.constant(False))  # A skipped (non-finite) step.
    np.testing.assert_array_equal(ema.shadows[0].numpy(), kept)  # Exactly as it was.
    layer.kernel.assign(start + 1.0)
    raw = layer.kernel.numpy().copy()
    with ema.swapped_in():
        np.testing.assert_allclose(layer.kernel.numpy(), expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(layer.kernel.numpy(), raw)


@pytest.mark.quick
def test_the_average_of_a_constant_weight_is_that_weight_exactly():
    """Averaging a weight that does not move changes nothing, to the last bit, at any decay
    (a proximal-gradient form of the update, (shadow + weight * r / (1 - r)) * (1 - r), moves
    it in its last bits at every step)."""
    layer = keras.layers.Dense(64)
    model = keras.Sequential([layer])
    model.build([None, 64])
    layer.kernel.assign(tf.random.stateless_normal([64, 64], seed=[3, 4]) * 1e3)
    ema = ExponentialMovingAverage(model, decay=0.9998)
    for step in (0, 7, 5000, 10 ** 6):
        ema.update(tf.constant(step))
        np.testing.assert_array_equal(ema.shadow_of(layer.kernel).numpy(), layer.kernel.numpy())
