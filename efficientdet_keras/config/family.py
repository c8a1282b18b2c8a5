"""The EfficientDet model family (D0-D7x and Lite0-Lite4) as data, and its configs.

Each model is one row of `MODEL_PRESETS`: the keys its config changes from
`default_config()`. Scaling the family up widens and deepens the BiFPN and the heads
together with the backbone and the input size.
"""

import copy
from typing import Any, Dict

from efficientdet_keras.config.container import Config
from efficientdet_keras.config.defaults import default_values

# Lite models: integer-friendly normalisation, relu6, and plain sum fusion.
_LITE = {"mean_rgb": [127.0], "stddev_rgb": [128.0], "act_type": "relu6",
         "fpn_weight_method": "sum"}

# Model name -> the keys its config changes from default_config().
MODEL_PRESETS: Dict[str, Dict[str, Any]] = {
    "efficientdet-d0": dict(backbone_name="efficientnet-b0", image_size=512,
                            fpn_num_filters=64, fpn_cell_repeats=3, box_class_repeats=3),
    "efficientdet-d1": dict(backbone_name="efficientnet-b1", image_size=640,
                            fpn_num_filters=88, fpn_cell_repeats=4, box_class_repeats=3),
    "efficientdet-d2": dict(backbone_name="efficientnet-b2", image_size=768,
                            fpn_num_filters=112, fpn_cell_repeats=5, box_class_repeats=3),
    "efficientdet-d3": dict(backbone_name="efficientnet-b3", image_size=896,
                            fpn_num_filters=160, fpn_cell_repeats=6, box_class_repeats=4),
    "efficientdet-d4": dict(backbone_name="efficientnet-b4", image_size=1024,
                            fpn_num_filters=224, fpn_cell_repeats=7, box_class_repeats=4),
    "efficientdet-d5": dict(backbone_name="efficientnet-b5", image_size=1280,
                            fpn_num_filters=288, fpn_cell_repeats=7, box_class_repeats=4),
    "efficientdet-d6": dict(backbone_name="efficientnet-b6", image_size=1280,
                            fpn_num_filters=384, fpn_cell_repeats=8, box_class_repeats=5,
                            fpn_weight_method="sum"),
    "efficientdet-d7": dict(backbone_name="efficientnet-b6", image_size=1536,
                            fpn_num_filters=384, fpn_cell_repeats=8, box_class_repeats=5,
                            fpn_weight_method="sum", anchor_scale=5.0),
    "efficientdet-d7x": dict(backbone_name="efficientnet-b7", image_size=1536,
                             fpn_num_filters=384, fpn_cell_repeats=8, box_class_repeats=5,
                             fpn_weight_method="sum", max_level=8),
    "efficientdet-lite0": dict(_LITE, backbone_name="efficientnet-lite0", image_size=320,
                               fpn_num_filters=64, fpn_cell_repeats=3, box_class_repeats=3,
                               anchor_scale=3.0),
    "efficientdet-lite1": dict(_LITE, backbone_name="efficientnet-lite1", image_size=384,
                               fpn_num_filters=88, fpn_cell_repeats=4, box_class_repeats=3,
                               anchor_scale=3.0),
    "efficientdet-lite2": dict(_LITE, backbone_name="efficientnet-lite2", image_size=448,
                               fpn_num_filters=112, fpn_cell_repeats=5, box_class_repeats=3,
                               anchor_scale=3.0),
    "efficientdet-lite3": dict(_LITE, backbone_name="efficientnet-lite3", image_size=512,
                               fpn_num_filters=160, fpn_cell_repeats=6, box_class_repeats=4,
                               anchor_scale=4.0),
    "efficientdet-lite3x": dict(_LITE, backbone_name="efficientnet-lite3", image_size=640,
                                fpn_num_filters=200, fpn_cell_repeats=6, box_class_repeats=4,
                                anchor_scale=3.0),
    "efficientdet-lite4": dict(_LITE, backbone_name="efficientnet-lite4", image_size=640,
                               fpn_num_filters=224, fpn_cell_repeats=7, box_class_repeats=4,
                               anchor_scale=4.0),
}

MODEL_NAMES = tuple(MODEL_PRESETS)


def default_config() -> Config:
    """The defaults shared by every EfficientDet model (COCO training recipe)."""
    return Config(default_values())


def get_efficientdet_config(model_name: str = "efficientdet-d0") -> Config:
    """Returns a fresh Config for one of `MODEL_NAMES`.

    Raises:
      ValueError: the name is not in the family; the message lists the known names.
    """
    if model_name not in MODEL_PRESETS:
        raise ValueError("Unknown model name %r; known models: %s"
                         % (model_name, ", ".join(MODEL_NAMES)))
    config = default_config()
    config.override(dict(name=model_name, **copy.deepcopy(MODEL_PRESETS[model_name])))
    return config
