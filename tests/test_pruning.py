"""Pruning from config: settings, released names, training with the trainer's callbacks,
EMA and backups, and the sparsity of what is exported."""

import os

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from helpers import absl_info_messages, tiny_config
from test_model import model_vars, read_vars_tsv
from efficientdet_keras import EfficientDetNet, restore_ckpt
from efficientdet_keras.checkpoint import variable_name
from efficientdet_keras.config import default_config, validate_config
from efficientdet_keras.data.pipeline import InputPipeline
from efficientdet_keras.data.sources import TFRecordSource
from efficientdet_keras.data.synthetic import write_synthetic_dataset
from efficientdet_keras.checkpoint import wrapper_state_variables
from efficientdet_keras.config.optimization_settings import resolve_prune_settings
from efficientdet_keras.optimization.pruning import wrap_layer
from efficientdet_keras.optimization.pruning_keras import (PRUNED_WEIGHTS, PrunedLayer,
                                                           pruned_kernels, pruning_wrappers)

STEPS_PER_EPOCH, EPOCHS = 1, 2
PRUNE = dict(target_sparsity=0.5, begin_step=0, end_step=2, frequency=1,
             keep_dense=".*/class-predict/.*")


def config_with(prune):
    config = default_config()
    config.override({"model_optimizations": {"prune": prune}})
    return config


@pytest.mark.quick
@pytest.mark.parametrize("prune, message", [
    ({"target_sparsity": 0.5}, "model_optimizations.prune.end_step must be given"),
    ({"end_step": 10, "sparsity": 0.5}, "model_optimizations.prune.sparsity is not a pruning"),
    ({"end_step": 10, "target_sparsity": 1.0}, "model_optimizations.prune.target_sparsity must"),
    ({"end_step": 10, "schedule": "cubic"}, "model_optimizations.prune.schedule must be one of"),
    ({"end_step": 5, "begin_step": 5}, "model_optimizations.prune.end_step must be an integer >"),
    ({"end_step": 10, "frequency": 0}, "model_optimizations.prune.frequency must"),
    ({"schedule": "constant_sparsity", "power": 2}, "model_optimizations.prune.power must be "
     "left out"),
    ({"end_step": 10, "keep_dense": "class-(predict"}, "model_optimizations.prune.keep_dense "
     "'class-(predict' is not a valid regex"),
])
def test_bad_settings_name_the_key(prune, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        validate_config(config_with(prune))


def test_settings_defaults_and_hparams_string():
    config = default_config()
    config.override("model_optimizations.prune.target_sparsity=0.6,"
                    "model_optimizations.prune.end_step=40")
    config.override({"model_optimizations": {"prune": {"frequency": 5}}})  # Merged, not replaced.
    settings = resolve_prune_settings(config.model_optimizations["prune"])
    assert settings == dict(schedule="polynomial_decay", target_sparsity=0.6, begin_step=0,
                            end_step=40, frequency=5, initial_sparsity=0.0, power=3.0,
                            keep_dense=None)
    constant = resolve_prune_settings({"schedule": "constant_sparsity"})
    assert constant["end_step"] == -1  # tfmot: prune until training ends.


@pytest.mark.quick
def test_wrapped_weights_are_those_tfmot_prunes():
    """Our table of pruned weights agrees with tfmot's registry (read through its own
    prune_low_magnitude), and the layers it prunes nothing of stay unwrapped."""
    import tensorflow_model_optimization as tfmot
    settings = {"end_step": 4}
    for layer_type, expected in PRUNED_WEIGHTS.items():
        reference = tfmot.sparsity.keras.prune_low_magnitude(layer_type(4, 3, name="conv"))
        ours = wrap_layer(layer_type(4, 3, name="conv"), settings)
        for wrapper in (reference, ours):
            wrapper(tf.zeros([1, 8, 8, 3]))
        weight_names = [w.name.split("/")[-1][:-2] for w in reference.prunable_weights]
        assert weight_names == list(expected)
        assert isinstance(ours, PrunedLayer) and ours.name == "conv"
        assert [variable_name(w) for w in ours.prunable_weights] == ["conv/" + expected[0]]
    depthwise = tfmot.sparsity.keras.prune_low_magnitude(keras.layers.DepthwiseConv2D(3))
    depthwise(tf.zeros([1, 8, 8, 3]))
    assert depthwise.prunable_weights == []
    plain = keras.layers.DepthwiseConv2D(3)
    assert wrap_layer(plain, settings) is plain


def test_pruned_d0_keeps_the_released_names_and_loads_every_variable(reference_dir):
    path = reference_dir("efficientdet-d0")
    reference = read_vars_tsv(os.path.join(path, "vars.tsv"))  # {name: (shape, trainable)}
    config = tiny_config(num_classes=90)
    config.model_optimizations = {"prune": {"end_step": 100, "keep_dense": ".*-predict/.*"}}
    model = EfficientDetNet(config=config)
    model.build_variables()
    state = wrapper_state_variables(model)
    state_names = {variable_name(v) for v in model.variables if id(v) in state}
    released = {name: value for name, value in model_vars(model).items()
                if name not in state_names}
    assert released == reference
    pruned = [variable_name(kernel) for kernel, _ in pruned_kernels(model)]
    # Every conv and separable-conv kernel except keep_dense's; no depthwise kernel.
    assert set(pruned) == {name for name in reference if name.endswith(("/kernel",
                           "/pointwise_kernel")) and "-predict/" not in name}
    masks = {variable_name(mask) for _, mask in pruned_kernels(model)}
    assert masks == {name.rsplit("/", 1)[0] + "/mask" for name in pruned}

    report = restore_ckpt(model, path, use_ema=True, skip_mismatch=False)
    assert not report.missing and not report.skipped
    assert report.model_variables == len(reference)
    reader = tf.train.load_checkpoint(path)
    kernel = pruned[0]
    np.testing.assert_array_equal(
        next(v for v in model.variables if variable_name(v) == kernel).numpy(),
        reader.get_tensor(kernel + "/ExponentialMovingAverage"))


@pytest.fixture(scope="module")
def pruned_run(tmp_path_factory):
    """A small model pruned for 2 steps (2 epochs of 1) by fit with get_callbacks.

    Eager steps: tracing the train step would cost a minute; graph mode is covered by
    test_mask_update_once_per_step_in_a_tf_function.
    """
    from efficientdet_keras.training.callbacks import get_callbacks
    from efficientdet_keras.training.trainer import EfficientDetNetTrain
    root = tmp_path_factory.mktemp("pruning")
    data = write_synthetic_dataset(str(root / "data"), num_train=4, num_val=1, image_size=64,
                                   seed=5)
    config = tiny_config(image_size=64, fpn_num_filters=16, fpn_cell_repeats=1,
                         box_class_repeats=1, batch_size=2, moving_average_decay=0.9,
                         backbone_survival_prob=1.0, model_optimizations={"prune": PRUNE})
    model = EfficientDetNetTrain(config)
    model.compile(steps_per_epoch=STEPS_PER_EPOCH, run_eagerly=True)
    train = InputPipeline(config, TFRecordSource(data.train_tfrecord), is_training=True, seed=0)
    model_dir = str(root / "run")
    model.fit(train(), epochs=EPOCHS, steps_per_epoch=STEPS_PER_EPOCH, verbose=0,
              callbacks=get_callbacks(config, model_dir))
    return model, model_dir


def near_target(zeros: int, size: int) -> bool:
    """tfmot keeps round(size * (1 - target)) weights: the target within one weight, counted
    in weights (a ratio's rounding puts a count exactly one weight off on either side)."""
    return abs(zeros - PRUNE["target_sparsity"] * size) <= 1.0


def test_training_counts_steps_and_masks_kernels_and_their_averages(pruned_run):
    model, model_dir = pruned_run
    wrappers = pruning_wrappers(model)
    assert wrappers and all(int(w.pruning_step.numpy()) == STEPS_PER_EPOCH * EPOCHS
                            for w in wrappers)
    checkpoint = tf.train.load_checkpoint(os.path.join(model_dir, "ckpt-%d" % EPOCHS))
    for kernel, mask in pruned_kernels(model):
        mask = mask.numpy()
        assert near_target(int(np.sum(mask == 0)), mask.size), variable_name(kernel)
        pruned = mask == 0
        # Raw kernel, its average, and both in the epoch's checkpoint: exactly zero there.
        name = variable_name(kernel)
        for values in (kernel.numpy(), model.ema.shadow_of(kernel).numpy(),
                       checkpoint.get_tensor(name),
                       checkpoint.get_tensor(name + "/ExponentialMovingAverage")):
            assert np.all(values[pruned] == 0), name
            assert np.all(values[~pruned] != 0), name
    kept = "class_net/class-predict/pointwise_kernel"  # keep_dense
    dense = [v for v in model.variables if variable_name(v) == kept]
    assert dense and np.all(dense[0].numpy() != 0)


def test_backup_restores_masks_and_pruning_step(pruned_run):
    from efficientdet_keras.training.backup import BACKUP_DIR, backup_checkpoints_dir
    from efficientdet_keras.training.trainer import EfficientDetNetTrain
    model, model_dir = pruned_run
    resumed = EfficientDetNetTrain(model.config)
    latest = tf.train.latest_checkpoint(
        backup_checkpoints_dir(os.path.join(model_dir, BACKUP_DIR)))
    tf.train.Checkpoint(model=resumed).restore(latest).expect_partial()
    for before, after in zip(pruning_wrappers(model), pruning_wrappers(resumed)):
        assert int(after.pruning_step.numpy()) == STEPS_PER_EPOCH * EPOCHS
        for (_, mask, threshold), (_, mask2, threshold2) in zip(before.pruning_vars,
                                                                 after.pruning_vars):
            np.testing.assert_array_equal(mask.numpy(), mask2.numpy())
            assert float(threshold.numpy()) == float(threshold2.numpy())


def test_pruning_summaries_reach_tensorboard(pruned_run):
    _, model_dir = pruned_run
    metrics_dir = os.path.join(model_dir, "metrics")
    values = {}
    for name in os.listdir(metrics_dir):
        for event in tf.compat.v1.train.summary_iterator(os.path.join(metrics_dir, name)):
            for value in event.summary.value:
                values[(value.tag, event.step)] = float(tf.make_ndarray(value.tensor))
    last_step = STEPS_PER_EPOCH * EPOCHS
    assert abs(values[("pruning/sparsity", last_step)] - PRUNE["target_sparsity"]) < 0.01
    assert ("pruning/sparsity", STEPS_PER_EPOCH) in values
    per_mask = [tag for tag, step in values if tag.endswith("/mask:0/sparsity")]
    assert "class_net/class-0/mask:0/sparsity" in per_mask


def test_export_strips_wrappers_and_reports_the_sparsity(pruned_run, tmp_path):
    from efficientdet_keras.exporters.saved_model import export_detector
    model, _ = pruned_run
    with absl_info_messages() as messages:
        # Unfolded, so the exported kernels are the masked averages themselves (folding
        # scales them by BatchNorm, keeping the zeros; tests/test_folding.py covers it).
        export_detector(model, str(tmp_path / "saved"), fold_batch_norm=False)
    log = "\n".join(messages)
    assert "Exporting the pruned model: 5" in log
    assert "class_net/class-0/pointwise_kernel 50.0%" in log  # Per kernel.

    exported = {variable_name(v): v.numpy()
                for v in tf.saved_model.load(str(tmp_path / "saved")).model_variables}
    assert not any(name.endswith(("/mask", "/threshold", "/pruning_step")) for name in exported)
    zeros = size = 0
    for kernel, mask in pruned_kernels(model):
        values = exported[variable_name(kernel)]
        # The exported kernel is the (masked) moving average.
        np.testing.assert_array_equal(values, model.ema.shadow_of(kernel).numpy() * mask.numpy())
        assert near_target(int(np.sum(values == 0)), values.size), variable_name(kernel)
        zeros, size = zeros + int(np.sum(values == 0)), size + values.size
    assert abs(zeros / size - PRUNE["target_sparsity"]) < 0.005
    state = wrapper_state_variables(model)
    assert set(exported) == {variable_name(v) for v in model.variables if id(v) not in state}


class SharedConv(keras.layers.Layer):
    """Calls one pruned conv twice per forward pass, as the heads do once per level."""

    def __init__(self, settings, **kwargs):
        super().__init__(**kwargs)
        self.conv = wrap_layer(keras.layers.Conv2D(8, 3, padding="same", name="conv"), settings)

    def call(self, x):
        return self.conv(x) + self.conv(x)


class Nested(keras.Model):
    def __init__(self, settings):
        super().__init__()
        self.inner = SharedConv(settings, name="inner")

    def call(self, x, training=False):
        return self.inner(x, training=training)


@pytest.mark.quick
def test_mask_update_once_per_step_in_a_tf_function():
    from efficientdet_keras.optimization.pruning_keras import update_masks
    model = Nested(dict(PRUNE, keep_dense=None, end_step=2, initial_sparsity=0.25))
    model(tf.zeros([1, 4, 4, 8]))
    (kernel, mask), = pruned_kernels(model)
    assert variable_name(kernel).endswith("/inner/conv/kernel")
    assert variable_name(mask).endswith("/inner/conv/mask")

    @tf.function
    def step(number):
        update_masks(model, number)
        return model(tf.ones([1, 4, 4, 8]), training=True)

    # PolynomialDecay from 0.25 at step 0 to 0.5 at step 2: 0.25 + 0.25 * (1 - (1 - s/2)^3).
    for number, sparsity in ((1, 0.25 + 0.25 * 7 / 8), (2, 0.5)):
        step(tf.constant(number, tf.int64))
        assert int(model.inner.conv.pruning_step.numpy()) == number  # Two calls, one step.
        zeros = int(np.sum(mask.numpy() == 0))
        assert zeros == mask.numpy().size - round(mask.numpy().size * (1 - sparsity))
        np.testing.assert_array_equal(kernel.numpy() == 0, mask.numpy() == 0)


def test_mask_update_under_two_replicas(two_cpu_strategy):
    """Both replicas' copies of the kernel and the mask end up pruned alike."""
    from efficientdet_keras.optimization.pruning_keras import update_masks
    with two_cpu_strategy.scope():
        model = Nested(dict(PRUNE, keep_dense=None, end_step=2))
        model(tf.zeros([1, 4, 4, 8]))

    @tf.function
    def step(number):
        def replica_step():
            update_masks(model, number)
            return model(tf.ones([1, 4, 4, 8]), training=True)
        return two_cpu_strategy.run(replica_step)

    step(tf.constant(2, tf.int64))
    (kernel, mask), = pruned_kernels(model)
    masks = [m.numpy() for m in mask.values]
    assert len(masks) == 2 and np.mean(masks[0] == 0) == 0.5
    np.testing.assert_array_equal(masks[0], masks[1])
    for copy in kernel.values:
        np.testing.assert_array_equal(copy.numpy() == 0, masks[0] == 0)
