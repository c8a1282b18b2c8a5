"""Config keys of the network: backbone, input size, anchors, BiFPN, heads, BatchNorm."""

from typing import Any, Mapping

from efficientdet_keras.config.keys.checks import (ANY_VALUE, BOOLEAN, NON_NEGATIVE_NUMBER,
                                                   POSITIVE_NUMBER, Check,
                                                   integer_at_least, is_integer,
                                                   number_in, number_list, one_of, optional)
from efficientdet_keras.config.keys.choices import (ACTIVATIONS, BACKBONES, FPN_WEIGHT_METHODS,
                                                    POOLING_TYPES)
from efficientdet_keras.config.keys.row import FREE_MAPPING, SIZE_PAIR, ConfigKey
from efficientdet_keras.config.label_maps import NAMED_LABEL_MAPS

TITLE = "Model"


def _is_label_map(value: Any) -> bool:
    if value is None or isinstance(value, str):
        return value is None or value in NAMED_LABEL_MAPS
    return isinstance(value, Mapping) and all(
        (is_integer(k) or (isinstance(k, str) and k.isdigit())) and int(k) >= 1 for k in value)


_LABEL_MAP = Check(_is_label_map, "null, a dict {class id: name} with ids from 1, or one of %s"
                   % ", ".join(sorted(NAMED_LABEL_MAPS)))
_SYNC_BATCH_NORM = Check(lambda value: value is None or isinstance(value, bool),
                         "null (on with more than one replica), true or false")

KEYS = (
    ConfigKey(
        "name", "efficientdet-d1", "str", ANY_VALUE,
        "The model's name, one of the presets below; get_efficientdet_config sets it and the "
        "Keras model is named after it."),
    ConfigKey(
        "backbone_name", "efficientnet-b1", "str", one_of(*BACKBONES),
        "The EfficientNet backbone: efficientnet-b0 ... b7, or efficientnet-lite0 ... lite4 "
        "(no squeeze-and-excitation; the Lite presets' mobile backbones)."),
    ConfigKey(
        "backbone_blocks_per_stage", None, "int or null", optional(integer_at_least(1)),
        "At most this many MBConv blocks in each of the backbone's 7 stages; null: the "
        "backbone's own depth (16 blocks for efficientnet-b0). 1 builds a 7-block backbone "
        "with every stage's kind of block, quick to build and trace, for smoke runs and tests; "
        "released and ImageNet checkpoints need null."),
    ConfigKey(
        "image_size", 640, 'int, "WxH" or [height, width]', ANY_VALUE,
        "Network input in pixels: N for N x N, WxH for width x height, or [height, width]; "
        "stored as (height, width).",
        form=SIZE_PAIR),
    ConfigKey(
        "num_classes", 90, "int", integer_at_least(1),
        "Outputs of the class head: class ids in the data run from 1 to num_classes, 0 is "
        "background (COCO and the released checkpoints: 90)."),
    ConfigKey(
        "label_map", None, "dict, str or null", _LABEL_MAP,
        "Class names {class id: name} for per-class AP, drawn detections, results and the "
        "exported label files; or a built-in map by name: coco (the 90 ids of the released "
        "checkpoints), voc, waymo; null names none.",
        form=FREE_MAPPING),
    # The levels are checked together, by rules.validate_config.
    ConfigKey(
        "min_level", 3, "int", ANY_VALUE,
        "Finest feature level of the BiFPN and heads; level L has a stride of 2^L pixels "
        "(3: 8 pixels)."),
    ConfigKey(
        "max_level", 7, "int", ANY_VALUE,
        "Coarsest feature level; levels above 5, the backbone's last, are made by pooling."),
    ConfigKey(
        "num_scales", 3, "int", integer_at_least(1),
        "Anchor sizes per octave at each location: anchor_scale x 2^(i / num_scales) strides "
        "for i = 0 .. num_scales - 1."),
    ConfigKey(
        "aspect_ratios", [1.0, 2.0, 0.5], "list of float", number_list(positive=True),
        "Anchor shapes as width / height; each location has num_scales x len(aspect_ratios) "
        "anchors."),
    ConfigKey(
        "anchor_scale", 4.0, "float", POSITIVE_NUMBER,
        "Base anchor size in strides: at level L the first anchor is anchor_scale x 2^L "
        "pixels on a side."),
    ConfigKey(
        "fpn_num_filters", 88, "int", integer_at_least(1),
        "Channels of the BiFPN feature maps and of the box and class heads."),
    ConfigKey(
        "fpn_cell_repeats", 4, "int", integer_at_least(1),
        "Number of BiFPN cells stacked on the backbone's features."),
    # 0 suits a TF-Hub module, whose own heads hold the shared convolutions.
    ConfigKey(
        "box_class_repeats", 3, "int", integer_at_least(0),
        "Convolution layers in each of the box and class heads before its prediction layer "
        "(0: the prediction layer alone)."),
    ConfigKey(
        "fpn_weight_method", "fastattn", "str", one_of(*FPN_WEIGHT_METHODS),
        "How a BiFPN node fuses its inputs: fastattn (learned weights after ReLU, divided by "
        "their sum), attn (softmax of learned weights), channel_fastattn and channel_attn (the "
        "same with one weight per channel), sum (unweighted)."),
    ConfigKey(
        "fpn_name", "bifpn", "str", one_of(None, "bifpn", "bifpn_dyn", "qufpn"),
        "The feature network's graph: bifpn (the EfficientDet paper's; bifpn_dyn is the older "
        "name) or qufpn (the reference's quad extension: a second bottom-up then top-down "
        "pass, added to the first per level; about twice the nodes)."),
    ConfigKey(
        "separable_conv", True, "bool", ANY_VALUE,
        "Depthwise-separable instead of plain 3x3 convolutions in the BiFPN and the heads."),
    ConfigKey(
        "apply_bn_for_resampling", True, "bool", ANY_VALUE,
        "BatchNorm after the 1x1 convolution that gives a resampled feature map the BiFPN's "
        "channel count."),
    ConfigKey(
        "conv_after_downsample", False, "bool", ANY_VALUE,
        "When a feature map is pooled to a coarser level, change its channel count after the "
        "pooling instead of before."),
    ConfigKey(
        "conv_bn_act_pattern", False, "bool", ANY_VALUE,
        "BiFPN nodes run conv, BatchNorm, activation; false: activation, conv (with bias), "
        "BatchNorm, as the released models."),
    ConfigKey(
        "pooling_type", "max", "str", one_of(*POOLING_TYPES),
        "Pooling that takes a feature map to a coarser level."),
    ConfigKey(
        "act_type", "swish", "str", one_of(*ACTIVATIONS),
        "Activation of the backbone, BiFPN and heads; swish and silu are the same function, "
        "swish_native computes it from plain ops (x * sigmoid(x)), mish is "
        "x * tanh(softplus(x)); the Lite presets use relu6. The variable names do not depend "
        "on it, so a checkpoint loads under any of them."),
    ConfigKey(
        "survival_prob", None, "float or null", ANY_VALUE,
        "Heads: with a value, each layer after the first gets a residual connection, dropped "
        "per image with probability 1 - survival_prob in training; null: no residuals, as "
        "released."),
    ConfigKey(
        "backbone_survival_prob", None, "float or null",
        optional(number_in(0.0, 1.0, low_open=True, high_open=False)),
        "Backbone drop-connect: survival probability of the last block, rising linearly to 1 "
        "at the first; null: no drop-connect for efficientnet-b0 (as released), 0.8 for the "
        "others."),
    ConfigKey(
        "batch_norm_momentum", 0.99, "float", number_in(0.0, 1.0),
        "Momentum of the BatchNorm moving statistics; 0.99 averages over about 100 batches, "
        "0.97 over about 33."),
    ConfigKey(
        "batch_norm_epsilon", 1e-3, "float", POSITIVE_NUMBER,
        "Added to the variance in every BatchNorm."),
    ConfigKey(
        "batch_norm_renorm", False, "bool", BOOLEAN,
        "Batch Renormalization: training-mode BatchNorm corrected towards the moving "
        "statistics, for short runs on small images; adds variables, so off to load the "
        "released checkpoints."),
    ConfigKey(
        "batch_norm_fixed_epochs", 0.0, "float", NON_NEGATIVE_NUMBER,
        "The last this many epochs (fractions allowed) train with every BatchNorm normalising "
        "by its moving statistics, which stay as they are, while gamma, beta and the rest "
        "train: the network ends adapted to the statistics inference uses. For short runs at "
        "small batches; 0, or as many as num_epochs (with a warning): batch statistics to the "
        "end."),
    ConfigKey(
        "sync_batch_norm", None, "bool or null", _SYNC_BATCH_NORM,
        "BatchNorm statistics of the global batch, all-reduced across replicas in training; "
        "null: on when built under a strategy with more than one replica."),
    ConfigKey(
        "fold_batch_norm", False, "bool", BOOLEAN,
        "Inference only: every BatchNorm is folded into the convolution before it (export and "
        "evaluation set it); such a model cannot be trained."),
    ConfigKey(
        "is_training_bn", True, "bool", ANY_VALUE,
        "false: BatchNorm stays in inference mode, using and keeping its moving statistics, "
        "even in training."),
    ConfigKey(
        "grad_checkpoint", False, "bool", BOOLEAN,
        "Recompute each backbone block's activations in the backward pass instead of keeping "
        "them: less memory for about one more backbone forward pass per step."),
)
