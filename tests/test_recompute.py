"""Gradient checkpointing (grad_checkpoint, model/recompute.py): the same step as without it."""

import contextlib

import numpy as np
import pytest
import tensorflow as tf

import efficientdet_keras.model  # noqa: F401  (imports the model package before the backbone)
from helpers import tiny_config
from efficientdet_keras import Config
from efficientdet_keras.model.efficientnet import EfficientNetBackbone
from efficientdet_keras.model import recompute


def _backbone(grad_checkpoint, **overrides):
    config = tiny_config(image_size=64, grad_checkpoint=grad_checkpoint,
                         backbone_survival_prob=1.0, **overrides)
    backbone = EfficientNetBackbone(config)
    images = tf.random.stateless_normal([2, 64, 64, 3], [1, 2])
    backbone(images)
    for index, variable in enumerate(backbone.weights):  # The same non-trivial weights in both.
        noise = tf.random.stateless_normal(variable.shape, [3, index]) * 0.1
        variable.assign(noise + (1.0 if variable.name.endswith(("gamma:0", "variance:0")) else 0.0))
    return backbone, images


def _training_step(backbone, images):
    """One forward in training mode and the gradients of a loss of all five feature maps."""
    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.add_n([tf.reduce_sum(tf.square(f)) for f in backbone(images, training=True)])
        return loss, tape.gradient(loss, backbone.trainable_weights)
    loss, grads = step()
    statistics = [v.numpy() for v in backbone.weights if "moving" in v.name]
    return float(loss), [g.numpy() for g in grads], statistics


def test_checkpointed_backbone_gives_the_plain_gradients_and_statistics(monkeypatch):
    plain_backbone, images = _backbone(False)
    initial = [v.numpy() for v in plain_backbone.weights if "moving" in v.name]
    plain = _training_step(plain_backbone, images)
    checkpointed = _training_step(*_backbone(True))
    assert checkpointed[0] == pytest.approx(plain[0], rel=1e-6)
    for ours, theirs in zip(checkpointed[1], plain[1]):
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-6 * np.abs(theirs).max())
    for ours, theirs, before in zip(checkpointed[2], plain[2], initial):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-7)
    assert any(not np.allclose(after, before) for after, before in zip(plain[2], initial))
    # The recomputation really runs: without the freeze it moves the statistics a second time.
    monkeypatch.setattr(recompute, "moving_statistics_frozen",
                        lambda batch_norms: contextlib.nullcontext())
    twice = _training_step(*_backbone(True))
    assert any(not np.allclose(ours, theirs, rtol=1e-3)
               for ours, theirs in zip(twice[2], plain[2]))


@pytest.mark.slow
def test_checkpointed_backbone_under_two_replicas(two_cpu_strategy):
    """MirroredStrategy builds each replica's step on its own thread: one replica's
    recomputation must not freeze the other's forward (nor fail on its freeze). With
    synchronised BatchNorm both replicas see the global batch, so the statistics and the
    summed gradients must equal those without checkpointing."""
    results = []
    for grad_checkpoint in (False, True):
        with two_cpu_strategy.scope():
            backbone, images = _backbone(grad_checkpoint, sync_batch_norm=True)

        @tf.function
        def step():
            def replica_step(x):
                with tf.GradientTape() as tape:
                    loss = tf.add_n([tf.reduce_sum(tf.square(f))
                                     for f in backbone(x, training=True)])
                return tape.gradient(loss, backbone.trainable_weights)
            per_replica = two_cpu_strategy.run(replica_step, args=(
                two_cpu_strategy.experimental_distribute_values_from_function(
                    lambda context: images[context.replica_id_in_sync_group::2]),))
            return [two_cpu_strategy.reduce("SUM", g, axis=None) for g in per_replica]

        grads = [g.numpy() for g in step()]
        results.append((grads, [v.numpy() for v in backbone.weights if "moving" in v.name]))
    (plain_grads, plain_stats), (grads, stats) = results
    for ours, theirs in zip(grads, plain_grads):
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-6 * np.abs(theirs).max())
    for ours, theirs in zip(stats, plain_stats):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-7)


@pytest.mark.quick
def test_recomputed_block_reuses_the_drop_connect_mask():
    backbone, _ = _backbone(False)
    block = backbone.blocks[2]  # 24 -> 24 channels, stride 1: it has the residual.
    assert block.has_residual
    x = tf.random.stateless_normal([2, 16, 16, 24], [5, 6])
    keep = tf.constant([1.0, 0.0])[:, None, None, None]

    def output_and_grads(call):
        @tf.function
        def run():
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = call(x)
                loss = tf.reduce_sum(y * tf.sin(y))
            return y, tape.gradient(loss, [x] + block.trainable_weights)
        return run()

    kwargs = dict(training=True, survival_prob=0.5, keep=keep)
    y_plain, grads_plain = output_and_grads(lambda t: block(t, **kwargs))
    y_ours, grads_ours = output_and_grads(lambda t: recompute.recomputed_call(block, t, **kwargs))
    np.testing.assert_allclose(y_ours.numpy(), y_plain.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y_ours[1].numpy(), x[1].numpy())  # Dropped: the input alone.
    for ours, theirs in zip(grads_ours, grads_plain):
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-4,
                                   atol=1e-6 * np.abs(theirs.numpy()).max())


def test_grad_checkpoint_is_validated():
    from efficientdet_keras import validate_config
    with pytest.raises(ValueError, match="grad_checkpoint cannot be combined with "
                                         "batch_norm_renorm"):
        validate_config(tiny_config(grad_checkpoint=True, batch_norm_renorm=True))
    with pytest.raises(ValueError, match="model_optimizations.quantize"):
        validate_config(tiny_config(grad_checkpoint=True, model_optimizations={"quantize": {}}))
    with pytest.raises(ValueError, match="grad_checkpoint must be true or false"):
        tiny_config()["grad_checkpoint"] = "yes"
    with pytest.raises(ValueError, match="grad_checkpoint must be true or false"):
        validate_config(Config(dict(tiny_config().as_dict(), grad_checkpoint="yes")))
