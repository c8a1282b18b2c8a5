"""Pruning and quantization-aware training (tensorflow-model-optimization) from the config.

`config.model_optimizations` holds at most one of:
  prune:    pruning settings (see `pruning.py`)
  quantize: quantization-aware training settings (see `quantization.py`)
An empty dict (the default) builds the plain network.

The network is subclassed, and tfmot's whole-model functions only take Sequential or
functional models, so each convolution is wrapped where it is built (`wrap_layer`).
The wrapper takes the wrapped layer's own name, so the variable names stay those of the
released checkpoints; what the wrappers add (masks, quantization ranges, step counters)
is listed by `wrapper_state_variables` and is not looked for in released checkpoints.

This package imports neither TensorFlow nor tfmot at import time: config.py uses
`check_settings`.
"""

from typing import Any, Mapping, Set

OPTIMIZATIONS = ("prune", "quantize")


def check_settings(settings: Mapping[str, Any]) -> None:
    """Raises ValueError naming the key when `model_optimizations` is not usable."""
    if not isinstance(settings, Mapping):
        raise ValueError("model_optimizations must be a dict with a 'prune' or 'quantize' "
                         "entry, got %r" % (settings,))
    unknown = sorted(set(settings) - set(OPTIMIZATIONS))
    if unknown:
        raise ValueError("model_optimizations: unknown entry %s; known: %s"
                         % (", ".join(map(repr, unknown)), ", ".join(OPTIMIZATIONS)))
    if len(settings) > 1:
        raise ValueError("model_optimizations: choose one of prune and quantize, not both")
    for kind, values in settings.items():
        if values is not None and not isinstance(values, Mapping):
            raise ValueError("model_optimizations.%s must be a dict of settings (or {}), got %r"
                             % (kind, values))
        _module(kind).check_settings(dict(values or {}))


def wrap_layer(layer, config):
    """`layer`, wrapped for the optimization the config asks for (unchanged when none)."""
    settings = config.get("model_optimizations") or {}
    if not settings:
        return layer
    (kind, values), = settings.items()  # check_settings allows one.
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


def strip_for_export(model):
    """What the exporters write: for a pruned model, the plain network with its masked
    (EMA) weights, the measured sparsity logged (pruning_keras.strip_pruning); any other
    model unchanged."""
    if not is_pruning(model.config):
        return model
    from efficientdet_keras.optimization import pruning_keras
    return pruning_keras.strip_and_report(model)[0]


def wrapper_state_variables(model) -> Set[int]:
    """ids of the variables the tfmot wrappers add (not in any released checkpoint)."""
    import tf_keras as keras  # Here, so that config checks do not import TensorFlow.
    ids = set()
    for layer in model.submodules:
        if isinstance(layer, keras.layers.Wrapper):
            inner = {id(v) for v in layer.layer.variables}
            ids.update(id(v) for v in layer.variables if id(v) not in inner)
    return ids


def _module(kind: str):
    """The module of one optimization, imported on first use (tfmot is slow to import)."""
    if kind == "prune":
        from efficientdet_keras.optimization import pruning
        return pruning
    from efficientdet_keras.optimization import quantization
    return quantization
