"""Gradient checkpointing: a layer whose activations are recomputed in the backward pass.

With `grad_checkpoint: true` each backbone block keeps only its input for the backward pass
and runs its forward again there (tf.recompute_grad), which cuts the activation memory of a
training step at the price of one more backbone forward.

Two things would make the recomputation differ from the forward it replaces, and are
handled here:
- BatchNorm in training mode updates its moving statistics as it runs, so a second run
  would update them twice per step; during the recomputation they are left alone.
- A random drop-connect mask drawn inside the block would be drawn again; callers draw it
  outside and pass it in (see EfficientNetBackbone).
"""

import contextlib
import threading
from typing import List

import tensorflow as tf
import tf_keras as keras


def batch_norms_of(layer: keras.layers.Layer) -> List[keras.layers.BatchNormalization]:
    return [sub for sub in layer.submodules if isinstance(sub, keras.layers.BatchNormalization)]


# The BatchNorms frozen on this thread. Thread-local: a MirroredStrategy builds each replica's
# step on its own thread, and one replica's recomputation must not freeze another's forward.
_FROZEN = threading.local()


def _frozen_ids() -> set:
    if not hasattr(_FROZEN, "ids"):
        _FROZEN.ids = set()
    return _FROZEN.ids


def _make_freezable(layer: keras.layers.BatchNormalization) -> None:
    """Routes the layer's two moving-statistics updates (Keras's _assign_moving_average and
    _assign_new_value, which every BatchNorm path uses) through a check of this thread's frozen
    set; a layer that is not frozen updates exactly as before. Once per layer."""
    if "_assign_moving_average" in vars(layer):
        return
    for method_name in ("_assign_moving_average", "_assign_new_value"):
        method = getattr(layer, method_name)

        def checked(variable, *args, _update=method):
            if id(layer) in _frozen_ids():
                return tf.identity(variable)
            return _update(variable, *args)

        object.__setattr__(layer, method_name, checked)  # Not tracked as a Keras attribute.


@contextlib.contextmanager
def moving_statistics_frozen(batch_norms: List[keras.layers.BatchNormalization]):
    """Within the block (and on this thread) these BatchNorms normalise as usual but leave
    their moving averages unchanged; Keras has no such mode."""
    ids = {id(layer) for layer in batch_norms}
    for layer in batch_norms:
        _make_freezable(layer)
    _frozen_ids().update(ids)
    try:
        yield
    finally:
        _frozen_ids().difference_update(ids)


def recomputed_call(layer: keras.layers.Layer, inputs: tf.Tensor, **kwargs) -> tf.Tensor:
    """`layer(inputs, **kwargs)` with its intermediate activations recomputed for the gradient
    instead of kept. Tensors in kwargs get no gradient (a drop-connect mask, say)."""
    batch_norms = batch_norms_of(layer)
    runs = []

    def forward(x):
        recomputing = bool(runs)
        runs.append(recomputing)
        with moving_statistics_frozen(batch_norms) if recomputing else contextlib.nullcontext():
            return layer(x, **kwargs)

    return tf.recompute_grad(forward)(inputs)
