"""efficientdet_keras: EfficientDet training, evaluation and export with Keras Model.fit.

Keras 2 (the tf_keras package) is used throughout; TF_USE_LEGACY_KERAS is set
before TensorFlow loads so that `tf.keras` in user code is the same Keras.

The public names below are imported on first use, so that importing a
submodule (a command-line tool answering --help, the config) does not load
TensorFlow.
"""

import importlib
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

__version__ = "0.1.0"

# Public name -> the submodule that defines it.
_EXPORTS = {
    "restore_ckpt": "checkpoint", "save_ckpt": "checkpoint",
    "MODEL_NAMES": "config", "Config": "config", "get_efficientdet_config": "config",
    "validate_config": "config",
    "EfficientDetNet": "model",
    "Detector": "inference.detector", "Detections": "inference.results",
}

__all__ = ["Config", "Detections", "Detector", "EfficientDetNet", "MODEL_NAMES",
           "get_efficientdet_config", "restore_ckpt", "save_ckpt", "validate_config"]


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError("module %r has no attribute %r" % (__name__, name))
    value = getattr(importlib.import_module("%s.%s" % (__name__, _EXPORTS[name])), name)
    globals()[name] = value  # Later look-ups skip this function.
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
