"""Mixed-precision policy chosen from the config, without touching global state.

Layers receive the policy through their `dtype` argument, so building a model
never changes `tf_keras.mixed_precision.global_policy()`.
"""

import tensorflow as tf
import tf_keras as keras

_POLICY_NAMES = {
    False: "float32", None: "float32", "float32": "float32",
    "float16": "mixed_float16", "bfloat16": "mixed_bfloat16",
}


def policy_name(mixed_precision) -> str:
    """Maps the config's `mixed_precision` to a Keras policy name.

    `True` means float16 on GPU, bfloat16 on TPU, and float32 elsewhere (on a
    CPU neither half type is faster).
    """
    if mixed_precision is True:
        if tf.config.list_logical_devices("TPU"):
            return "mixed_bfloat16"
        if tf.config.list_logical_devices("GPU"):
            return "mixed_float16"
        return "float32"
    if mixed_precision not in _POLICY_NAMES:
        raise ValueError("mixed_precision must be false, true, 'float16' or 'bfloat16'; got %r"
                         % (mixed_precision,))
    return _POLICY_NAMES[mixed_precision]


def policy_from_config(config) -> keras.mixed_precision.Policy:
    return keras.mixed_precision.Policy(policy_name(config.mixed_precision))
