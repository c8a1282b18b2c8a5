"""Scalar state a run keeps in its checkpoints beside the weights (NaN recovery's scale, the
schedule's pace): variables that every replica of a distributed run agrees on."""

import tensorflow as tf


def scalar_variable(value, dtype, name: str) -> tf.Variable:
    """A variable every replica holds the same value of (the first replica's writes win)."""
    return tf.Variable(tf.constant(value, dtype), trainable=False, name=name,
                       aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)


def replica_local_variable(value, dtype, name: str) -> tf.Variable:
    """A variable each replica writes on its own, in its step, without merge_call (which
    XLA-compiled replica steps on GPUs cannot make). The replicas write the same values
    (what they record is decided on all-reduced values), so a read takes the first one's,
    with no cross-device or cross-worker traffic."""
    return tf.Variable(tf.constant(value, dtype), trainable=False, name=name,
                       synchronization=tf.VariableSynchronization.ON_READ,
                       aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
