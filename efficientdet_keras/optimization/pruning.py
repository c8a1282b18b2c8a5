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

This module imports no TensorFlow (config checks use it); the Keras side is in
`pruning_keras.py`.
"""

import re
from typing import Any, Dict, Mapping

SCHEDULES = ("polynomial_decay", "constant_sparsity")
DEFAULTS: Dict[str, Any] = {
    "schedule": "polynomial_decay",
    "target_sparsity": 0.5,
    "begin_step": 0,
    "end_step": None,
    "frequency": 100,
    "initial_sparsity": 0.0,
    "power": 3.0,
    "keep_dense": None,
}
_POLYNOMIAL_ONLY = ("initial_sparsity", "power")
_KEY_PREFIX = "model_optimizations.prune."


def resolve_settings(settings: Mapping[str, Any]) -> Dict[str, Any]:
    """The settings with defaults filled in, checked.

    Raises:
      ValueError naming the key (model_optimizations.prune.<key>) that is unknown or bad.
    """
    unknown = sorted(set(settings) - set(DEFAULTS))
    if unknown:
        raise ValueError("%s%s is not a pruning setting; known: %s"
                         % (_KEY_PREFIX, unknown[0], ", ".join(sorted(DEFAULTS))))
    resolved = dict(DEFAULTS, **settings)
    schedule = resolved["schedule"]
    _require(schedule in SCHEDULES, "schedule", schedule, "one of " + ", ".join(SCHEDULES))
    if schedule == "constant_sparsity":
        for key in _POLYNOMIAL_ONLY:
            _require(key not in settings, key, settings.get(key),
                     "left out: it applies to schedule polynomial_decay only")
        if resolved["end_step"] is None:
            resolved["end_step"] = -1  # tfmot: prune until training ends.
    _require(_is_fraction(resolved["target_sparsity"]), "target_sparsity",
             resolved["target_sparsity"], "a number in [0, 1)")
    _require(_is_fraction(resolved["initial_sparsity"]), "initial_sparsity",
             resolved["initial_sparsity"], "a number in [0, 1)")
    _require(_is_int(resolved["begin_step"]) and resolved["begin_step"] >= 0, "begin_step",
             resolved["begin_step"], "an integer >= 0")
    _check_end_step(resolved)
    _require(_is_int(resolved["frequency"]) and resolved["frequency"] >= 1, "frequency",
             resolved["frequency"], "an integer >= 1")
    _require(_is_number(resolved["power"]) and resolved["power"] > 0, "power",
             resolved["power"], "a positive number")
    _check_regex(resolved["keep_dense"])
    return resolved


def check_settings(settings: Mapping[str, Any]) -> None:
    """Raises ValueError naming the key when the pruning settings are not usable."""
    resolve_settings(settings)


def wrap_layer(layer, settings: Mapping[str, Any]):
    """A convolution in tfmot's pruning wrapper, under its own name (unchanged when tfmot
    prunes none of its weights)."""
    from efficientdet_keras.optimization import pruning_keras
    return pruning_keras.wrap_for_pruning(layer, resolve_settings(settings))


def _check_end_step(resolved: Dict[str, Any]) -> None:
    end_step, begin_step = resolved["end_step"], resolved["begin_step"]
    if resolved["schedule"] == "polynomial_decay":
        _require(end_step is not None, "end_step", end_step,
                 "given for schedule polynomial_decay: the step at which target_sparsity is "
                 "reached")
        _require(_is_int(end_step) and end_step > begin_step, "end_step", end_step,
                 "an integer > begin_step (%r)" % (begin_step,))
    else:
        _require(_is_int(end_step) and (end_step == -1 or end_step > begin_step), "end_step",
                 end_step, "-1 (prune until training ends) or an integer > begin_step (%r)"
                 % (begin_step,))


def _check_regex(pattern) -> None:
    if pattern is None:
        return
    _require(isinstance(pattern, str), "keep_dense", pattern, "a regex of variable names")
    try:
        re.compile(pattern)
    except re.error as e:
        raise ValueError("%skeep_dense %r is not a valid regex: %s" % (_KEY_PREFIX, pattern, e))


def _require(condition: bool, key: str, value, expected: str) -> None:
    if not condition:
        raise ValueError("%s%s must be %s; got %r" % (_KEY_PREFIX, key, expected, value))


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_fraction(value) -> bool:
    return _is_number(value) and 0 <= value < 1
