"""Magnitude pruning (tfmot `prune_low_magnitude`) from `model_optimizations.prune`.

    model_optimizations:
      prune:
        schedule: polynomial_decay   # or constant_sparsity
        target_sparsity: 0.5         # share of zeros reached (and kept) in each pruned kernel
        begin_step: 0                # first training step that prunes
        end_step: 2000               # polynomial_decay: target reached here (required);
                                     # constant_sparsity: last pruning step (-1: to the end)
        frequency: 100               # steps between mask updates
        initial_sparsity: 0.0        # polynomial_decay only: sparsity at begin_step
        power: 3                     # polynomial_decay only: exponent of the ramp
        keep_dense: null             # regex of variable names never pruned,
                                     # e.g. '.*-predict/.*' for the prediction convs

Pruned are the kernels tfmot knows how to prune: Conv2D `kernel` and SeparableConv2D
`pointwise_kernel`. DepthwiseConv2D kernels are not pruned (tfmot's registry lists no
prunable weight for them), so those layers are left unwrapped.

The settings' defaults and checks are in config/optimization_settings.py; this module
imports no TensorFlow, the Keras side is in `pruning_keras.py`.
"""

from typing import Any, Mapping

from efficientdet_keras.config.optimization_settings import resolve_prune_settings


def wrap_layer(layer, settings: Mapping[str, Any]):
    """A convolution in tfmot's pruning wrapper, under its own name (unchanged when tfmot
    prunes none of its weights)."""
    from efficientdet_keras.optimization import pruning_keras
    return pruning_keras.wrap_for_pruning(layer, resolve_prune_settings(settings))

