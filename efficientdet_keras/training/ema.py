"""Exponential moving average of model weights, without tensorflow-addons.

The average covers the trainable weights and the BatchNorm moving statistics
(what the released checkpoints store under <name>/ExponentialMovingAverage).
Its decay warms up as min(decay, (1 + t) / (10 + t)), t being the step, so early
averages are not dominated by the random initial weights.

The averages live in their own variables; the model keeps its raw weights.
`swapped_in(model)` puts the averages into the model for evaluation or export
and restores the raw weights afterwards, so training always continues from the
raw weights. `ema_weights(model)` does the same for any model, with or without an
average, and batches the swap's cross-worker reads under multi-worker training.
"""

import contextlib
from typing import Dict, List

import tensorflow as tf

from efficientdet_keras.checkpoint import variable_name
from efficientdet_keras.model.weights import averaged_weights
from efficientdet_keras.training.workers import on_read_variables_reduced_together


def is_batch_norm_statistic(variable: tf.Variable) -> bool:
    """A BatchNorm moving mean or variance (what a training forward pass updates)."""
    return variable_name(variable).endswith(("/moving_mean", "/moving_variance"))


def averaged_variables(model) -> List[tf.Variable]:
    """Trainable variables plus BatchNorm moving statistics, in model order."""
    return [v for v in model.variables if v.trainable or is_batch_norm_statistic(v)]


def _shadow_variable(source: tf.Variable) -> tf.Variable:
    """A variable for the average of `source`, distributed as `source` is.

    Under a tf.distribute strategy each replica writes only its own copy, in replica context:
    - a trained weight (mirrored, written once per step with the all-reduced gradients) is the
      same on every replica, so its shadow (aggregation NONE) is too;
    - a BatchNorm moving statistic is per replica (synchronised on read, MEAN); its shadow is
      the same kind, so reading it gives the mean of the replicas' averages, which equals the
      average of the replicas' mean (the average is linear), what a checkpoint stores.
    Neither needs a cross-device read, which XLA cannot compile.
    """
    on_read = source.synchronization == tf.VariableSynchronization.ON_READ
    return tf.Variable(
        tf.identity(source), trainable=False, name="ema/" + variable_name(source),
        synchronization=(tf.VariableSynchronization.ON_READ if on_read
                         else tf.VariableSynchronization.AUTO),
        aggregation=(tf.VariableAggregation.MEAN if on_read else tf.VariableAggregation.NONE))


class ExponentialMovingAverage(tf.Module):
    """Shadow copies of a model's weights, updated after each optimizer step.

    Create it inside the distribution strategy scope, after the model is built.
    """

    def __init__(self, model, decay: float):
        super().__init__(name="ema")
        if not 0.0 < float(decay) <= 1.0:  # 0 would average nothing: the weights themselves.
            raise ValueError("ExponentialMovingAverage: decay must be in (0, 1], got %r (to "
                             "train without an average, moving_average_decay=0 makes none)"
                             % (decay,))
        self.decay = float(decay)
        self._sources = averaged_variables(model)
        with tf.init_scope():
            self.shadows = [_shadow_variable(v) for v in self._sources]

    def decay_at(self, step) -> tf.Tensor:
        step = tf.cast(step, tf.float32)
        return tf.minimum(self.decay, (1.0 + step) / (10.0 + step))

    def update(self, step, apply=True) -> None:
        """shadow = d * shadow + (1 - d) * weight, with d = decay_at(step). Graph friendly.

        Runs in a replica context (or outside any strategy) without merge_call, so it works
        where merge_call does not (XLA-compiled steps on GPUs, TPUs). Each replica updates
        its own copy of each shadow from its own copy of the weight; see _shadow_variable
        for why the copies agree. `apply` (a scalar bool tensor) false leaves every shadow
        as it is: the trainer passes whether the step was healthy, so the update needs no
        tf.cond, which over all the shadows would make the step's graph much larger.
        """
        rate = (1.0 - self.decay_at(step)) * tf.cast(apply, tf.float32)
        # shadow -= rate * (shadow - weight): exact (a constant weight is its own average) and
        # one kernel per variable that every device has (CPU, GPU, XLA). The subtraction is
        # written out, not assign_sub'ed, so the update reads each shadow once.
        rates = {}  # dtype -> rate, cast once for all variables of that dtype.
        for shadow, source in zip(self.shadows, self._sources):
            if shadow.dtype not in rates:
                rates[shadow.dtype] = tf.cast(rate, shadow.dtype)
            tf.raw_ops.ResourceApplyGradientDescent(
                var=shadow.handle, alpha=rates[shadow.dtype],
                delta=shadow.read_value() - tf.cast(source, shadow.dtype))

    def reset_to_model(self) -> None:
        """Starts the average again from the current weights (e.g. after loading a checkpoint)."""
        for shadow, source in zip(self.shadows, self._sources):
            shadow.assign(tf.convert_to_tensor(source))

    def shadow_of(self, variable: tf.Variable) -> tf.Variable:
        """The average kept for one of the model's variables (KeyError when not averaged)."""
        for shadow, source in zip(self.shadows, self._sources):
            if source is variable:
                return shadow
        raise KeyError("%s has no moving average" % variable_name(variable))

    def values_by_name(self) -> Dict[str, tf.Tensor]:
        """{variable name: EMA value}, the form save_ckpt writes."""
        return {variable_name(source): tf.convert_to_tensor(shadow)
                for shadow, source in zip(self.shadows, self._sources)}

    def _swap(self) -> None:
        for shadow, source in zip(self.shadows, self._sources):
            raw = tf.convert_to_tensor(source)
            source.assign(tf.convert_to_tensor(shadow))
            shadow.assign(raw)

    @contextlib.contextmanager
    def swapped_in(self):
        """Within the block the model holds the averaged weights; raw weights come back after."""
        self._swap()
        try:
            yield
        finally:
            self._swap()


@contextlib.contextmanager
def ema_weights(model):
    """A context in which the model holds its EMA weights (if it keeps any).

    Under multi-worker training each swap's cross-replica reads are batched
    (on_read_variables_reduced_together); elsewhere it is model.weights.averaged_weights.
    """
    ema = getattr(model, "ema", None)
    strategy = getattr(model, "distribute_strategy", None)
    if ema is None or not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        with averaged_weights(model):
            yield
        return
    swapped = list(ema.shadows) + list(ema._sources)
    with on_read_variables_reduced_together(swapped, strategy):
        ema._swap()
    try:
        yield
    finally:
        with on_read_variables_reduced_together(swapped, strategy):
            ema._swap()
