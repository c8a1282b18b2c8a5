"""Models trained with tfmot wrappers, made plain for the exporters.

A pruned model's kernels are wrapped and masked during training; what is exported is the
plain network holding the masked (EMA) weights. Every other model is exported as it is.
"""

import tensorflow as tf
from absl import logging

from efficientdet_keras.checkpoint import variable_name
from efficientdet_keras.model import EfficientDetNet
from efficientdet_keras.model.weights import averaged_weights
from efficientdet_keras.optimization import is_pruning
from efficientdet_keras.optimization.pruning_keras import measure_sparsity, pruned_kernels


def strip_for_export(model):
    """What the exporters write: for a pruned model, the plain network with its masked
    (EMA) weights, the measured sparsity logged (`strip_pruning`); any other model
    unchanged."""
    if not is_pruning(model.config):
        return model
    return strip_and_report(model)[0]


def strip_pruning(model):
    """The plain network (no wrappers) holding the pruned model's masked weights.

    Takes the EMA weights when the model keeps an average, multiplied by the masks (the
    average of a pruned kernel is not exactly sparse). The result is an EfficientDetNet
    with the config minus model_optimizations, ready for any exporter.

    Returns:
      (plain model, SparsityReport measured on the plain model's weights).
    """
    config = model.config.copy()
    config.model_optimizations = {}
    plain = EfficientDetNet(config=config)
    plain.build_variables()
    kernels = pruned_kernels(model)
    masks = {id(kernel): mask for kernel, mask in kernels}
    with averaged_weights(model):
        values = {variable_name(v): v * masks[id(v)] if id(v) in masks else tf.identity(v)
                  for v in model.variables}
    for variable in plain.variables:
        variable.assign(values[variable_name(variable)])
    return plain, measure_sparsity(plain, [variable_name(kernel) for kernel, _ in kernels])


def strip_and_report(model):
    """`strip_pruning`, logging the measured sparsity (overall, then per kernel)."""
    plain, report = strip_pruning(model)
    logging.info("Exporting the pruned model: %s", report.summary())
    logging.info("Zeros per pruned kernel: %s", report.per_kernel())
    return plain, report
