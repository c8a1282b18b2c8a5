"""Config keys of how training runs: precision, compilation, Grappler, distribution,
determinism."""

from typing import Any

from efficientdet_keras.config.keys.checks import (ANY_VALUE, BOOLEAN, Check, integer_at_least,
                                                   is_number, one_of)
from efficientdet_keras.config.keys.choices import (GRAPPLER_PASSES, MIXED_PRECISION_VALUES,
                                                    STRATEGIES)
from efficientdet_keras.config.keys.row import BOOL_OR_NAME, NAME_OR_NAMES, ConfigKey

TITLE = "Precision, compilation, distribution"


def _is_grappler_setting(value: Any) -> bool:
    names = [value] if isinstance(value, str) else value
    return value == "auto" or not value or (
        isinstance(names, (list, tuple)) and all(name in GRAPPLER_PASSES for name in names))


_LOSS_SCALE = Check(
    lambda value: value in (None, "dynamic") or (is_number(value) and value > 0),
    "null or dynamic (dynamic loss scaling) or a positive number (a fixed scale)")
_GRAPPLER_OFF = Check(_is_grappler_setting, "auto, none or a list of Grappler passes from %s"
                      % ", ".join(GRAPPLER_PASSES))

KEYS = (
    ConfigKey(
        "mixed_precision", False, "bool, str or null", one_of(*MIXED_PRECISION_VALUES),
        "float16 or bfloat16: compute in that type, variables in float32 (float16 adds loss "
        "scaling); true: float16 on GPU, bfloat16 on TPU; false or float32: float32; null: "
        "false, bfloat16 with --strategy=tpu.",
        form=BOOL_OR_NAME),
    ConfigKey(
        "loss_scale", None, "str, float or null", _LOSS_SCALE,
        "float16's loss scale: null or dynamic, the loss-scale optimizer's own (from 2 ** 15, "
        "halved at each overflow, doubled after 2000 steps without); a number: that scale, "
        "fixed (every non-finite gradient then stops training). No effect in float32 or "
        "bfloat16."),
    ConfigKey(
        "jit_compile", False, "bool", ANY_VALUE,
        "Compile the training step with XLA (the train command's --use_xla overrides it)."),
    ConfigKey(
        "grappler_off", "auto", "str, list of str or null", _GRAPPLER_OFF,
        "Grappler graph passes turned off in fit and evaluate: auto (the memory optimizer on a "
        "machine without GPU or TPU, for a faster first step), null (none) or pass names.",
        form=NAME_OR_NAMES),
    ConfigKey(
        "steps_per_execution", 1, "int", integer_at_least(1),
        "Training steps per tf.function call; more cut per-step overhead, and callbacks then "
        "run once per call."),
    ConfigKey(
        "strategy", "", "str", one_of(*STRATEGIES),
        "The train command's --strategy, recorded with the run: empty (the default device), "
        "gpus, multi-worker or tpu."),
    ConfigKey(
        "deterministic", False, "bool", BOOLEAN,
        "Repeatable training: TensorFlow's deterministic op implementations during fit, and a "
        "fixed seed (the train command's --tf_random_seed, 0 when not given), so two runs give "
        "the same weights; steps may be slower."),
)
