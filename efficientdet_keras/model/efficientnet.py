"""EfficientNet b0-b7 and EfficientNet-Lite 0-4 as EfficientDet backbones.

Only the feature extractor is built (stem and MBConv blocks; no classification
head). Variable names follow the released checkpoints:
`efficientnet-b0/stem/conv2d/kernel`, `efficientnet-b0/blocks_3/se/conv2d/bias`,
`efficientnet-b0/blocks_3/tpu_batch_normalization_1/gamma`, ...
"""

import dataclasses
import math
from typing import Dict, List, Optional, Tuple

import tensorflow as tf
import tf_keras as keras

from efficientdet_keras.model.layers import (activation_fn, batch_norm, bn_training,
                                             conv_kernel_initializer, conv_uses_bias, drop_connect,
                                             drop_connect_keep, output_point, uses_drop_connect)
from efficientdet_keras.model.recompute import recomputed_call
from efficientdet_keras.optimization import wrap_layer


@dataclasses.dataclass(frozen=True)
class BlockArgs:
    """One stage of MBConv blocks, before width and depth scaling."""
    num_repeat: int
    kernel_size: int
    stride: int
    expand_ratio: int
    input_filters: int
    output_filters: int
    se_ratio: Optional[float] = 0.25


# The EfficientNet-B0 stages (the paper's Table 1).
BASE_STAGES: Tuple[BlockArgs, ...] = (
    BlockArgs(1, 3, 1, 1, 32, 16),
    BlockArgs(2, 3, 2, 6, 16, 24),
    BlockArgs(2, 5, 2, 6, 24, 40),
    BlockArgs(3, 3, 2, 6, 40, 80),
    BlockArgs(3, 5, 1, 6, 80, 112),
    BlockArgs(4, 5, 2, 6, 112, 192),
    BlockArgs(1, 3, 1, 6, 192, 320),
)

# name: (width coefficient, depth coefficient).
SCALING = {
    "efficientnet-b0": (1.0, 1.0),
    "efficientnet-b1": (1.0, 1.1),
    "efficientnet-b2": (1.1, 1.2),
    "efficientnet-b3": (1.2, 1.4),
    "efficientnet-b4": (1.4, 1.8),
    "efficientnet-b5": (1.6, 2.2),
    "efficientnet-b6": (1.8, 2.6),
    "efficientnet-b7": (2.0, 3.1),
    "efficientnet-lite0": (1.0, 1.0),
    "efficientnet-lite1": (1.0, 1.1),
    "efficientnet-lite2": (1.1, 1.2),
    "efficientnet-lite3": (1.2, 1.4),
    "efficientnet-lite4": (1.4, 1.8),
}

STEM_FILTERS = 32

# Survival probability of the last block when `backbone_survival_prob` is None.
DEFAULT_SURVIVAL_PROB = 0.8
# The released EfficientDet turns drop-connect off for these backbones (D0's b0).
NO_DROP_CONNECT_BACKBONES = ("efficientnet-b0",)


def is_lite(backbone_name: str) -> bool:
    """Lite backbones drop squeeze-excite and keep the stem and first/last stage unscaled."""
    return "-lite" in backbone_name


def round_filters(filters: int, width_coefficient: float, divisor: int = 8) -> int:
    """Scales a channel count by the width coefficient, rounded to a multiple of 8."""
    scaled = filters * width_coefficient
    rounded = max(divisor, int(scaled + divisor / 2) // divisor * divisor)
    if rounded < 0.9 * scaled:  # Never round down by more than 10%.
        rounded += divisor
    return int(rounded)


def round_repeats(repeats: int, depth_coefficient: float) -> int:
    return int(math.ceil(depth_coefficient * repeats))


def backbone_survival_prob(config) -> float:
    """The survival probability of the last block: the config's, or the released default.

    `config.backbone_survival_prob` None means 1.0 (no drop-connect) for the
    backbones in NO_DROP_CONNECT_BACKBONES and DEFAULT_SURVIVAL_PROB for the rest.
    """
    value = config.backbone_survival_prob
    if value is not None:
        return float(value)
    return 1.0 if config.backbone_name in NO_DROP_CONNECT_BACKBONES else DEFAULT_SURVIVAL_PROB


def block_survival_probs(last_survival_prob: float, num_blocks: int) -> List[float]:
    """Per-block survival probabilities: 1.0 for block 0, falling linearly towards the last.

    Block i keeps its residual branch with probability
    `1 - (1 - last_survival_prob) * i / num_blocks`.
    """
    drop_rate = 1.0 - last_survival_prob
    return [1.0 - drop_rate * index / num_blocks for index in range(num_blocks)]


@dataclasses.dataclass(frozen=True)
class BlockSpec:
    """One MBConv block after scaling."""
    kernel_size: int
    stride: int
    expand_ratio: int
    input_filters: int
    output_filters: int
    se_ratio: Optional[float]


def block_specs(backbone_name: str, blocks_per_stage: Optional[int] = None) -> List[BlockSpec]:
    """The scaled list of blocks of a backbone, in order; with `blocks_per_stage`, each stage
    keeps at most that many of its blocks (the first ones: the stride and filter changes)."""
    if backbone_name not in SCALING:
        raise ValueError("Unknown backbone %r; known backbones: %s"
                         % (backbone_name, ", ".join(SCALING)))
    width, depth = SCALING[backbone_name]
    lite = is_lite(backbone_name)
    specs = []
    for stage_index, stage in enumerate(BASE_STAGES):
        fixed_stage = lite and stage_index in (0, len(BASE_STAGES) - 1)
        repeats = stage.num_repeat if fixed_stage else round_repeats(stage.num_repeat, depth)
        if blocks_per_stage is not None:
            repeats = min(repeats, blocks_per_stage)
        input_filters = round_filters(stage.input_filters, width)
        output_filters = round_filters(stage.output_filters, width)
        if lite and stage_index == 0:
            input_filters = STEM_FILTERS  # The stem is not scaled in Lite models.
        se_ratio = None if lite else stage.se_ratio
        for repeat in range(repeats):
            specs.append(BlockSpec(
                kernel_size=stage.kernel_size,
                stride=stage.stride if repeat == 0 else 1,
                expand_ratio=stage.expand_ratio,
                input_filters=input_filters if repeat == 0 else output_filters,
                output_filters=output_filters,
                se_ratio=se_ratio))
    return specs


class _LayerNames:
    """Hands out the names the released checkpoints use inside one block.

    Convolutions are `conv2d`, `conv2d_1`, ... and BatchNorms
    `tpu_batch_normalization`, `tpu_batch_normalization_1`, ... in creation order.
    """

    def __init__(self):
        self._counts: Dict[str, int] = {}

    def __call__(self, base: str) -> str:
        index = self._counts.get(base, 0)
        self._counts[base] = index + 1
        return base if index == 0 else "%s_%d" % (base, index)


class SqueezeExcite(keras.layers.Layer):
    """Channel gating: global average -> reduce conv -> act -> expand conv -> sigmoid."""

    def __init__(self, input_filters: int, reduced_filters: int, config, **kwargs):
        super().__init__(**kwargs)
        self.config = config
        self.reduce = self._conv(reduced_filters, "conv2d")
        self.expand = self._conv(input_filters, "conv2d_1")

    def _conv(self, filters: int, name: str) -> keras.layers.Layer:
        return wrap_layer(keras.layers.Conv2D(filters, 1, padding="same", use_bias=True, name=name,
                                              kernel_initializer=conv_kernel_initializer(),
                                              dtype=self.dtype_policy), self.config)

    def call(self, x):
        gate = tf.reduce_mean(x, axis=[1, 2], keepdims=True)
        gate = self.expand(activation_fn(self.reduce(gate), self.config.act_type))
        return tf.sigmoid(gate) * x


class MBConvBlock(keras.layers.Layer):
    """Mobile inverted bottleneck: expand 1x1, depthwise kxk, squeeze-excite, project 1x1.

    Input `[B, H, W, input_filters]`, output `[B, H/stride, W/stride, output_filters]`.
    The residual (with drop-connect) is used when the shape is unchanged.
    """

    def __init__(self, spec: BlockSpec, config, **kwargs):
        super().__init__(**kwargs)
        self.spec = spec
        self.config = config
        conv_names, bn_names = _LayerNames(), _LayerNames()
        expanded = spec.input_filters * spec.expand_ratio
        policy = self.dtype_policy
        self.expand_conv = self.expand_bn = None
        if spec.expand_ratio != 1:
            self.expand_conv = wrap_layer(keras.layers.Conv2D(
                expanded, 1, padding="same", use_bias=conv_uses_bias(config, False),
                name=conv_names("conv2d"),
                kernel_initializer=conv_kernel_initializer(), dtype=policy), config)
            self.expand_bn = batch_norm(config, bn_names("tpu_batch_normalization"), policy)
            self.expand_act = output_point(config, "expand_quant", config.act_type, policy)
        self.depthwise_conv = wrap_layer(keras.layers.DepthwiseConv2D(
            spec.kernel_size, strides=spec.stride, padding="same",
            use_bias=conv_uses_bias(config, False),
            depthwise_initializer=conv_kernel_initializer(), name="depthwise_conv2d", dtype=policy),
            config)
        self.depthwise_bn = batch_norm(config, bn_names("tpu_batch_normalization"), policy)
        self.depthwise_act = output_point(config, "depthwise_quant", config.act_type, policy)
        self.se = None
        if spec.se_ratio:
            reduced = max(1, int(spec.input_filters * spec.se_ratio))
            self.se = SqueezeExcite(expanded, reduced, config, name="se", dtype=policy)
        self.project_conv = wrap_layer(keras.layers.Conv2D(
            spec.output_filters, 1, padding="same", use_bias=conv_uses_bias(config, False),
            name=conv_names("conv2d"),
            kernel_initializer=conv_kernel_initializer(), dtype=policy), config)
        self.project_bn = batch_norm(config, bn_names("tpu_batch_normalization"), policy)
        # Identity points: where int8 TFLite stores the projection and the residual sum.
        self.project_output = output_point(config, "project_quant", dtype=policy)
        self.residual_output = output_point(config, "residual_quant", dtype=policy)

    def conv_bn_pairs(self):
        """(conv, BatchNorm) pairs that model/folding.py folds, in call order."""
        pairs = [(self.depthwise_conv, self.depthwise_bn), (self.project_conv, self.project_bn)]
        if self.expand_conv is not None:
            pairs.insert(0, (self.expand_conv, self.expand_bn))
        return pairs

    @property
    def has_residual(self) -> bool:
        return self.spec.stride == 1 and self.spec.input_filters == self.spec.output_filters

    def call(self, inputs, training=False, survival_prob=None, keep=None):
        """keep: the drop-connect mask (drop_connect_keep), drawn here when None."""
        bn_mode = bn_training(training, self.config)
        x = inputs
        if self.expand_conv is not None:
            x = self.expand_act(self.expand_bn(self.expand_conv(x), training=bn_mode))
        x = self.depthwise_act(self.depthwise_bn(self.depthwise_conv(x), training=bn_mode))
        if self.se is not None:
            x = self.se(x)
        x = self.project_output(self.project_bn(self.project_conv(x), training=bn_mode))
        if self.has_residual:
            x = self.residual_output(drop_connect(x, training, survival_prob, keep) + inputs)
        return x


class EfficientNetBackbone(keras.layers.Layer):
    """EfficientNet feature extractor.

    Called on images `[B, H, W, 3]`, returns the feature maps at levels 1-5
    (strides 2, 4, 8, 16, 32) as a list of 5 tensors. In training, residual
    blocks use drop-connect with `survival_probs[i]` (see `backbone_survival_prob`).
    """

    def __init__(self, config, **kwargs):
        kwargs.setdefault("name", config.backbone_name)
        super().__init__(**kwargs)
        self.config = config
        # Validates the name first.
        self.specs = block_specs(config.backbone_name, config.get("backbone_blocks_per_stage"))
        width, _ = SCALING[config.backbone_name]
        stem_filters = STEM_FILTERS if is_lite(config.backbone_name) else round_filters(STEM_FILTERS, width)
        self.stem = _Stem(stem_filters, config, name="stem", dtype=self.dtype_policy)
        self.blocks = [MBConvBlock(spec, config, name="blocks_%d" % i, dtype=self.dtype_policy)
                       for i, spec in enumerate(self.specs)]
        self.survival_probs = tuple(block_survival_probs(backbone_survival_prob(config),
                                                         len(self.blocks)))
        # A block ends a level when the next block downsamples (or it is the last).
        self.level_ends = [i for i in range(len(self.specs))
                           if i == len(self.specs) - 1 or self.specs[i + 1].stride > 1]

    def call(self, images, training=False):
        x = self.stem(images, training=training)
        features = []
        for index, (block, survival_prob) in enumerate(zip(self.blocks, self.survival_probs)):
            if training and self.config.get("grad_checkpoint"):
                # The mask is drawn out here, so the recomputation reuses it.
                keep = (drop_connect_keep(x, survival_prob)
                        if block.has_residual and uses_drop_connect(training, survival_prob)
                        else None)
                x = recomputed_call(block, x, training=training, survival_prob=survival_prob,
                                    keep=keep)
            else:
                x = block(x, training=training, survival_prob=survival_prob)
            if index in self.level_ends:
                features.append(x)
        return features


class _Stem(keras.layers.Layer):
    """3x3 stride-2 convolution, BatchNorm and activation."""

    def __init__(self, filters: int, config, **kwargs):
        super().__init__(**kwargs)
        self.config = config
        self.conv = wrap_layer(keras.layers.Conv2D(
            filters, 3, strides=2, padding="same", use_bias=conv_uses_bias(config, False),
            name="conv2d",
            kernel_initializer=conv_kernel_initializer(), dtype=self.dtype_policy), config)
        self.bn = batch_norm(config, "tpu_batch_normalization", self.dtype_policy)
        self.act = output_point(config, "output_quant", config.act_type, self.dtype_policy)

    def conv_bn_pairs(self):
        return [(self.conv, self.bn)]

    def call(self, images, training=False):
        return self.act(self.bn(self.conv(images), training=bn_training(training, self.config)))
