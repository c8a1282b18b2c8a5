"""Exponential moving average of model weights, without tensorflow-addons.

The average covers the trainable weights and the BatchNorm moving statistics
(what the released checkpoints store under <name>/ExponentialMovingAverage).
Its decay warms up as min(decay, (1 + t) / (10 + t)), t being the step, so early
averages are not dominated by the random initial weights.

The averages live in their own variables; the model keeps its raw weights.
`swapped_in(model)` puts the averages into the model for evaluation or export
and restores the raw weights afterwards, so training always continues from the
raw weights.
"""

import contextlib
from typing import Dict, List

import tensorflow as tf

from efficientdet_keras.checkpoint import variable_name


def is_batch_norm_statistic(variable: tf.Variable) -> bool:
    """A BatchNorm moving mean or variance (what a training forward pass updates)."""
    return variable_name(variable).endswith(("/moving_mean", "/moving_variance"))


def averaged_variables(model) -> List[tf.Variable]:
    """Trainable variables plus BatchNorm moving statistics, in model order."""
    return [v for v in model.variables if v.trainable or is_batch_norm_statistic(v)]


class ExponentialMovingAverage(tf.Module):
    """Shadow copies of a model's weights, updated after each optimizer step.

    Create it inside the distribution strategy scope, after the model is built.
    """

    def __init__(self, model, decay: float):
        super().__init__(name="ema")
        self.decay = float(decay)
        self._sources = averaged_variables(model)
        with tf.init_scope():
            # ONLY_FIRST_REPLICA: every replica computes the same update (the
            # update runs in cross-replica context through merge_call anyway).
            self.shadows = [
                tf.Variable(tf.identity(v), trainable=False, name="ema/" + variable_name(v),
                            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
                for v in self._sources]

    def decay_at(self, step) -> tf.Tensor:
        step = tf.cast(step, tf.float32)
        return tf.minimum(self.decay, (1.0 + step) / (10.0 + step))

    def update(self, step) -> None:
        """shadow = d * shadow + (1 - d) * weight, with d = decay_at(step). Graph friendly."""
        def apply(strategy):
            del strategy
            decay = self.decay_at(step)
            for shadow, source in zip(self.shadows, self._sources):
                # Cross-replica reads of BatchNorm statistics average the replicas.
                shadow.assign(decay * shadow + (1.0 - decay) * tf.cast(source, shadow.dtype))

        replica_context = tf.distribute.get_replica_context()
        if replica_context is None:
            apply(tf.distribute.get_strategy())
        else:
            replica_context.merge_call(apply)

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
