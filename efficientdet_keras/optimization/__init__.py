"""Pruning and quantization-aware training (tensorflow-model-optimization) from the config.

`config.model_optimizations` holds at most one of:
  prune:    pruning settings (see `pruning.py`)
  quantize: quantization-aware training settings (see `quantization.py`)
An empty dict (the default) builds the plain network.

The network is subclassed, and tfmot's whole-model functions only take Sequential or
functional models, so each convolution is wrapped where it is built (`wrap_layer`).
The wrapper takes the wrapped layer's own name, so the variable names stay those of the
released checkpoints; what the wrappers add (masks, quantization ranges, step counters)
is listed by `checkpoint.wrapper_state_variables` and is not looked for in released checkpoints.

The settings' defaults and checks are in config/optimization_settings.py. This package
imports neither TensorFlow nor tfmot at import time: tfmot, slow to import, loads only for
a config that asks for an optimization.
"""


def wrap_layer(layer, config):
    """`layer`, wrapped for the optimization the config asks for (unchanged when none)."""
    settings = config.get("model_optimizations") or {}
    if not settings:
        return layer
    (kind, values), = settings.items()  # validate_config allows one.
    return _module(kind).wrap_layer(layer, dict(values or {}))


def quantize_output(layer, config):
    """`layer` (variable-free, e.g. an activation) with its output fake-quantized for
    quantization-aware training; unchanged otherwise (see `quantization.py`)."""
    settings = config.get("model_optimizations") or {}
    if "quantize" not in settings:
        return layer
    from efficientdet_keras.optimization import quantization
    return quantization.quantize_output(layer, dict(settings["quantize"] or {}))


def is_pruning(config) -> bool:
    """Whether the config asks for pruning (model_optimizations.prune)."""
    return "prune" in (config.get("model_optimizations") or {})


def is_quantization_aware(config) -> bool:
    """Whether the config asks for quantization-aware training (model_optimizations.quantize)."""
    return "quantize" in (config.get("model_optimizations") or {})


def _module(kind: str):
    """The module of one optimization, imported on first use (tfmot is slow to import)."""
    if kind == "prune":
        from efficientdet_keras.optimization import pruning
        return pruning
    from efficientdet_keras.optimization import quantization
    return quantization
