"""Process-wide TensorFlow settings for a run, set in one place and undoable.

The model itself sets no global state (precision is passed to each layer and
XLA to compile()); what is truly global — random seeds, eager debugging and
the distribution strategy — is chosen here from flags.
"""

import contextlib
from typing import Optional

import tensorflow as tf
import tf_keras as keras

STRATEGIES = ("", "gpus", "multi-worker", "tpu")


def get_strategy(name: str) -> tf.distribute.Strategy:
    """'' (the default device), 'gpus' (MirroredStrategy over local GPUs, or the CPU),
    'multi-worker' (MultiWorkerMirroredStrategy from TF_CONFIG) or 'tpu'."""
    if name not in STRATEGIES:
        raise ValueError("Unknown strategy %r; choose one of %s"
                         % (name, ", ".join(repr(s) for s in STRATEGIES)))
    if not name:
        return tf.distribute.get_strategy()
    if name == "gpus":
        return tf.distribute.MirroredStrategy()
    if name == "multi-worker":
        return tf.distribute.MultiWorkerMirroredStrategy()
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver()
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)


def check_batch_divisible(batch_size: int, replicas: int) -> None:
    """Each replica gets batch_size / replicas images; anything else is a ValueError."""
    if batch_size % replicas:
        raise ValueError("--batch_size %d is not divisible by the %d replicas"
                         % (batch_size, replicas))


@contextlib.contextmanager
def run_settings(seed: Optional[int] = None, debug: bool = False):
    """Seeds Python, NumPy and TensorFlow; with debug, runs tf.functions eagerly and
    checks tensors for NaN/inf. Restores eager execution mode on exit."""
    eager_before = tf.config.functions_run_eagerly()
    if seed is not None:
        keras.utils.set_random_seed(seed)
    if debug:
        tf.config.run_functions_eagerly(True)
        tf.debugging.enable_check_numerics()
    try:
        yield
    finally:
        if debug:
            tf.debugging.disable_check_numerics()
        tf.config.run_functions_eagerly(eager_before)
