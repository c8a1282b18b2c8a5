"""TF-Hub "feature-vector" modules of EfficientDet models, written and read by this package.

A module is a TF2 SavedModel whose object is callable as
`module(images, training=False) -> (class_features, box_features)`: for
normalised float32 images [B, H, W, 3] it returns, per pyramid level, the
inputs of the class and box prediction convs ([B, H_l, W_l, fpn_num_filters]).
It exposes `variables`, `trainable_variables` and `regularization_losses`, so
`hub.KerasLayer(path, trainable=True)` fine-tunes it, and its BatchNorms follow
the training flag.
"""

import os
import shutil

import tensorflow as tf

from efficientdet_keras.checkpoint import ensure_built, variable_name
from efficientdet_keras.utils.fileio import fsync_tree
from efficientdet_keras.exporters.strip import strip_for_export
from efficientdet_keras.model.weights import averaged_weights

_PREDICTION_LAYERS = ("class_net/class-predict/", "box_net/box-predict/")


# A plain trackable object (tf.Module would make `variables` a read-only property).
_Trackable = tf.__internal__.tracking.AutoTrackable


class FeatureModule(_Trackable):
    """The feature part of an EfficientDetNet (everything but the two prediction convs)."""

    def __init__(self, model):
        super().__init__()
        # Not tracked: the SavedModel holds the traced functions and the variables
        # below, not a Keras object graph.
        object.__setattr__(self, "_model", model)
        features = [v for v in model.variables
                    if not variable_name(v).startswith(_PREDICTION_LAYERS)]
        self.variables = features
        self.trainable_variables = [v for v in features if v.trainable]
        self.regularization_losses = []
        self.num_levels = model.config.max_level - model.config.min_level + 1
        self.fpn_num_filters = model.config.fpn_num_filters

    @tf.function(autograph=False)
    def __call__(self, images, training=False):
        return self._model.head_features(tf.cast(images, tf.float32), training=training)


def export_feature_module(model, export_dir: str) -> str:
    """Writes `model`'s feature module to export_dir (EMA weights when the model keeps them).

    Both training modes are traced, so hub.KerasLayer can switch BatchNorm behaviour. A
    pruned model is exported without its wrappers, its kernels masked (strip_for_export).
    """
    ensure_built(model)  # Variables must exist before tracing, to be saved with it.
    model = strip_for_export(model)
    with averaged_weights(model):
        module = FeatureModule(model)
        spec = tf.TensorSpec([None, None, None, 3], tf.float32)
        for training in (False, True):
            module.__call__.get_concrete_function(spec, training=training)
        tmp_dir = export_dir.rstrip("/") + ".tmp"
        tf.saved_model.save(module, tmp_dir)
    fsync_tree(tmp_dir)  # The rename below publishes complete files only.
    if os.path.exists(export_dir):
        shutil.rmtree(export_dir)
    os.replace(tmp_dir, export_dir)
    return export_dir

