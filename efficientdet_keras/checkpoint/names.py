"""Checkpoint keys of model variables, in the layout of the released checkpoints.

Keys are variable names without ":0", e.g. `efficientnet-b0/stem/conv2d/kernel`; EMA values sit
under `<name>/ExponentialMovingAverage`.
"""

from typing import Set

import tensorflow as tf
import tf_keras as keras

EMA_SUFFIX = "/ExponentialMovingAverage"


def variable_name(variable: tf.Variable) -> str:
    """The checkpoint key of a model variable: its name without the ":0" suffix."""
    name = variable.name
    return name[:-2] if name.endswith(":0") else name


def wrapper_state_variables(model) -> Set[int]:
    """ids of the variables the tfmot wrappers add (not in any released checkpoint)."""
    ids = set()
    for layer in model.submodules:
        if isinstance(layer, keras.layers.Wrapper):
            inner = {id(v) for v in layer.layer.variables}
            ids.update(id(v) for v in layer.variables if id(v) not in inner)
    return ids
