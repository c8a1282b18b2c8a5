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

from efficientdet_keras.model.efficientdet import num_anchors_per_location
from efficientdet_keras.model.heads import PredictionHead
from efficientdet_keras.training.hub_handles import (check_feature_contract, module_folder,
                                                     not_callable_reason)
from efficientdet_keras.training.trainer import EfficientDetNetTrain


class EfficientDetNetTrainHub(EfficientDetNetTrain):
    """EfficientDetNetTrain on top of `hub.KerasLayer(hub_module_url, trainable=True)`.

    Args:
      config: model config (levels, anchors, num_classes, training settings).
      hub_module_url: a feature module's local path, file:// URL, http(s) handle or Kaggle
        Models handle (see training.hub_handles).

    Raises:
      ValueError in one line naming the handle: the module cannot be downloaded or loaded,
        is a finished detector, or does not return (class_features, box_features) with one
        map per level of the config's levels and fpn_num_filters channels (checked on one
        image before any training).
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
        from efficientdet_keras.config.overrides import parse_image_size

        handle = self.config.hub_module_url
        folder = module_folder(handle)
        try:
            self.hub_layer = hub.KerasLayer(folder, trainable=True, name="hub_features")
        except Exception as e:  # Hub raises many types (OSError, ValueError, tf errors).
            if "non-callable" in str(e):
                raise ValueError(not_callable_reason(folder, handle, self.config)) from None
            raise ValueError("Cannot load TF-Hub module %s: %s"
                             % (handle, str(e).strip().splitlines()[0])) from None
        # One image through the module before any training: a module of another model, or
        # a detector, is one line here rather than an error deep in the first trace.
        image_hw = parse_image_size(self.config.image_size)
        try:
            probe = self.hub_layer(tf.zeros([1, image_hw[0], image_hw[1], 3]), training=False)
        except (TypeError, ValueError, tf.errors.OpError) as e:
            raise ValueError("TF-Hub module %s cannot be called on float32 images [1, %d, %d, "
                             "3] as a feature module is: %s" % (
                                 handle, image_hw[0], image_hw[1],
                                 str(e).strip().splitlines()[0])) from None
        check_feature_contract(probe, self.config, handle, image_hw)
        heads_only = self.config.copy()
        heads_only.box_class_repeats = 0  # The module already holds the shared head convs.
        anchors = num_anchors_per_location(self.config)
        self.class_net = PredictionHead("class", anchors * self.config.num_classes, heads_only,
                                        dtype=self.dtype_policy)
        self.box_net = PredictionHead("box", anchors * 4, heads_only, dtype=self.dtype_policy)

    def call(self, images, training=False):
        class_features, box_features = self.hub_layer(tf.cast(images, tf.float32),
                                                      training=bool(training))
        with tf.name_scope(""):
            class_outputs = self.class_net(list(class_features), training=training)
            box_outputs = self.box_net(list(box_features), training=training)
        return ([tf.cast(x, tf.float32) for x in class_outputs],
                [tf.cast(x, tf.float32) for x in box_outputs])
