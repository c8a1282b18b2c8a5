"""Training under tf.distribute: EMA and SyncBatchNorm on two replicas, with and without XLA.

Two logical CPUs (tests/conftest.py) stand in for two GPUs: MirroredStrategy runs the same
collectives over them. One model is trained on one replica and on two, from the same initial
weights and on the same global batch, and the runs must agree.

XLA: on GPUs MirroredStrategy compiles each replica's step on its own device and the step
runs without merge_call; on CPUs it compiles all replicas into one function on the first
device, which XLA cannot do (any mirrored variable fails: "Trying to access resource
.../replica_1 ... located in device CPU:1 from device CPU:0"), and XLA on CPU has no
collective all-reduce either, so a whole distributed XLA train step cannot run here. The
EMA test below makes the logical CPUs take the GPU path and runs the EMA update in
XLA-compiled replica steps without all-reduce.
"""

import os
import subprocess
import time

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras
from tensorflow.python.distribute import mirrored_run, mirrored_strategy

from helpers import REPO_ROOT, python, tiny_config
from efficientdet_keras import EfficientDetNet, restore_ckpt
from efficientdet_keras.checkpoint import EMA_SUFFIX, variable_name
from efficientdet_keras.data.pipeline import InputPipeline
from efficientdet_keras.data.sources import TFRecordSource
from efficientdet_keras.data.synthetic import write_synthetic_dataset
from efficientdet_keras.model.layers import batch_norm, uses_sync_batch_norm
from efficientdet_keras.training.ema import ExponentialMovingAverage
from efficientdet_keras.training.runtime import default_precision
from efficientdet_keras.training.trainer import EfficientDetNetTrain

STEPS = 2


def distributed_config(**overrides):
    """Small BiFPN and heads at 64 px, trained with training-mode BatchNorm and an EMA that
    moves; the backbone is frozen (its BatchNorms in inference mode), which shortens the trace
    (no backbone gradients)."""
    values = dict(image_size=64, num_classes=4, fpn_num_filters=16, fpn_cell_repeats=1,
                  box_class_repeats=1, batch_size=4, backbone_survival_prob=1.0,
                  moving_average_decay=0.5, jitter_min=1.0, jitter_max=1.0,
                  input_rand_hflip=False, is_training_bn=True, var_freeze_expr="efficientnet")
    values.update(overrides)
    return tiny_config(**values)


def batch_norms(model):
    return [layer for layer in model.submodules
            if isinstance(layer, keras.layers.BatchNormalization)]


def state(model):
    """{name: value} of the weights, BatchNorm statistics and EMA averages (cross-replica
    reads: the statistics are the mean over the replicas)."""
    values = {variable_name(v): v.numpy() for v in model.variables}
    values.update({"ema/" + name: value.numpy()
                   for name, value in model.ema.values_by_name().items()})
    return values


def train(model, batch, run_eagerly=False):
    model.compile(optimizer=keras.optimizers.SGD(0.1), run_eagerly=run_eagerly)
    model.fit(tf.data.Dataset.from_tensors(batch).repeat(STEPS), epochs=1, verbose=0)
    assert int(model.optimizer.iterations) == STEPS
    return state(model)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, two_cpu_strategy):
    """{run name: (model, state after STEPS steps)} for one replica and for two replicas;
    both start from the same weights and see the same global batch."""
    data = write_synthetic_dataset(str(tmp_path_factory.mktemp("distribute_data")),
                                   num_train=4, num_val=1, image_size=64, seed=5)
    # One replica computes the statistics with SyncBatchNorm's formula too (E[x^2] - E[x]^2,
    # not the fused kernel's), so the runs differ only in being distributed.
    config = distributed_config(sync_batch_norm=True)
    pipeline = InputPipeline(config, TFRecordSource(data.train_tfrecord), is_training=True,
                             batch_size=config.batch_size, seed=0)
    batch = next(iter(pipeline()))

    single = EfficientDetNetTrain(config)
    initial = [v.numpy() for v in single.variables]
    results = {"initial": (None, {variable_name(v): value
                                  for v, value in zip(single.variables, initial)})}
    # Eager: the reference needs no trace of its own, which would be slow.
    results["one replica"] = (single, train(single, batch, run_eagerly=True))
    with two_cpu_strategy.scope():
        model = EfficientDetNetTrain(config.copy().override({"sync_batch_norm": None}))
        for variable, value in zip(model.variables, initial):
            variable.assign(value)
        model.ema.reset_to_model()
    results["two replicas"] = (model, train(model, batch))
    return results


def test_sync_batch_norm_follows_the_replica_count(runs, two_cpu_strategy):
    # sync_batch_norm: null (the default) syncs only when built under several replicas.
    assert all(bn.synchronized for bn in batch_norms(runs["two replicas"][0]))
    auto, off = distributed_config(), distributed_config(sync_batch_norm=False)
    assert not uses_sync_batch_norm(auto)
    with two_cpu_strategy.scope():
        assert uses_sync_batch_norm(auto) and not uses_sync_batch_norm(off)


def test_two_replicas_with_sync_batch_norm_and_ema_match_one(runs):
    """Weights, BatchNorm moving statistics and EMA averages after STEPS steps on two
    replicas (training-mode SyncBatchNorm) equal one replica's on the same global batch."""
    initial, expected, actual = (runs[name][1] for name in ("initial", "one replica",
                                                            "two replicas"))
    assert expected.keys() == actual.keys()
    for name, value in expected.items():
        np.testing.assert_allclose(actual[name], value, rtol=1e-4, atol=1e-5, err_msg=name)
    # The check has teeth: the statistics and the averages moved away from the start.
    # (the largest move over the class net's BatchNorms: a single layer's mean may move by
    # less than the tolerance above, depending on the random initial weights.)
    for suffix in ("/moving_mean", "/moving_variance"):
        names = [n for n in initial if n.startswith("class_net") and n.endswith(suffix)]
        assert max(np.abs(expected[n] - initial[n]).max() for n in names) > 1e-4, suffix
        assert max(np.abs(expected["ema/" + n] - initial[n]).max() for n in names) > 1e-5, suffix
    kernel = "class_net/class-predict/pointwise_kernel"
    assert not np.allclose(expected["ema/" + kernel], initial[kernel], atol=1e-6)
    assert not np.allclose(expected["ema/" + kernel], expected[kernel], atol=1e-6)


def test_sync_batch_norm_key_is_validated():
    with pytest.raises(ValueError, match="sync_batch_norm must be null"):
        tiny_config(sync_batch_norm="yes")


def test_released_checkpoint_loads_into_a_sync_batch_norm_model(reference_dir, two_cpu_strategy):
    """SyncBatchNorm keeps BatchNorm's variable names: the released D0 loads by name into a
    model built on two replicas."""
    folder = reference_dir("efficientdet-d0")
    with two_cpu_strategy.scope():
        model = EfficientDetNet("efficientdet-d0")
        model.build_variables()
    assert all(bn.synchronized for bn in batch_norms(model))
    report = restore_ckpt(model, folder, use_ema=True, skip_mismatch=False)
    assert len(report.loaded_from_ema) == len(model.variables) and not report.skipped
    reader = tf.train.load_checkpoint(folder)
    statistic = model.class_net.bns[0][0].moving_variance  # Synchronised on read: the mean.
    np.testing.assert_array_equal(
        statistic.numpy(), reader.get_tensor(variable_name(statistic) + EMA_SUFFIX))


def test_sync_batch_norm_with_renorm_matches_one_replica(two_cpu_strategy):
    """batch_norm_renorm and SyncBatchNorm together: two replicas normalise, renormalise and
    move every statistic as one replica does on the whole batch."""
    config = tiny_config(batch_norm_renorm=True, batch_norm_momentum=0.5)
    images = tf.random.stateless_normal([4, 3, 3, 2], seed=[1, 2]) * 3.0 + 1.0
    images = tf.concat([images[:2], images[2:] * 4.0], axis=0)  # The halves differ a lot.

    def run(strategy):
        with strategy.scope():
            layer = batch_norm(config, "bn")
            layer.build(images.shape)
        step = tf.function(lambda x: layer(x, training=True), autograph=False)
        dataset = strategy.experimental_distribute_dataset(
            tf.data.Dataset.from_tensors(images).repeat(STEPS))
        for batch in dataset:
            outputs = strategy.gather(strategy.run(step, args=(batch,)), axis=0)
        return layer, outputs.numpy(), {variable_name(v): v.numpy() for v in layer.weights}

    single, single_outputs, expected = run(tf.distribute.get_strategy())
    mirrored, outputs, actual = run(two_cpu_strategy)
    assert mirrored.synchronized and mirrored.renorm and not single.synchronized
    np.testing.assert_allclose(outputs, single_outputs, rtol=1e-5, atol=1e-5)
    assert expected.keys() == actual.keys() and any("renorm_mean" in n for n in expected)
    for name, value in expected.items():
        np.testing.assert_allclose(actual[name], value, rtol=1e-5, atol=1e-6, err_msg=name)


def test_ema_updates_in_xla_compiled_replica_steps(two_cpu_strategy, monkeypatch):
    """The EMA update runs inside each replica's XLA-compiled step, where GPUs have no
    merge_call; a weight written alike on every replica and a BatchNorm statistic that
    differs per replica average as on one replica (the statistic's average reads as the
    mean over the replicas)."""
    for module in (mirrored_run, mirrored_strategy):  # Take the GPU path on the CPUs.
        monkeypatch.setattr(module, "_is_gpu_device", lambda device: True)
    strategy = two_cpu_strategy
    with strategy.scope():
        model = keras.Sequential([keras.layers.Dense(2), keras.layers.BatchNormalization()])
        model.build([None, 3])
        ema = ExponentialMovingAverage(model, decay=0.5)
    kernel, moving_mean = model.layers[0].kernel, model.layers[1].moving_mean

    @tf.function(jit_compile=True)
    def replica_step(shift, step):
        assert not tf.distribute.get_replica_context().strategy.extended._use_merge_call()
        kernel.assign_add(tf.ones_like(kernel))  # As the optimizer: the same on each replica.
        moving_mean.assign_add(shift * tf.ones_like(moving_mean))  # Per replica.
        ema.update(step)

    @tf.function
    def train_step(shift, step):
        strategy.run(replica_step, args=(shift, step))

    # Replica r moves its statistic by r + 1: the mean moves by 1.5 per step.
    shifts = strategy.experimental_distribute_values_from_function(
        lambda context: tf.constant(float(context.replica_id_in_sync_group + 1)))
    expected_kernel, expected_mean = kernel.numpy(), moving_mean.numpy()
    kernel_average, mean_average = expected_kernel.copy(), expected_mean.copy()
    for step in range(STEPS):
        train_step(shifts, tf.constant(step, tf.int64))
        decay = min(0.5, (1.0 + step) / (10.0 + step))
        expected_kernel, expected_mean = expected_kernel + 1.0, expected_mean + 1.5
        kernel_average = decay * kernel_average + (1 - decay) * expected_kernel
        mean_average = decay * mean_average + (1 - decay) * expected_mean
    np.testing.assert_allclose(moving_mean.numpy(), expected_mean, rtol=1e-6)
    np.testing.assert_allclose(ema.shadow_of(kernel).numpy(), kernel_average, rtol=1e-6)
    np.testing.assert_allclose(ema.shadow_of(moving_mean).numpy(), mean_average, rtol=1e-6)
    for shadow in strategy.experimental_local_results(ema.shadow_of(kernel)):
        np.testing.assert_allclose(shadow.numpy(), kernel_average, rtol=1e-6)


@pytest.mark.parametrize("strategy,configured,expected", [
    ("tpu", None, "bfloat16"),       # Unset: TPUs default to bfloat16...
    ("tpu", False, False),           # ...unless the config or a flag says otherwise.
    ("tpu", "float16", "float16"),
    ("gpus", None, False),           # Elsewhere unset stays float32.
    ("", "bfloat16", "bfloat16"),
])
def test_precision_default_depends_on_the_strategy(strategy, configured, expected):
    assert default_precision(strategy, configured) == expected


def test_unreachable_tpu_fails_fast_with_one_line(tmp_path):
    started = time.monotonic()
    result = subprocess.run(
        [python(), os.path.join(REPO_ROOT, "tools", "train.py"), "--demo",
         "--model_dir=%s" % (tmp_path / "run"), "--strategy=tpu", "--tpu=grpc://127.0.0.1:1"],
        capture_output=True, text=True, timeout=120)
    assert time.monotonic() - started < 60
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("efficientdet-train: no TPU reachable at grpc://127.0.0.1:1: ")
    assert "refused" in lines[-1].lower(), lines[-1]
    assert "Traceback" not in result.stderr
