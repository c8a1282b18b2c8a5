"""BiFPN: the weighted bi-directional feature pyramid of EfficientDet.

Names follow the released checkpoints:
`fpn_cells/cell_0/fnode1/resample_0_2_6/conv2d/kernel`,
`fpn_cells/cell_0/fnode1/WSM_1`, `fpn_cells/cell_0/fnode1/op_after_combine6/conv/...`.
"""

import dataclasses
from typing import List, Optional, Sequence

import tensorflow as tf
import tf_keras as keras

from efficientdet_keras.model.layers import batch_norm, bn_training, conv_uses_bias, output_point
from efficientdet_keras.optimization import wrap_layer

FUSION_METHODS = ("fastattn", "attn", "channel_attn", "channel_fastattn", "sum")
# Keeps the fast-normalised fusion finite when every weight is zero.
_FUSION_EPSILON = 1e-4


@dataclasses.dataclass(frozen=True)
class FusionNode:
    """One BiFPN node: the level it produces and the ids of the features it fuses.

    Ids 0..L-1 are the cell's inputs (min_level..max_level); id L+i is node i.
    weight_method: how it weighs its inputs; None: the config's fpn_weight_method.
    """
    level: int
    input_ids: Sequence[int]
    weight_method: Optional[str] = None


def bifpn_nodes(min_level: int, max_level: int) -> List[FusionNode]:
    """The BiFPN graph: a top-down pass, then a bottom-up pass with skip edges."""
    levels_of_ids = {level: [level - min_level] for level in range(min_level, max_level + 1)}
    next_id = max_level - min_level + 1
    nodes = []
    for level in range(max_level - 1, min_level - 1, -1):  # Top-down.
        nodes.append(FusionNode(level, (levels_of_ids[level][-1], levels_of_ids[level + 1][-1])))
        levels_of_ids[level].append(next_id)
        next_id += 1
    for level in range(min_level + 1, max_level + 1):  # Bottom-up.
        nodes.append(FusionNode(level, tuple(levels_of_ids[level]) + (levels_of_ids[level - 1][-1],)))
        levels_of_ids[level].append(next_id)
        next_id += 1
    return nodes


def _dimensions(x: tf.Tensor) -> list:
    """x's dimensions: Python ints where the static shape has them, scalar tensors elsewhere."""
    dynamic = None
    dims = []
    for axis, size in enumerate(x.shape.as_list()):
        if size is None:
            dynamic = tf.shape(x) if dynamic is None else dynamic
            size = dynamic[axis]
        dims.append(size)
    return dims


def upsample_nearest(x: tf.Tensor, factor: int, target_height, target_width) -> tf.Tensor:
    """Nearest-neighbour upsampling by an integer factor, cropped to the target size.

    For one pyramid level (factor 2, target = source * 2 or one less) this equals
    the released models' resize (no half-pixel centres). One tile of a 6-D view copies
    each pixel to a factor x factor block, and its gradient (one reduction) also compiles
    with XLA; tf.repeat would take many more ops per upsampling, forward and backward. A tile
    rather than tf.broadcast_to, because XNNPACK does not take BROADCAST_TO in a .tflite.
    """
    batch, height, width, channels = _dimensions(x)
    x = tf.reshape(x, [batch, height, 1, width, 1, channels])
    x = tf.tile(x, [1, 1, factor, 1, factor, 1])
    x = tf.reshape(x, [batch, height * factor, width * factor, channels])
    if all(isinstance(size, int) for size in (height, width, target_height, target_width)) \
            and (target_height, target_width) == (height * factor, width * factor):
        return x
    return x[:, :target_height, :target_width, :]


class ResampleFeatureMap(keras.layers.Layer):
    """Moves a feature map from `source_level` to `target_level` with `filters` channels.

    A 1x1 conv (+ BatchNorm) adapts the channels when they differ. Downsampling
    is max (or average) pooling with stride 2^(target - source); upsampling is a
    nearest-neighbour resize to the size of `target_like`.
    """

    def __init__(self, source_level: int, target_level: int, filters: int, config, **kwargs):
        super().__init__(**kwargs)
        self.source_level, self.target_level = source_level, target_level
        self.filters = filters
        self.config = config
        self.conv2d = wrap_layer(keras.layers.Conv2D(filters, 1, padding="same", name="conv2d",
                                                     dtype=self.dtype_policy), config)
        self.bn = batch_norm(config, "bn", self.dtype_policy) if config.apply_bn_for_resampling else None
        self.output_quant = output_point(config, "output_quant", dtype=self.dtype_policy)
        if source_level < target_level:
            stride = 2 ** (target_level - source_level)
            pool = {"max": keras.layers.MaxPooling2D, "avg": keras.layers.AveragePooling2D}
            if config.pooling_type not in pool:
                raise ValueError("pooling_type must be max or avg, got %r" % config.pooling_type)
            self.pool = pool[config.pooling_type](pool_size=stride + 1, strides=stride,
                                                  padding="same", dtype=self.dtype_policy)

    def conv_bn_pairs(self):
        """(conv, BatchNorm) pairs that model/folding.py folds (none without the BatchNorm)."""
        return [(self.conv2d, self.bn)] if self.bn is not None else []

    def _adapt_channels(self, x, training):
        if x.shape[-1] == self.filters:
            return x
        x = self.conv2d(x)
        if self.bn is not None:
            x = self.bn(x, training=bn_training(training, self.config))
        return self.output_quant(x)

    def call(self, x, target_like: Optional[tf.Tensor] = None, training=False):
        if self.source_level < self.target_level:
            if not self.config.conv_after_downsample:
                x = self._adapt_channels(x, training)
            x = self.pool(x)
            if self.config.conv_after_downsample:
                x = self._adapt_channels(x, training)
            return x
        x = self._adapt_channels(x, training)
        if self.source_level > self.target_level:
            factor = 2 ** (self.source_level - self.target_level)
            x = upsample_nearest(x, factor, *_dimensions(target_like)[1:3])
        return x


class OpAfterCombine(keras.layers.Layer):
    """Activation -> 3x3 (separable) conv -> BatchNorm, applied to each fused node."""

    def __init__(self, config, **kwargs):
        super().__init__(**kwargs)
        self.config = config
        conv_class = (keras.layers.SeparableConv2D if config.separable_conv else keras.layers.Conv2D)
        self.conv = wrap_layer(conv_class(config.fpn_num_filters, 3, padding="same",
                                          use_bias=conv_uses_bias(config, not config.conv_bn_act_pattern),
                                          name="conv",
                                          dtype=self.dtype_policy), config)
        self.bn = batch_norm(config, "bn", self.dtype_policy)
        # The activation comes before the conv (on the fused sum) or after the BatchNorm.
        act_first = not config.conv_bn_act_pattern
        self.input_act = output_point(config, "input_quant", config.act_type if act_first else None,
                                      self.dtype_policy)
        self.output_act = output_point(config, "output_quant",
                                       None if act_first else config.act_type, self.dtype_policy)

    def conv_bn_pairs(self):
        return [(self.conv, self.bn)]

    def call(self, x, training=False):
        x = self.conv(self.input_act(x))
        return self.output_act(self.bn(x, training=bn_training(training, self.config)))


class FusionNodeLayer(keras.layers.Layer):
    """Resamples its inputs to one level, fuses them with learned weights, then convolves."""

    def __init__(self, node: FusionNode, input_levels: Sequence[int], num_existing: int, config,
                 **kwargs):
        super().__init__(**kwargs)
        self.method = node.weight_method or config.fpn_weight_method
        if self.method not in FUSION_METHODS:
            raise ValueError("fpn_weight_method must be one of %s, got %r"
                             % (", ".join(FUSION_METHODS), self.method))
        self.node = node
        self.config = config
        # The released names end with the number of features that exist before this node.
        self.resamplers = [
            ResampleFeatureMap(input_levels[i], node.level, config.fpn_num_filters, config,
                               name="resample_%d_%d_%d" % (i, input_id, num_existing),
                               dtype=self.dtype_policy)
            for i, input_id in enumerate(node.input_ids)]
        self.op_after_combine = OpAfterCombine(config, name="op_after_combine%d" % num_existing,
                                               dtype=self.dtype_policy)
        # Where int8 TFLite stores the partial sums of a 3-input node.
        self.partial_sums = [output_point(config, "sum_quant_%d" % i, dtype=self.dtype_policy)
                             for i in range(len(node.input_ids) - 2)]

    def build(self, input_shape):
        self.edge_weights = []
        if self.method != "sum":
            per_channel = self.method.startswith("channel_")
            shape = (self.config.fpn_num_filters,) if per_channel else ()
            for i in range(len(self.node.input_ids)):
                self.edge_weights.append(self.add_weight(
                    name="WSM" if i == 0 else "WSM_%d" % i, shape=shape,
                    initializer="ones", trainable=True))
        super().build(input_shape)

    def fuse(self, nodes: List[tf.Tensor]) -> tf.Tensor:
        """Weighted sum of same-shaped feature maps, by the config's fusion method."""
        if self.method == "sum":
            return self.pairwise_sum(nodes)
        dtype = nodes[0].dtype
        weights = [tf.cast(w, dtype) for w in self.edge_weights]
        if self.method in ("attn", "channel_attn"):
            # Softmax over the inputs (per channel for channel_attn).
            normalised = tf.nn.softmax(tf.stack(weights, axis=-1), axis=-1)
            return tf.reduce_sum(tf.stack(nodes, axis=-1) * normalised, axis=-1)
        weights = [tf.nn.relu(w) for w in weights]  # fastattn and channel_fastattn.
        total = tf.add_n(weights) + _FUSION_EPSILON
        # The weights are normalised before they meet the maps: one product per map, and no
        # map-sized division (nor its gradient), as (node * w) / total would need.
        return self.pairwise_sum([node * (w / total) for node, w in zip(nodes, weights)])

    def pairwise_sum(self, nodes: List[tf.Tensor]) -> tf.Tensor:
        """nodes[0] + nodes[1] + ...: one ADD per input, as int8 TFLite needs (its ADD_N
        forces one scale on all inputs)."""
        total = nodes[0] + nodes[1]
        for partial_sum, node in zip(self.partial_sums, nodes[2:]):
            total = partial_sum(total) + node
        return total

    def call(self, features: List[tf.Tensor], training=False):
        """Takes all features so far (cell inputs first) and returns the new node's map."""
        target_like = features[self.node.input_ids[0]]  # Always a map at this node's level.
        inputs = [resample(features[input_id], target_like, training=training)
                  for resample, input_id in zip(self.resamplers, self.node.input_ids)]
        return self.op_after_combine(self.fuse(inputs), training=training)


def qufpn_nodes(min_level: int, max_level: int) -> List[FusionNode]:
    """The QuFPN graph (fpn_name: qufpn), BiFPN's quad extension in the reference: a
    top-down then bottom-up pass (BiFPN's), a bottom-up then top-down pass from the
    inputs, and per level a node that adds the two passes' outputs (fastattn)."""
    levels = range(min_level, max_level + 1)
    # Per level, the ids of its maps so far; a pass that makes no map at a level repeats
    # the level's last id, so that position k is the k-th pass's map at every level.
    ids = {level: [level - min_level] for level in levels}
    nodes = []

    def add(level, input_ids, weight_method=None):
        nodes.append(FusionNode(level, tuple(input_ids), weight_method))
        ids[level].append(len(levels) + len(nodes) - 1)

    for level in reversed(levels[:-1]):  # 1: top-down.
        add(level, (ids[level][-1], ids[level + 1][-1]))
    ids[max_level].append(ids[max_level][-1])
    for level in levels[1:-1]:  # 2: bottom-up, as BiFPN's.
        add(level, ids[level] + [ids[level - 1][-1]])
    add(max_level, (ids[max_level][0], ids[max_level - 1][-1]))
    ids[min_level].append(ids[min_level][-1])
    for level in levels[1:]:  # 3: bottom-up from the inputs.
        below = ids[level - 1][0] if level == min_level + 1 else ids[level - 1][-1]
        add(level, (ids[level][0], below))
    ids[min_level].append(ids[min_level][-1])
    for level in reversed(levels[1:-1]):  # 4: top-down after pass 3.
        add(level, (ids[level][0], ids[level][-1], ids[level + 1][-1]))
    add(min_level, (ids[min_level][0], ids[min_level + 1][-1]))
    ids[max_level].append(ids[max_level][-1])
    for level in reversed(levels):  # The outputs: passes 2 and 4 added.
        add(level, (ids[level][2], ids[level][4]), "fastattn")
    return nodes


# fpn_name -> the graph of one cell; bifpn_dyn is the reference's older name of bifpn.
FPN_GRAPHS = {"bifpn": bifpn_nodes, "bifpn_dyn": bifpn_nodes, "qufpn": qufpn_nodes}


def fpn_nodes(fpn_name: Optional[str], min_level: int, max_level: int) -> List[FusionNode]:
    """The nodes of one FPN cell named by config key fpn_name (None: bifpn)."""
    if (fpn_name or "bifpn") not in FPN_GRAPHS:
        raise ValueError("fpn_name must be one of %s, got %r"
                         % (", ".join(FPN_GRAPHS), fpn_name))
    return FPN_GRAPHS[fpn_name or "bifpn"](min_level, max_level)


class BiFPNCell(keras.layers.Layer):
    """One BiFPN repeat: a list of maps at min..max level in, the same out."""

    def __init__(self, config, **kwargs):
        super().__init__(**kwargs)
        self.config = config
        num_levels = config.max_level - config.min_level + 1
        self.graph = fpn_nodes(config.get("fpn_name"), config.min_level, config.max_level)
        levels_by_id = list(range(config.min_level, config.max_level + 1))
        self.fnodes = []
        for index, node in enumerate(self.graph):
            self.fnodes.append(FusionNodeLayer(
                node, [levels_by_id[i] for i in node.input_ids], num_levels + index, config,
                name="fnode%d" % index, dtype=self.dtype_policy))
            levels_by_id.append(node.level)
        # The output for a level is the last node that produced it.
        self.output_ids = [max(i for i, level in enumerate(levels_by_id) if level == out_level)
                           for out_level in range(config.min_level, config.max_level + 1)]

    def call(self, features: List[tf.Tensor], training=False):
        features = list(features)
        for fnode in self.fnodes:
            features.append(fnode(features, training=training))
        return [features[i] for i in self.output_ids]


class BiFPN(keras.layers.Layer):
    """`fpn_cell_repeats` BiFPN cells in sequence (the `fpn_cells` scope)."""

    def __init__(self, config, **kwargs):
        kwargs.setdefault("name", "fpn_cells")
        super().__init__(**kwargs)
        self.cells = [BiFPNCell(config, name="cell_%d" % i, dtype=self.dtype_policy)
                      for i in range(config.fpn_cell_repeats)]

    def call(self, features: List[tf.Tensor], training=False):
        for cell in self.cells:
            features = cell(features, training=training)
        return features
