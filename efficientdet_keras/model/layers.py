"""Small building blocks shared by the backbone, the BiFPN and the heads."""

import math

import tensorflow as tf
import tf_keras as keras

from efficientdet_keras.config import ACTIVATIONS
from efficientdet_keras.model.batch_norm_mode import training_mode_of_batch_norm
from efficientdet_keras.optimization import quantize_output


def activation_fn(x: tf.Tensor, act_type: str) -> tf.Tensor:
    """Applies the activation named by the config's `act_type`."""
    if act_type in ("swish", "silu"):
        return tf.nn.silu(x)
    if act_type == "swish_native":
        # The same function from plain ops (no fused kernel, gradient by autodiff), for
        # runtimes and converters that lack the fused op.
        return x * tf.sigmoid(x)
    if act_type == "relu":
        return tf.nn.relu(x)
    if act_type == "relu6":
        return tf.nn.relu6(x)
    if act_type == "hswish":
        return x * tf.nn.relu6(x + 3.0) / 6.0
    if act_type == "leaky_relu":
        return tf.nn.leaky_relu(x, alpha=0.1)
    if act_type == "mish":
        return x * tf.math.tanh(tf.math.softplus(x))
    raise ValueError("Unknown act_type %r; choose one of %s" % (act_type, ", ".join(ACTIVATIONS)))


class ActivationOutput(keras.layers.Layer):
    """Applies `act_type` (None: nothing); a layer so that QAT can fake-quantize its output."""

    def __init__(self, act_type=None, **kwargs):
        super().__init__(**kwargs)
        self.act_type = act_type

    def call(self, x):
        return x if self.act_type is None else activation_fn(x, self.act_type)


def output_point(config, name: str, act_type=None, dtype=None) -> keras.layers.Layer:
    """The activation `act_type` (or identity) at a tensor that int8 TFLite stores quantized.

    With `model_optimizations: {quantize: ...}` the output gets a learned int8 range.
    """
    return quantize_output(ActivationOutput(act_type, name=name, dtype=dtype), config)


def conv_kernel_initializer() -> keras.initializers.Initializer:
    """He-normal on fan-out, as EfficientNet trains with (keeps activations stable)."""
    return keras.initializers.VarianceScaling(scale=2.0, mode="fan_out", distribution="untruncated_normal")


def class_bias_initializer(prior_probability: float = 0.01) -> keras.initializers.Initializer:
    """Bias that makes every anchor start with score `prior_probability` (focal-loss paper)."""
    return keras.initializers.Constant(-math.log((1 - prior_probability) / prior_probability))


# Batch Renormalization's limits on its corrections r (a ratio of deviations) and d (a
# shift in deviations), the values the paper (Ioffe, 2017) settles at after warm-up.
RENORM_CLIPPING = {"rmin": 1.0 / 3.0, "rmax": 3.0, "dmax": 5.0}


def uses_sync_batch_norm(config) -> bool:
    """Whether BatchNorm built now synchronises its batch statistics across replicas.

    config.sync_batch_norm true or false decides; null (the default) means on when the
    model is built under a strategy with more than one replica (several GPUs, workers or
    TPU cores), as the released trainer did: each replica then normalises with the mean and
    variance of the global batch, not of its own few images.
    """
    sync = config.get("sync_batch_norm")
    if sync is None:
        return tf.distribute.get_strategy().num_replicas_in_sync > 1
    return bool(sync)


def folds_batch_norm(config) -> bool:
    """Whether the model is built for inference with BatchNorm folded into its convs."""
    return bool(config.get("fold_batch_norm", False))


def conv_uses_bias(config, use_bias: bool) -> bool:
    """A conv followed by BatchNorm gets a bias when the BatchNorm is folded into it."""
    return use_bias or folds_batch_norm(config)


def batch_norm(config, name: str, dtype=None) -> keras.layers.Layer:
    """BatchNorm with the config's momentum and epsilon (and Batch Renormalization when
    config.batch_norm_renorm: training-mode outputs corrected towards the moving statistics,
    which inference uses, with the same momentum), synchronised across replicas when
    `uses_sync_batch_norm(config)`. The variables are the same either way, so checkpoints
    load into both.

    With config.fold_batch_norm it is an identity: the conv before it carries its scale and
    shift (model/folding.py), so inference runs conv + bias + activation, which oneDNN and
    cuDNN fuse into one kernel."""
    if folds_batch_norm(config):
        return keras.layers.Identity(name=name, dtype=dtype)
    renorm = bool(config.get("batch_norm_renorm", False))
    return keras.layers.BatchNormalization(
        momentum=config.batch_norm_momentum, epsilon=config.batch_norm_epsilon,
        renorm=renorm, renorm_clipping=dict(RENORM_CLIPPING) if renorm else None,
        renorm_momentum=config.batch_norm_momentum, synchronized=uses_sync_batch_norm(config),
        name=name, dtype=dtype)


def uses_drop_connect(training: bool, survival_prob) -> bool:
    return bool(training) and survival_prob is not None and survival_prob < 1.0


def drop_connect_keep(x: tf.Tensor, survival_prob: float) -> tf.Tensor:
    """A random [batch, 1, 1, 1] mask for `x`: 1 with probability survival_prob, else 0."""
    batch = tf.shape(x)[0]
    return tf.floor(survival_prob + tf.random.uniform([batch, 1, 1, 1], dtype=x.dtype))


def drop_connect(x: tf.Tensor, training: bool, survival_prob: float,
                 keep: tf.Tensor = None) -> tf.Tensor:
    """Drops whole examples of a residual branch with probability 1 - survival_prob.

    Kept examples are scaled by 1 / survival_prob so the expectation is unchanged. `keep`
    (drop_connect_keep) gives the mask instead of a fresh random one.
    """
    if not uses_drop_connect(training, survival_prob):
        return x
    if keep is None:
        keep = drop_connect_keep(x, survival_prob)
    return x / survival_prob * keep


def bn_training(training, config):
    """BatchNorm runs in training mode only when training and `is_training_bn` allow it, and
    then as `moving_statistics_while` (batch_norm_mode.py) says: True or a boolean tensor."""
    if not (bool(training) and bool(config.is_training_bn)):
        return False
    return training_mode_of_batch_norm()
