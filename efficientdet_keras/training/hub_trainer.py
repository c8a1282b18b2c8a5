"""EfficientDetNetTrainHub: fine-tuning a TF-Hub EfficientDet feature module.

The module (see exporters/hub_module.py) gives per-level class and box features;
this model adds new prediction convs for the config's num_classes, named like
the full model's (class_net/class-predict, box_net/box-predict), and trains
everything with the same train_step, losses, callbacks and CLI as
EfficientDetNetTrain.

The module's variables keep the names of the model it was exported from
(`efficientnet-b0/...`, `fpn_cells/...`), so `load_pretrained` (inherited)
loads a released or own checkpoint of that model into the module and the new
heads; a checkpoint of another model is the same ValueError as for
EfficientDetNetTrain.
"""

import tensorflow as tf

from efficientdet_keras.exporters.hub_module import local_module_path
from efficientdet_keras.model.efficientdet import num_anchors_per_location
from efficientdet_keras.model.heads import PredictionHead
from efficientdet_keras.training.trainer import EfficientDetNetTrain


class EfficientDetNetTrainHub(EfficientDetNetTrain):
    """EfficientDetNetTrain on top of `hub.KerasLayer(hub_module_url, trainable=True)`.

    Args:
      config: model config (levels, anchors, num_classes, training settings).
      hub_module_url: a local path, a file:// URL or a hub URL of a feature module.

    Raises:
      ValueError: the module cannot be loaded or does not return (class_features,
        box_features) with one map per level; the message names the URL.
    """

    def __init__(self, config, hub_module_url: str = None, **kwargs):
        config = config.copy()
        if hub_module_url:
            config.hub_module_url = hub_module_url
        if not config.get("hub_module_url"):
            raise ValueError("EfficientDetNetTrainHub needs hub_module_url")
        super().__init__(config, **kwargs)

    def _build_network(self) -> None:
        import tensorflow_hub as hub

        url = self.config.hub_module_url
        try:
            self.hub_layer = hub.KerasLayer(local_module_path(url), trainable=True,
                                            name="hub_features")
        except Exception as e:  # Hub raises many types (OSError, ValueError, tf errors).
            raise ValueError("Cannot load TF-Hub module %s: %s" % (url, str(e).splitlines()[0]))
        heads_only = self.config.copy()
        heads_only.box_class_repeats = 0  # The module already holds the shared head convs.
        anchors = num_anchors_per_location(self.config)
        self.class_net = PredictionHead("class", anchors * self.config.num_classes, heads_only,
                                        dtype=self.dtype_policy)
        self.box_net = PredictionHead("box", anchors * 4, heads_only, dtype=self.dtype_policy)

    def _module_features(self, images, training):
        features = self.hub_layer(tf.cast(images, tf.float32), training=training)
        levels = self.config.max_level - self.config.min_level + 1
        if not (isinstance(features, (tuple, list)) and len(features) == 2 and
                all(isinstance(f, (tuple, list)) and len(f) == levels for f in features)):
            raise ValueError("TF-Hub module %s must return (class_features, box_features), two "
                             "lists of %d feature maps (levels %d-%d); got %r"
                             % (self.config.hub_module_url, levels, self.config.min_level,
                                self.config.max_level, tf.nest.map_structure(
                                    lambda t: getattr(t, "shape", t), features)))
        return features

    def call(self, images, training=False):
        class_features, box_features = self._module_features(images, bool(training))
        with tf.name_scope(""):
            class_outputs = self.class_net(list(class_features), training=training)
            box_outputs = self.box_net(list(box_features), training=training)
        return ([tf.cast(x, tf.float32) for x in class_outputs],
                [tf.cast(x, tf.float32) for x in box_outputs])
