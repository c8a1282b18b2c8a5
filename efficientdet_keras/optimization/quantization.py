"""Quantization-aware training (QAT) with tensorflow-model-optimization's QuantizeWrapperV2.

`model_optimizations: {quantize: {...}}` settings (all optional):
  per_channel: true   one int8 scale per output channel of each convolution kernel (what
                      TFLite uses for convolutions); false: one scale per kernel.
  range_decay: 0.999  decay of the moving averages that learn each activation range
                      (tfmot's value); lower it for short fine-tuning runs.

tfmot places its fake-quant points by rewriting functional models; this network is
subclassed, so the points are placed where the layers are built, on the tensors that a
full-integer TFLite graph stores in int8 (the converter folds BatchNorm into the
convolution before it and fuses relu/relu6 into it):
  - convolution kernels (`wrap_layer`): symmetric 8-bit, narrow range, per output channel.
    Per-channel symmetric scales commute with the BatchNorm fold (the fold multiplies each
    output channel by one factor), so the converter's re-quantized folded kernels equal the
    trained fake-quantized ones. Depthwise kernels `[k, k, C, 1]` get one scale per channel
    C (tfmot would give one per depth multiplier, i.e. one per kernel).
  - SeparableConv2D (BiFPN and heads of Lite models): tfmot splits it into two layers,
    which would rename its variables; here one wrapper (`SeparableConvQuantizeWrapper`)
    quantizes both kernels and the depthwise output, which TFLite stores as a tensor of
    its own between DEPTHWISE_CONV_2D and CONV_2D.
  - activation outputs (`quantize_output`, after BatchNorm and activation, residual adds,
    feature fusions, predictions and the network input): asymmetric 8-bit ranges learned
    by moving averages.
Every wrapper takes the wrapped layer's name, so the released variable names are kept;
the wrappers' own variables (`<layer>/kernel_min`, `<layer>/output_max`,
`<layer>/optimizer_step`, ...) are wrapper state (see `checkpoint.wrapper_state_variables`).
tfmot 0.8's wrappers quantize from the first step (no quantization delay): fine-tune a
float checkpoint.
"""

from typing import Any, List, Mapping

import tensorflow as tf
import tf_keras as keras
import tensorflow_model_optimization as tfmot
# MovingAvgQuantize is not in tfmot's public API; its decay is fixed in MovingAverageQuantizer.
from tensorflow_model_optimization.python.core.quantization.keras import quant_ops

from efficientdet_keras.config.optimization_settings import (QUANTIZE_DEFAULTS,
                                                             quantize_settings_with_defaults)

QuantizeConfig = tfmot.quantization.keras.QuantizeConfig
QuantizeWrapperV2 = tfmot.quantization.keras.QuantizeWrapperV2
LastValueQuantizer = tfmot.quantization.keras.quantizers.LastValueQuantizer
MovingAverageQuantizer = tfmot.quantization.keras.quantizers.MovingAverageQuantizer

NUM_BITS = 8
_DEFAULT_RANGE_DECAY = QUANTIZE_DEFAULTS["range_decay"]


class DepthwiseKernelQuantizer(LastValueQuantizer):
    """Symmetric int8 quantizer of a depthwise kernel `[k, k, C, M]`, one scale per C*M channel.

    TFLite stores depthwise kernels as `[1, k, k, C*M]` with per-channel scales on the last
    axis; the kernel is reshaped to that layout, quantized per last axis, and reshaped back.
    """

    def __init__(self, per_axis: bool = True):
        super().__init__(num_bits=NUM_BITS, per_axis=per_axis, symmetric=True, narrow_range=True)

    def build(self, tensor_shape, name, layer):
        channels = int(tensor_shape[-2]) * int(tensor_shape[-1])
        shape = (channels,) if self.per_axis else None
        return {"min_var": layer.add_weight(name + "_min", shape=shape, trainable=False,
                                            initializer=keras.initializers.Constant(-6.0)),
                "max_var": layer.add_weight(name + "_max", shape=shape, trainable=False,
                                            initializer=keras.initializers.Constant(6.0))}

    def __call__(self, inputs, training, weights, **kwargs):
        shape = tf.shape(inputs)
        flat = tf.reshape(inputs, [shape[0], shape[1], 1, shape[2] * shape[3]])
        quantized = super().__call__(flat, training, weights, **kwargs)
        return tf.reshape(quantized, shape)

    def get_config(self):
        return {"per_axis": self.per_axis}


class KernelQuantizer(LastValueQuantizer):
    """Symmetric int8 quantizer of a `[k, k, C_in, C_out]` kernel, per C_out when per_axis."""

    def __init__(self, per_axis: bool = True):
        super().__init__(num_bits=NUM_BITS, per_axis=per_axis, symmetric=True, narrow_range=True)

    def build(self, tensor_shape, name, layer):
        shape = (int(tensor_shape[-1]),) if self.per_axis else None
        return {"min_var": layer.add_weight(name + "_min", shape=shape, trainable=False,
                                            initializer=keras.initializers.Constant(-6.0)),
                "max_var": layer.add_weight(name + "_max", shape=shape, trainable=False,
                                            initializer=keras.initializers.Constant(6.0))}

    def get_config(self):
        return {"per_axis": self.per_axis}


class ActivationRangeQuantizer(MovingAverageQuantizer):
    """Asymmetric int8 quantizer of an activation, its range a moving average with `decay`."""

    def __init__(self, decay: float = _DEFAULT_RANGE_DECAY):
        super().__init__(num_bits=NUM_BITS, per_axis=False, symmetric=False, narrow_range=False)
        self.decay = float(decay)

    def __call__(self, inputs, training, weights, **kwargs):
        return quant_ops.MovingAvgQuantize(
            inputs, weights["min_var"], weights["max_var"], ema_decay=self.decay,
            is_training=training, num_bits=self.num_bits, per_channel=False,
            symmetric=False, narrow_range=False)

    def get_config(self):
        return {"decay": self.decay}


class KernelQuantizeConfig(QuantizeConfig):
    """Quantizes the kernels named by `kernel_attrs` (the output is quantized elsewhere)."""

    def __init__(self, kernel_attrs: List[str], per_channel: bool = True):
        self.kernel_attrs = list(kernel_attrs)
        self.per_channel = bool(per_channel)

    def _quantizer(self, attr: str):
        if attr == "depthwise_kernel":
            return DepthwiseKernelQuantizer(self.per_channel)
        return KernelQuantizer(self.per_channel)

    def get_weights_and_quantizers(self, layer):
        return [(getattr(layer, attr), self._quantizer(attr)) for attr in self.kernel_attrs]

    def get_activations_and_quantizers(self, layer):
        return []

    def set_quantize_weights(self, layer, quantize_weights):
        # Past Keras attribute tracking: a tracked assignment would drop the kernel variable
        # from the inner layer's weights (it would then look like wrapper state).
        for attr, weight in zip(self.kernel_attrs, quantize_weights):
            object.__setattr__(layer, attr, weight)

    def set_quantize_activations(self, layer, quantize_activations):
        pass

    def get_output_quantizers(self, layer):
        return []

    def get_config(self):
        return {"kernel_attrs": self.kernel_attrs, "per_channel": self.per_channel}


class OutputQuantizeConfig(QuantizeConfig):
    """Quantizes a layer's output only (activation ranges)."""

    def __init__(self, decay: float = _DEFAULT_RANGE_DECAY):
        self.decay = float(decay)

    def get_weights_and_quantizers(self, layer):
        return []

    def get_activations_and_quantizers(self, layer):
        return []

    def set_quantize_weights(self, layer, quantize_weights):
        pass

    def set_quantize_activations(self, layer, quantize_activations):
        pass

    def get_output_quantizers(self, layer):
        return [ActivationRangeQuantizer(self.decay)]

    def get_config(self):
        return {"decay": self.decay}


class SeparableConvQuantizeWrapper(QuantizeWrapperV2):
    """A SeparableConv2D with both kernels and the depthwise output fake-quantized.

    `[B, H, W, C_in] -> [B, H', W', filters]`, computed as the layer does (depthwise then
    1x1 pointwise, then bias), with the intermediate quantized as TFLite stores it.
    """

    def build(self, input_shape):
        super().build(input_shape)
        self._depthwise_output_quantizer = ActivationRangeQuantizer(self.quantize_config.decay)
        self._depthwise_output_vars = self._depthwise_output_quantizer.build(
            None, "depthwise_output", self)

    def call(self, inputs, training=None):
        if training is None:
            training = keras.backend.learning_phase()
        training = bool(training)
        depthwise, pointwise = [quantizer(weight, training, weights=variables)
                                for weight, quantizer, variables in self._weight_vars]
        layer = self.layer
        strides = (1,) + tuple(layer.strides) + (1,)
        x = tf.nn.depthwise_conv2d(inputs, depthwise, strides, layer.padding.upper(),
                                   dilations=layer.dilation_rate)
        x = self._depthwise_output_quantizer(x, training, weights=self._depthwise_output_vars)
        x = tf.nn.conv2d(x, pointwise, 1, "VALID")
        if layer.use_bias:
            x = tf.nn.bias_add(x, layer.bias)
        return x if layer.activation is None else layer.activation(x)


class SeparableConvQuantizeConfig(KernelQuantizeConfig):
    """Both kernels of a SeparableConv2D; the depthwise output range uses `decay`."""

    def __init__(self, per_channel: bool = True, decay: float = _DEFAULT_RANGE_DECAY):
        super().__init__(["depthwise_kernel", "pointwise_kernel"], per_channel)
        self.decay = float(decay)

    def get_config(self):
        return {"per_channel": self.per_channel, "decay": self.decay}


def wrap_layer(layer, settings: Mapping[str, Any]):
    """A convolution wrapped for QAT under its own name (other layers unchanged).

    Conv2D and DepthwiseConv2D get their kernel fake-quantized, SeparableConv2D both
    kernels and its depthwise output. The output is quantized by the `quantize_output`
    point the model places after the BatchNorm and activation that follow.
    """
    settings = quantize_settings_with_defaults(settings)
    per_channel = settings["per_channel"]
    if isinstance(layer, keras.layers.SeparableConv2D):
        return SeparableConvQuantizeWrapper(
            layer, SeparableConvQuantizeConfig(per_channel, settings["range_decay"]),
            name=layer.name)
    if isinstance(layer, keras.layers.DepthwiseConv2D):
        return QuantizeWrapperV2(layer, KernelQuantizeConfig(["depthwise_kernel"], per_channel),
                                 name=layer.name)
    if isinstance(layer, keras.layers.Conv2D):
        return QuantizeWrapperV2(layer, KernelQuantizeConfig(["kernel"], per_channel),
                                 name=layer.name)
    return layer


def quantize_output(layer, settings: Mapping[str, Any]):
    """`layer` (no variables of its own, e.g. an activation) with its output fake-quantized."""
    decay = quantize_settings_with_defaults(settings)["range_decay"]
    return QuantizeWrapperV2(layer, OutputQuantizeConfig(decay), name=layer.name)

