"""The settings of `model_optimizations`: one row each (name, default, meaning), and
their checks.

`model_optimizations` holds at most one of
  prune:    magnitude pruning (optimization/pruning.py documents the keys)
  quantize: quantization-aware training (optimization/quantization.py documents the keys)
and `{}` (the default) for the plain network. The wrappers that apply the settings live
in efficientdet_keras.optimization; the checks are here so that checking a config
imports neither TensorFlow nor tensorflow-model-optimization.
"""

import re
from typing import Any, Dict, Mapping, NamedTuple, Tuple

from efficientdet_keras.config.keys.checks import is_integer, is_number, number_in

OPTIMIZATIONS = ("prune", "quantize")


class Setting(NamedTuple):
    """One setting of a model_optimizations entry, as the config reference lists it."""
    name: str
    default: Any
    meaning: str


PRUNE_SCHEDULES = ("polynomial_decay", "constant_sparsity")
PRUNE_SETTINGS: Tuple[Setting, ...] = (
    Setting("schedule", "polynomial_decay",
            "polynomial_decay (sparsity rises from initial_sparsity to target_sparsity between "
            "begin_step and end_step) or constant_sparsity (target_sparsity from begin_step "
            "on)."),
    Setting("target_sparsity", 0.5,
            "The share of zeros reached, then kept, in each pruned kernel, in [0, 1)."),
    Setting("begin_step", 0, "The first training step that prunes."),
    Setting("end_step", None,
            "polynomial_decay: the step where target_sparsity is reached (required); "
            "constant_sparsity: the last pruning step, -1 (the default there) to the end of "
            "training."),
    Setting("frequency", 100, "Training steps between updates of the pruning masks."),
    Setting("initial_sparsity", 0.0, "polynomial_decay only: the sparsity at begin_step."),
    Setting("power", 3.0,
            "polynomial_decay only: the exponent of the ramp (3: fast first, then slow)."),
    Setting("keep_dense", None,
            "A regex of variable names never pruned, e.g. '.*-predict/.*' for the prediction "
            "convolutions; null prunes every prunable kernel (Conv2D kernels and separable "
            "pointwise kernels; depthwise kernels never)."),
)
PRUNE_DEFAULTS: Dict[str, Any] = {setting.name: setting.default for setting in PRUNE_SETTINGS}
# Keys that only shape the polynomial_decay ramp; constant_sparsity rejects them.
_POLYNOMIAL_ONLY = ("initial_sparsity", "power")
_PRUNE_KEY_PREFIX = "model_optimizations.prune."
# Sparsities and the quantization ranges' decay.
_FRACTION = number_in(0.0, 1.0)

QUANTIZE_SETTINGS: Tuple[Setting, ...] = (
    Setting("per_channel", True,
            "One int8 scale per output channel of each convolution kernel (what TFLite uses "
            "for convolutions); false: one scale per kernel."),
    Setting("range_decay", 0.999,
            "Decay of the moving averages that learn each activation's range (tfmot's value); "
            "lower it for short fine-tuning runs."),
)
QUANTIZE_DEFAULTS: Dict[str, Any] = {setting.name: setting.default
                                     for setting in QUANTIZE_SETTINGS}


def check_optimization_settings(settings: Mapping[str, Any]) -> None:
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
        if kind == "prune":
            resolve_prune_settings(dict(values or {}))
        else:
            check_quantize_settings(dict(values or {}))


# --- prune -------------------------------------------------------------------

def resolve_prune_settings(settings: Mapping[str, Any]) -> Dict[str, Any]:
    """The pruning settings with defaults filled in, checked.

    Raises:
      ValueError naming the key (model_optimizations.prune.<key>) that is unknown or bad.
    """
    unknown = sorted(set(settings) - set(PRUNE_DEFAULTS))
    if unknown:
        raise ValueError("%s%s is not a pruning setting; known: %s"
                         % (_PRUNE_KEY_PREFIX, unknown[0], ", ".join(sorted(PRUNE_DEFAULTS))))
    resolved = dict(PRUNE_DEFAULTS, **settings)
    schedule = resolved["schedule"]
    _require(schedule in PRUNE_SCHEDULES, "schedule", schedule,
             "one of " + ", ".join(PRUNE_SCHEDULES))
    if schedule == "constant_sparsity":
        for key in _POLYNOMIAL_ONLY:
            _require(key not in settings, key, settings.get(key),
                     "left out: it applies to schedule polynomial_decay only")
        if resolved["end_step"] is None:
            resolved["end_step"] = -1  # tfmot: prune until training ends.
    for key in ("target_sparsity", "initial_sparsity"):
        _require(_FRACTION.accepts(resolved[key]), key, resolved[key], _FRACTION.allowed)
    _require(is_integer(resolved["begin_step"]) and resolved["begin_step"] >= 0, "begin_step",
             resolved["begin_step"], "an integer >= 0")
    _check_end_step(resolved)
    _require(is_integer(resolved["frequency"]) and resolved["frequency"] >= 1, "frequency",
             resolved["frequency"], "an integer >= 1")
    _require(is_number(resolved["power"]) and resolved["power"] > 0, "power",
             resolved["power"], "a positive number")
    _check_keep_dense(resolved["keep_dense"])
    return resolved


def _check_end_step(resolved: Dict[str, Any]) -> None:
    end_step, begin_step = resolved["end_step"], resolved["begin_step"]
    if resolved["schedule"] == "polynomial_decay":
        _require(end_step is not None, "end_step", end_step,
                 "given for schedule polynomial_decay: the step at which target_sparsity is "
                 "reached")
        _require(is_integer(end_step) and end_step > begin_step, "end_step", end_step,
                 "an integer > begin_step (%r)" % (begin_step,))
    else:
        _require(is_integer(end_step) and (end_step == -1 or end_step > begin_step), "end_step",
                 end_step, "-1 (prune until training ends) or an integer > begin_step (%r)"
                 % (begin_step,))


def _check_keep_dense(pattern) -> None:
    if pattern is None:
        return
    _require(isinstance(pattern, str), "keep_dense", pattern, "a regex of variable names")
    try:
        re.compile(pattern)
    except re.error as e:
        raise ValueError("%skeep_dense %r is not a valid regex: %s"
                         % (_PRUNE_KEY_PREFIX, pattern, e))


def _require(condition: bool, key: str, value, expected: str) -> None:
    """Raises the one-line error naming model_optimizations.prune.<key> unless `condition`."""
    if not condition:
        raise ValueError("%s%s must be %s; got %r" % (_PRUNE_KEY_PREFIX, key, expected, value))


# --- quantize ----------------------------------------------------------------

def check_quantize_settings(settings: Mapping[str, Any]) -> None:
    """Raises ValueError naming the key when `model_optimizations.quantize` is not usable."""
    unknown = sorted(set(settings) - set(QUANTIZE_DEFAULTS))
    if unknown:
        raise ValueError("model_optimizations.quantize: unknown key %s; known: %s"
                         % (", ".join(map(repr, unknown)), ", ".join(QUANTIZE_DEFAULTS)))
    if not isinstance(settings.get("per_channel", True), bool):
        raise ValueError("model_optimizations.quantize.per_channel must be true or false, got %r"
                         % (settings["per_channel"],))
    decay = settings.get("range_decay", QUANTIZE_DEFAULTS["range_decay"])
    if not _FRACTION.accepts(decay):
        raise ValueError("model_optimizations.quantize.range_decay must be in [0, 1), got %r"
                         % (decay,))


def quantize_settings_with_defaults(settings: Mapping[str, Any]) -> Dict[str, Any]:
    """The quantization settings with their defaults filled in (not checked)."""
    return dict(QUANTIZE_DEFAULTS, **dict(settings or {}))
