"""BatchNorm folding for inference: each BatchNorm becomes part of the conv before it.

In inference a BatchNorm is a per-channel affine map, y = s * z + t with
s = gamma / sqrt(moving_variance + epsilon) and t = beta - moving_mean * s. A conv
followed by it equals one conv whose output channels are scaled by s, with bias
b * s + t. The folded network then runs conv + bias + activation, which oneDNN (CPU)
and cuDNN (GPU) fuse into one kernel, instead of conv, BatchNorm and activation.

Layers that own (conv, BatchNorm) pairs list them in `conv_bn_pairs()`, in the same
order whether folded or not; the heads, whose convs are shared by all levels while each
level has its own BatchNorm, get one conv per level when folded.
"""

import tensorflow as tf
import tf_keras as keras

from efficientdet_keras.model.efficientdet import EfficientDetNet


def can_fold(config) -> bool:
    """Folding needs a plain float model: quantization-aware and pruning wrappers keep
    their own BatchNorm handling (the TFLite converter folds those)."""
    return not config.get("model_optimizations") and not config.get("fold_batch_norm")


def fold_batch_norms(model: EfficientDetNet, mixed_precision=None) -> EfficientDetNet:
    """A new inference-only EfficientDetNet that computes what `model` computes in
    inference mode (to float rounding), with no BatchNorm layers.

    Uses the values `model` holds now (swap in the EMA weights first to fold those). The
    result has one conv per level in the heads and cannot be trained or saved as a
    training checkpoint; export and evaluate it. `mixed_precision` (a config value such as
    "bfloat16") sets the folded model's compute precision; None keeps the model's.
    """
    if not can_fold(model.config):
        raise ValueError("fold_batch_norms needs a model without model_optimizations that is "
                         "not folded already")
    model.build_variables()
    folded = EfficientDetNet(config=_folded_config(model.config, mixed_precision),
                             name=model.name)
    folded.build_variables()
    fold_into(model, folded)
    return folded


def fold_into(model: EfficientDetNet, folded: EfficientDetNet) -> None:
    """Sets the variables of `folded` (from an earlier fold_batch_norms of a model of the same
    config) to `model`'s current values, folded: re-folding after a new checkpoint keeps
    the folded model's traced functions."""
    folded_ids = set()
    for (conv, bn), (folded_conv, _) in zip(_pairs(model), _pairs(folded), strict=True):
        if not conv.built:  # A resampling conv that the model's channel counts never call.
            continue
        for variable, value in _folded_conv_values(conv, bn, folded_conv):
            variable.assign(tf.cast(value, variable.dtype))
            folded_ids.add(id(variable))
    _copy_other_variables(model, folded, folded_ids)


def _folded_config(config, mixed_precision):
    folded_config = config.copy()
    folded_config.override({"fold_batch_norm": True})
    if mixed_precision is not None:
        folded_config.override({"mixed_precision": mixed_precision})
    return folded_config


def _pairs(model):
    """Every (conv, BatchNorm or Identity) pair of the model, in layer order."""
    return [pair for layer in model._flatten_layers(include_self=False)
            if hasattr(layer, "conv_bn_pairs") for pair in layer.conv_bn_pairs()]


def _scale_and_shift(bn: keras.layers.BatchNormalization):
    """The per-channel (s, t) with bn(z) = s * z + t in inference mode, in float32."""
    variance = tf.cast(bn.moving_variance, tf.float32)
    scale = tf.math.rsqrt(variance + bn.epsilon)
    if bn.gamma is not None:
        scale *= tf.cast(bn.gamma, tf.float32)
    shift = -tf.cast(bn.moving_mean, tf.float32) * scale
    if bn.beta is not None:
        shift += tf.cast(bn.beta, tf.float32)
    return scale, shift


def _folded_conv_values(conv, bn, folded_conv):
    """[(variable of folded_conv, its value)]: conv's kernels with bn folded in.

    Conv2D kernels are [kh, kw, in, out] and SeparableConv2D pointwise kernels
    [1, 1, in, out]: output channels scale along the last axis. DepthwiseConv2D kernels are
    [kh, kw, in, multiplier] with output channel in * multiplier + m.
    """
    scale, shift = _scale_and_shift(bn)
    bias = conv.bias if conv.use_bias else tf.zeros_like(shift)
    values = [(folded_conv.bias, bias * scale + shift)]
    if isinstance(conv, keras.layers.SeparableConv2D):
        values += [(folded_conv.depthwise_kernel, conv.depthwise_kernel),
                   (folded_conv.pointwise_kernel, conv.pointwise_kernel * scale)]
    elif isinstance(conv, keras.layers.DepthwiseConv2D):
        kernel = conv.depthwise_kernel
        values.append((folded_conv.depthwise_kernel,
                       kernel * tf.reshape(scale, kernel.shape[2:])))
    elif isinstance(conv, keras.layers.Conv2D):
        values.append((folded_conv.kernel, conv.kernel * scale))
    else:
        raise TypeError("cannot fold a BatchNorm into %s (%s)" % (conv.name, type(conv).__name__))
    return values


def _copy_other_variables(model, folded, folded_ids) -> None:
    """Copies every variable the folding did not set, matched by name (the released names,
    the same in both models)."""
    sources = {variable.name: variable for variable in model.weights}
    for variable in folded.weights:
        if id(variable) in folded_ids:
            continue
        if variable.name not in sources:
            raise ValueError("fold_batch_norms: no variable %s in %s"
                             % (variable.name, model.name))
        variable.assign(sources[variable.name])
