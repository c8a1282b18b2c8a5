"""efficientdet_keras: EfficientDet training, evaluation and export with Keras Model.fit.

Keras 2 (the tf_keras package) is used throughout; TF_USE_LEGACY_KERAS is set
before TensorFlow loads so that `tf.keras` in user code is the same Keras.
"""

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

from efficientdet_keras.checkpoint import restore_ckpt, save_ckpt  # noqa: E402
from efficientdet_keras.config import (MODEL_NAMES, Config, get_efficientdet_config,  # noqa: E402
                                       validate_config)
from efficientdet_keras.model import EfficientDetNet  # noqa: E402

__version__ = "0.1.0"

__all__ = ["Config", "EfficientDetNet", "MODEL_NAMES", "get_efficientdet_config",
           "restore_ckpt", "save_ckpt", "validate_config"]
