"""EfficientDetNet: backbone -> extra levels -> BiFPN -> class and box heads."""

from typing import List, Optional, Tuple

import tensorflow as tf
import tf_keras as keras

from efficientdet_keras.model.efficientnet import EfficientNetBackbone
from efficientdet_keras.config import Config, get_efficientdet_config, validate_config
from efficientdet_keras.model.bifpn import BiFPN, ResampleFeatureMap
from efficientdet_keras.model.heads import PredictionHead
from efficientdet_keras.model.layers import output_point
from efficientdet_keras.config.precision import policy_from_config

# The backbone provides levels 1..5; higher levels are made by resampling.
_BACKBONE_MAX_LEVEL = 5


def num_anchors_per_location(config: Config) -> int:
    return config.num_scales * len(config.aspect_ratios)


class EfficientDetNet(keras.Model):
    """The EfficientDet detection network (no pre- or post-processing).

    Called on normalised images `[B, H, W, 3]` (any H and W), returns
    `(class_outputs, box_outputs)`: two lists with one float32 tensor per level
    min_level..max_level, shaped `[B, H_l, W_l, A * num_classes]` and
    `[B, H_l, W_l, A * 4]`, where H_l = ceil(H / 2^l) and A = anchors per location.

    Variable names equal those of the released checkpoints (no model prefix, no
    numeric suffixes), however many models the process builds.
    """

    def __init__(self, model_name: Optional[str] = None, config: Optional[Config] = None,
                 name: Optional[str] = None, **kwargs):
        if config is None:
            config = get_efficientdet_config(model_name or "efficientdet-d0")
        elif model_name and model_name != config.name:
            raise ValueError("model_name %r disagrees with config.name %r; pass one of them"
                             % (model_name, config.name))
        config = validate_config(config.copy())
        kwargs.setdefault("dtype", policy_from_config(config))
        super().__init__(name=name or config.name, **kwargs)
        self.config = config
        self._build_network()

    def _build_network(self) -> None:
        """Creates the layers (subclasses that take features from elsewhere override it)."""
        config, policy = self.config, self.dtype_policy
        self.backbone = EfficientNetBackbone(config, dtype=policy)
        self.resample_layers = [
            ResampleFeatureMap(level - 1, level, config.fpn_num_filters, config,
                               name="resample_p%d" % level, dtype=policy)
            for level in range(_BACKBONE_MAX_LEVEL + 1, config.max_level + 1)]
        self.fpn_cells = BiFPN(config, dtype=policy)
        self.input_quant = output_point(config, "input_quant", dtype=policy)  # QAT: image range.
        anchors = num_anchors_per_location(config)
        self.class_net = PredictionHead("class", anchors * config.num_classes, config, dtype=policy)
        self.box_net = PredictionHead("box", anchors * 4, config, dtype=policy)

    def call(self, images, training=False) -> Tuple[List[tf.Tensor], List[tf.Tensor]]:
        training = bool(training)
        # Enter the root name scope so variables are named as in the released
        # checkpoints ("efficientnet-b0/...", not "efficientdet-d0/efficientnet-b0/...").
        with tf.name_scope(""):
            features = self.pyramid_features(images, training)
            class_outputs = self.class_net(features, training=training)
            box_outputs = self.box_net(features, training=training)
        # Losses and post-processing work in float32 whatever the compute dtype.
        return ([tf.cast(x, tf.float32) for x in class_outputs],
                [tf.cast(x, tf.float32) for x in box_outputs])

    def pyramid_features(self, images, training=False) -> List[tf.Tensor]:
        """Backbone levels, extra levels and BiFPN: [B, H_l, W_l, fpn_num_filters] per level."""
        config = self.config
        levels = self.backbone(self.input_quant(images), training=training)  # Levels 1..5.
        features = levels[config.min_level - 1:config.max_level]
        for resample in self.resample_layers:
            features.append(resample(features[-1], training=training))
        return self.fpn_cells(features, training=training)

    def head_features(self, images, training=False) -> Tuple[List[tf.Tensor], List[tf.Tensor]]:
        """The inputs of the class and box prediction convs, per level (a built model only).

        This is what a TF-Hub feature-vector module of the model returns.
        """
        with tf.name_scope(""):
            features = self.pyramid_features(images, training)
            return (self.class_net.head_features(features, training),
                    self.box_net.head_features(features, training))

    def build_variables(self) -> None:
        """Creates all variables with one forward pass on a small blank image.

        Runs eagerly even when called inside a tf.function, so variables exist
        (with their final names) before any training step is traced.
        """
        side = 2 ** self.config.max_level  # The smallest size with a 1x1 top level.
        with tf.init_scope():
            self(tf.zeros([1, side, side, 3]), training=False)

    def get_config(self):
        return {"config": self.config.as_dict(), "name": self.name}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        return cls(config=Config(config["config"]), name=config.get("name"))
