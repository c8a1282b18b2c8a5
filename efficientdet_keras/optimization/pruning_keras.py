"""The Keras side of pruning: tfmot's wrapper under the layer's own name, the per-step mask
update, the training callbacks for a subclassed model, and measuring sparsity.

tfmot's wrapper counts its own calls as training steps and updates its masks in every
call; EfficientDet's heads call their convs once per level, and tfmot's callbacks find
wrappers only in nested Models (`model.layers`), not in nested layers. So here the wrapper
is called as the plain layer, the trainer calls `update_masks` once per step with the
optimizer's step (tfmot's schedule and mask computation), and the wrappers are found
through `model.submodules`.

After an optimizer step the pruned entries of a kernel are no longer zero (the next step
masks them again), and its moving average (EMA) never is exactly sparse: `PruningStep`
masks both at each epoch end, before evaluation and checkpoints, and the exporters' stripping
(exporters/strip.py) masks what is exported.
"""

import dataclasses
import os
import re
from typing import Dict, List, Optional, Tuple

import numpy as np
import tensorflow as tf
import tf_keras as keras
from tensorflow_model_optimization.python.core.sparsity.keras import (pruning_callbacks,
                                                                      pruning_schedule,
                                                                      pruning_wrapper)

from efficientdet_keras.checkpoint import variable_name

# The weights tfmot's PruneRegistry prunes, by layer type (it lists none for DepthwiseConv2D).
PRUNED_WEIGHTS = {
    keras.layers.SeparableConv2D: ("pointwise_kernel",),
    keras.layers.Conv2D: ("kernel",),
}


class PrunedLayer(pruning_wrapper.PruneLowMagnitude):
    """tfmot's PruneLowMagnitude named like the layer it wraps, so that its variables keep the
    released names (tfmot would name it prune_low_magnitude_<name>).

    Args:
      layer: a Conv2D or SeparableConv2D (not built).
      keep_dense: a compiled regex; weights whose full variable names match it are not pruned.
      **kwargs: PruneLowMagnitude's (pruning_schedule, ...).
    """

    def __init__(self, layer, keep_dense: Optional[re.Pattern] = None, **kwargs):
        super().__init__(layer, **kwargs)
        self._name = layer.name  # The name scope of the inner layer's variables.
        self._keep_dense = keep_dense

    def build(self, input_shape):
        if not self.layer.built:  # Here, not in Wrapper.build: the filter needs the names.
            self.layer.build(input_shape)
            self.layer.built = True
        if self._keep_dense is not None:
            pruned = [weight for weight in self.layer.get_prunable_weights()
                      if not self._keep_dense.match(variable_name(weight))]
            self.layer.get_prunable_weights = lambda: pruned
        super().build(input_shape)

    def call(self, inputs, training=None, **kwargs):
        # tfmot counts calls here and updates the masks in every call, but the heads call
        # their convs once per level: `update_masks` does it once per training step instead.
        del training
        return self.layer.call(inputs, **kwargs)


def update_masks(model, step) -> None:
    """One training step of tfmot's pruning, before the forward pass: the wrappers' step is
    set to `step` (the 1-based optimizer step), masks are recomputed when the schedule says
    so, and the kernels are multiplied by their masks. Works in a tf.function and under a
    distribution strategy (in a replica, the update runs once, in cross-replica context)."""
    def update(strategy=None):
        del strategy
        for wrapper in pruning_wrappers(model):
            wrapper.pruning_step.assign(tf.cast(step, tf.int64))
            with tf.control_dependencies([wrapper.pruning_obj.conditional_mask_update()]):
                wrapper.pruning_obj.weight_mask_op()

    replica_context = tf.distribute.get_replica_context()
    if replica_context is None:
        update()
    else:
        replica_context.merge_call(update)


def wrap_for_pruning(layer, settings: Dict):
    """`layer` in a PrunedLayer with the schedule of (resolved) `settings`; layers tfmot
    prunes nothing of (DepthwiseConv2D) come back unchanged."""
    if not isinstance(layer, tuple(PRUNED_WEIGHTS)):
        return layer
    keep_dense = re.compile(settings["keep_dense"]) if settings["keep_dense"] else None
    return PrunedLayer(layer, keep_dense=keep_dense, pruning_schedule=make_schedule(settings))


def make_schedule(settings: Dict) -> pruning_schedule.PruningSchedule:
    """tfmot's PolynomialDecay or ConstantSparsity from resolved pruning settings."""
    if settings["schedule"] == "constant_sparsity":
        return pruning_schedule.ConstantSparsity(
            settings["target_sparsity"], settings["begin_step"], settings["end_step"],
            settings["frequency"])
    return pruning_schedule.PolynomialDecay(
        settings["initial_sparsity"], settings["target_sparsity"], settings["begin_step"],
        settings["end_step"], settings["power"], settings["frequency"])


def pruning_wrappers(model) -> List[pruning_wrapper.PruneLowMagnitude]:
    """Every built tfmot pruning wrapper in the model, nested ones included, in model order
    (a layer the network never calls, such as a resampling conv it does not need, is never
    built and has no weights)."""
    found, seen = [], set()
    for layer in model.submodules:
        if isinstance(layer, pruning_wrapper.PruneLowMagnitude) and layer.built and \
                id(layer) not in seen:
            seen.add(id(layer))
            found.append(layer)
    return found


def pruned_kernels(model) -> List[Tuple[tf.Variable, tf.Variable]]:
    """(kernel, mask) of every pruned weight of the model."""
    return [(weight, mask) for wrapper in pruning_wrappers(model)
            for weight, mask, _ in wrapper.pruning_vars]


def apply_masks(model) -> None:
    """kernel *= mask for every pruned kernel, and the same for its moving average."""
    ema = getattr(model, "ema", None)
    for kernel, mask in pruned_kernels(model):
        kernel.assign(kernel * mask)
        if ema is not None:
            shadow = ema.shadow_of(kernel)
            shadow.assign(shadow * tf.cast(mask, shadow.dtype))


class PruningStep(pruning_callbacks.UpdatePruningStep):
    """tfmot's UpdatePruningStep for subclassed models (wrappers found in nested layers).

    The step itself comes from the optimizer (the trainer calls `update_masks` in each
    step, so a resumed run continues the schedule where its backup was). At each epoch end
    this masks the kernels and their moving averages, so that evaluation, checkpoints and
    backups hold exactly sparse kernels. Put it first among the callbacks.
    """

    def on_train_begin(self, logs=None):
        self.prunable_layers = pruning_wrappers(self.model)

    def on_epoch_end(self, epoch, logs=None):
        apply_masks(self.model)


class PruningSummaries(keras.callbacks.Callback):
    """The sparsity of the pruned kernels, written for TensorBoard at each epoch end.

    Into log_dir/metrics, at the optimizer step: the sparsity of every mask
    (<mask name>/sparsity), its threshold (<threshold name>/threshold) and the share of zeros
    over all pruned kernels (pruning/sparsity), as tfmot's PruningSummaries names them. Beside
    the run's TensorBoard callback rather than in place of it (tfmot's is a TensorBoard), so
    that one TensorBoard class serves pruned and unpruned runs alike.
    """

    def __init__(self, log_dir: str):
        super().__init__()
        self.log_dir = log_dir
        self._writer = None

    def on_epoch_end(self, epoch, logs=None):
        pruning_logs = {}
        for wrapper in pruning_wrappers(self.model):
            for _, mask, threshold in wrapper.pruning_vars:
                pruning_logs[mask.name + "/sparsity"] = 1.0 - float(np.mean(mask.numpy()))
                pruning_logs[threshold.name + "/threshold"] = float(threshold.numpy())
        pruning_logs["pruning/sparsity"] = measure_sparsity(self.model).overall
        if self._writer is None:
            self._writer = tf.summary.create_file_writer(os.path.join(self.log_dir, "metrics"))
        step = int(self.model.optimizer.iterations.numpy())
        with self._writer.as_default():
            for name, value in pruning_logs.items():
                tf.summary.scalar(name, value, step=step)
        self._writer.flush()

    def on_train_end(self, logs=None):
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def training_callbacks(model_dir: str) -> Tuple[PruningStep, PruningSummaries]:
    """The pruning step callback (to put first) and the sparsity summaries for model_dir."""
    return PruningStep(), PruningSummaries(model_dir)


@dataclasses.dataclass
class SparsityReport:
    """Zeros in the pruned kernels: {variable name: (zeros, size)}."""
    kernels: Dict[str, Tuple[int, int]]

    @property
    def overall(self) -> float:
        """Share of zeros over all pruned kernels together (0 without any)."""
        size = sum(total for _, total in self.kernels.values())
        return sum(zeros for zeros, _ in self.kernels.values()) / size if size else 0.0

    def share(self, name: str) -> float:
        zeros, size = self.kernels[name]
        return zeros / size

    def summary(self) -> str:
        """One line: the overall share of zeros and its range over the kernels."""
        shares = [self.share(name) for name in self.kernels]
        return ("%.1f%% zeros in the %d pruned kernels (per kernel %.1f%% to %.1f%%)"
                % (100 * self.overall, len(shares), 100 * min(shares, default=0),
                   100 * max(shares, default=0)))

    def per_kernel(self) -> str:
        return ", ".join("%s %.1f%%" % (name, 100 * self.share(name)) for name in self.kernels)


def measure_sparsity(model, names: Optional[List[str]] = None) -> SparsityReport:
    """Counts the zeros of the pruned kernels of `model` (a pruned model), or of the
    variables called `names` (in any model, e.g. a stripped one)."""
    if names is None:
        kernels = [kernel for kernel, _ in pruned_kernels(model)]
    else:
        by_name = {variable_name(v): v for v in model.variables}
        kernels = [by_name[name] for name in names]
    return SparsityReport({variable_name(kernel): (int(np.sum(kernel.numpy() == 0)),
                                                   int(np.prod(kernel.shape)))
                           for kernel in kernels})
