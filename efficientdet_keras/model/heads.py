"""Class and box prediction heads, shared across pyramid levels.

One class serves both heads: the convolutions are shared by all levels, each
level has its own BatchNorms (`class-<i>-bn-<level>`), and a final prediction
conv (`class-predict` / `box-predict`) gives the per-anchor outputs.
"""

from typing import List

import tensorflow as tf
import tf_keras as keras

from efficientdet_keras.model.layers import (batch_norm, bn_training, class_bias_initializer,
                                             drop_connect, folds_batch_norm, output_point)
from efficientdet_keras.optimization import wrap_layer


class PredictionHead(keras.layers.Layer):
    """Maps each BiFPN level `[B, H_l, W_l, C]` to `[B, H_l, W_l, outputs_per_location]`.

    Args:
      kind: "class" or "box"; names the layers as the released checkpoints do.
      outputs_per_location: num_anchors * num_classes, or num_anchors * 4.
      config: the model config (filters, repeats, levels, activation, BatchNorm).
    """

    def __init__(self, kind: str, outputs_per_location: int, config, **kwargs):
        if kind not in ("class", "box"):
            raise ValueError("kind must be 'class' or 'box', got %r" % kind)
        kwargs.setdefault("name", "%s_net" % kind)
        super().__init__(**kwargs)
        self.config = config
        self.levels = list(range(config.min_level, config.max_level + 1))
        policy = self.dtype_policy
        if folds_batch_norm(config):
            # Each level's BatchNorm scales the shared conv differently: one conv per level.
            self.convs = []
            self.level_convs = [[self._conv(config.fpn_num_filters,
                                            "%s-%d-level-%d" % (kind, i, level), "zeros")
                                 for level in self.levels]
                                for i in range(config.box_class_repeats)]
        else:
            self.convs = [self._conv(config.fpn_num_filters, "%s-%d" % (kind, i), "zeros")
                          for i in range(config.box_class_repeats)]
        self.bns = [[batch_norm(config, "%s-%d-bn-%d" % (kind, i, level), policy)
                     for level in self.levels] for i in range(config.box_class_repeats)]
        self.acts = [[output_point(config, "%s-%d-act-%d" % (kind, i, level), config.act_type,
                                   policy) for level in self.levels]
                     for i in range(config.box_class_repeats)]
        self.residual_outputs = [[output_point(config, "%s-%d-add-%d" % (kind, i, level),
                                               dtype=policy) for level in self.levels]
                                 for i in range(config.box_class_repeats)]
        bias = class_bias_initializer() if kind == "class" else "zeros"
        self.predict = self._conv(outputs_per_location, "%s-predict" % kind, bias)
        # One range for all levels: the exported outputs concatenate the levels.
        self.predict_output = output_point(config, "%s-predict-output" % kind, dtype=policy)

    @property
    def per_level_layers(self) -> List[keras.layers.Layer]:
        """The layers of every repeat and level in one list. Keras' `.weights.h5` format walks
        lists of layers but not lists of lists: without this list it would leave their weights
        out of the file, and a load would keep a fresh model's."""
        rows = getattr(self, "level_convs", []) + self.bns + self.acts + self.residual_outputs
        return [layer for row in rows for layer in row]

    def _conv(self, filters: int, name: str, bias_initializer):
        if self.config.separable_conv:
            conv = keras.layers.SeparableConv2D(
                filters, 3, padding="same", depth_multiplier=1, name=name,
                depthwise_initializer=keras.initializers.VarianceScaling(),
                pointwise_initializer=keras.initializers.VarianceScaling(),
                bias_initializer=bias_initializer, dtype=self.dtype_policy)
        else:
            conv = keras.layers.Conv2D(
                filters, 3, padding="same", name=name,
                kernel_initializer=keras.initializers.RandomNormal(stddev=0.01),
                bias_initializer=bias_initializer, dtype=self.dtype_policy)
        return wrap_layer(conv, self.config)

    def conv_at(self, repeat: int, level_index: int) -> keras.layers.Layer:
        """The conv of `repeat` at a level: shared by all levels, unless BatchNorm is folded."""
        if folds_batch_norm(self.config):
            return self.level_convs[repeat][level_index]
        return self.convs[repeat]

    def conv_bn_pairs(self):
        """(conv, BatchNorm) pairs that model/folding.py folds: one per repeat and level."""
        return [(self.conv_at(i, level_index), self.bns[i][level_index])
                for i in range(self.config.box_class_repeats)
                for level_index in range(len(self.levels))]

    def head_features(self, features: List[tf.Tensor], training=False) -> List[tf.Tensor]:
        """The shared convs and per-level BatchNorms: what the prediction conv sees, per level."""
        bn_mode = bn_training(training, self.config)
        survival_prob = self.config.survival_prob
        outputs = []
        for level_index, x in enumerate(features):
            for i in range(self.config.box_class_repeats):
                residual = x
                conv = self.conv_at(i, level_index)
                x = self.acts[i][level_index](self.bns[i][level_index](conv(x), training=bn_mode))
                # The released models use a residual only when survival_prob is set.
                if i > 0 and survival_prob:
                    x = self.residual_outputs[i][level_index](
                        drop_connect(x, training, survival_prob) + residual)
            outputs.append(x)
        return outputs

    def call(self, features: List[tf.Tensor], training=False) -> List[tf.Tensor]:
        return [self.predict_output(self.predict(x))
                for x in self.head_features(features, training)]
