"""What each config value may be: types kept by overrides, ranges and choices of single keys
(`allowed_values` gives their text to the config reference page), and the checks across keys
that `validate_config` runs before a model is built.

A wrong value fails here in one line naming the key, instead of as a ZeroDivisionError
or a shape error deep inside TensorFlow.
"""

from typing import Any, Dict, Mapping

from efficientdet_keras.config.label_maps import NAMED_LABEL_MAPS, label_names
from efficientdet_keras.config.optimization_settings import check_optimization_settings

# Keys whose values are always stored as tuples; YAML has no tuples, so they
# are normalised again on load, which keeps save/load round trips exact.
TUPLE_KEYS = ("image_size",)
# Keys holding free-form mappings (class id -> name): plain dicts, not nested Configs.
PLAIN_DICT_KEYS = ("label_map", "model_optimizations")
# Boolean keys that also take a string (mixed_precision: "float16" or "bfloat16").
_BOOL_OR_STRING_KEYS = ("mixed_precision",)
# String keys that also take a list of strings (grappler_off: "auto" or pass names).
_STRING_OR_LIST_KEYS = ("grappler_off",)

# Names accepted for act_type; the functions live in model/layers.py.
ACTIVATIONS = ("swish", "silu", "swish_native", "relu", "relu6", "hswish", "leaky_relu",
               "mish")

# Grappler passes grappler_off may name (fields of TensorFlow's RewriterConfig; see
# training/grappler.py). "second_iteration" is Grappler's second round over all the passes.
GRAPPLER_PASSES = ("memory_optimization", "arithmetic_optimization", "dependency_optimization",
                   "constant_folding", "layout_optimizer", "remapping", "loop_optimization",
                   "shape_optimization", "function_optimization", "second_iteration")

# Values of autoaugment_policy: off, the detection policies v0-v3, RandAugment.
AUTOAUGMENT_POLICIES = (None, "v0", "v1", "v2", "v3", "randaug")

# Values the code that reads these keys accepts, spelled out here because that code imports
# TensorFlow and checking a config must not: model/bifpn.py (fusion, pooling),
# config/precision.py, detection/losses.py and detection/postprocess.py, training/optimizers.py,
# training/runtime.py and model/efficientnet.py.
FPN_WEIGHT_METHODS = ("fastattn", "attn", "channel_attn", "channel_fastattn", "sum")
POOLING_TYPES = ("max", "avg")
MIXED_PRECISION_VALUES = (False, True, "float16", "bfloat16", "float32", None)
# For iou_loss_type and nms_configs.method, null and "" also go: the loss is then off (the
# trainer tests truthiness) and post-processing runs hard NMS.
IOU_LOSS_TYPES = ("iou", "giou", "diou", "ciou")
NMS_METHODS = ("hard", "gaussian", "combined", "global")
# How an image meets the network input: keeping its aspect ratio and padding (letterbox), or
# resized to the input on each axis alone, as MediaPipe and the Task Library do (stretch).
RESIZE_MODES = ("letterbox", "stretch")
OPTIMIZERS = ("sgd", "adam", "rmsprop")
LR_DECAY_METHODS = ("cosine", "stepwise", "polynomial", "constant")
STRATEGIES = ("", "gpus", "multi-worker", "tpu")
BACKBONES = tuple("efficientnet-b%d" % i for i in range(8)) + tuple(
    "efficientnet-lite%d" % i for i in range(5))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _in_range(low: float, high: float, high_included: bool = False):
    """A check that a number lies in [low, high) (or [low, high])."""
    def check(value):
        return _is_number(value) and low <= value and (value <= high if high_included
                                                         else value < high)
    return check


def format_value(value: Any) -> str:
    """A value as YAML and override strings write it: null, true, float16, [1.0, 2.0], 0.001."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        text = "%.10g" % value  # 57.120000000000005 reads as 57.12.
        return text if any(c in text for c in ".en") else text + ".0"
    if isinstance(value, (list, tuple)):
        return "[%s]" % ", ".join(format_value(item) for item in value)
    if isinstance(value, Mapping):
        return "{%s}" % ", ".join("%s: %s" % (format_value(k), format_value(v))
                                  for k, v in value.items())
    if value == "":
        return '""'
    return str(value)


def _one_of(*choices):
    """A rule accepting exactly `choices`, its text naming them ("one of a, b or c")."""
    names = [format_value(choice) for choice in choices]
    return (lambda value: value in choices,
            "one of %s or %s" % (", ".join(names[:-1]), names[-1]))


def _is_number_list(value: Any, lengths=None) -> bool:
    return isinstance(value, (list, tuple)) and bool(value) and \
        all(_is_number(item) for item in value) and (lengths is None or len(value) in lengths)


def _is_grappler_setting(value: Any) -> bool:
    names = [value] if isinstance(value, str) else value
    return value == "auto" or not value or (
        isinstance(names, (list, tuple)) and all(name in GRAPPLER_PASSES for name in names))


def _is_label_map(value: Any) -> bool:
    if value is None or isinstance(value, str):
        return value is None or value in NAMED_LABEL_MAPS
    return isinstance(value, Mapping) and all(
        (_is_int(k) or (isinstance(k, str) and k.isdigit())) and int(k) >= 1 for k in value)


# Single values with a valid range, checked by every override and by validate_config:
# dotted key -> (check, what the value must be).
_VALUE_RULES = {
    **{key: (lambda v: _is_int(v) and v >= 1, "a positive integer") for key in (
        "batch_size", "num_epochs", "num_classes", "steps_per_execution", "map_freq",
        "max_instances_per_image", "fpn_num_filters", "fpn_cell_repeats", "num_scales", "nms_configs.max_output_size", "tflite_max_detections",
        "tflite_max_classes_per_detection", "tflite_detections_per_class",
        "randaugment_num_layers")},
    "steps_per_epoch": (lambda v: v is None or (_is_int(v) and v >= 1),
                        "none or a positive integer"),
    "nms_configs.max_nms_inputs": (lambda v: _is_int(v) and v >= 0,
                                   "a non-negative integer (0 keeps all)"),
    **{key: (lambda v: _is_int(v) and v >= 0, "a non-negative integer") for key in (
        "nan_recovery_attempts", "mosaic_close_epochs",
        # 0: the prediction convs alone (a TF-Hub module's heads, which hold the shared ones).
        "box_class_repeats")},
    "backup_steps": (lambda v: _is_int(v) and v >= 0, "a non-negative integer (0: epoch ends)"),
    **{key: (lambda v: _is_number(v) and v > 0, "a positive number") for key in (
        "learning_rate", "jitter_min", "jitter_max", "batch_norm_epsilon", "anchor_scale",
        "rmsprop_epsilon")},
    **{key: (lambda v: _is_number(v) and v >= 0, "a non-negative number") for key in (
        "lr_warmup_init", "lr_warmup_epoch", "weight_decay", "clip_gradients_norm",
        "box_loss_weight", "iou_loss_weight", "first_lr_drop_epoch", "second_lr_drop_epoch")},
    **{key: (_in_range(0.0, 1.0), "a number in [0, 1)") for key in (
        "momentum", "moving_average_decay", "label_smoothing", "batch_norm_momentum",
        "rmsprop_rho")},
    **{key: (_in_range(0.0, 1.0, high_included=True), "a number in [0, 1]") for key in (
        "nms_configs.iou_thresh", "nms_configs.score_thresh")},
    **{key: (_in_range(0.0, 1.0, high_included=True), "a probability in [0, 1]") for key in (
        "mosaic", "mixup")},
    "nan_recovery_lr_factor": (lambda v: _is_number(v) and 0 < v < 1, "a number in (0, 1)"),
    "randaugment_magnitude": (_in_range(0.0, 30.0, high_included=True), "a number in [0, 30]"),
    "backbone_blocks_per_stage": (lambda v: v is None or (_is_int(v) and v >= 1),
                                  "null or a positive integer"),
    "backbone_survival_prob": (lambda v: v is None or (_is_number(v) and 0 < v <= 1),
                               "null or a number in (0, 1]"),
    **{key: (lambda v: isinstance(v, bool), "true or false") for key in (
        "batch_norm_renorm", "grid_mask", "fold_batch_norm", "grad_checkpoint",
        "clip_gradients_per_tensor", "deterministic")},
    "sync_batch_norm": (lambda v: v is None or isinstance(v, bool),
                        "null (on with more than one replica), true or false"),
    "aspect_ratios": (lambda v: _is_number_list(v) and all(r > 0 for r in v),
                      "a non-empty list of positive numbers"),
    **{key: (lambda v: _is_number_list(v, lengths=(1, 3)), "a list of 1 or 3 numbers")
       for key in ("mean_rgb", "stddev_rgb")},
    "fpn_weight_method": _one_of(*FPN_WEIGHT_METHODS),
    "fpn_name": _one_of(None, "bifpn", "bifpn_dyn", "qufpn"),
    "pooling_type": _one_of(*POOLING_TYPES),
    "resize_mode": _one_of(*RESIZE_MODES),
    "optimizer": _one_of(*OPTIMIZERS),
    "lr_decay_method": _one_of(*LR_DECAY_METHODS),
    "strategy": _one_of(*STRATEGIES),
    "backbone_name": _one_of(*BACKBONES),
    "tta": _one_of(None, "", "flip"),
    "act_type": _one_of(*ACTIVATIONS),
    "autoaugment_policy": _one_of(*AUTOAUGMENT_POLICIES),
    "iou_loss_type": _one_of(None, "", *IOU_LOSS_TYPES),
    "nms_configs.method": _one_of(None, "", *NMS_METHODS),
    "mixed_precision": _one_of(*MIXED_PRECISION_VALUES),
    "loss_scale": (lambda v: v in (None, "dynamic") or (_is_number(v) and v > 0),
                   "null or dynamic (dynamic loss scaling) or a positive number (a fixed scale)"),
    "label_map": (_is_label_map, "null, a dict {class id: name} with ids from 1, or one of %s"
                  % ", ".join(sorted(NAMED_LABEL_MAPS))),
    "grappler_off": (_is_grappler_setting, "auto, none or a list of Grappler passes from %s"
                     % ", ".join(GRAPPLER_PASSES)),
    "mlflow_tracking_uri": (lambda v: v is None or (isinstance(v, str) and bool(v.strip())),
                            "null (no tracking) or a tracking URI such as http://host:5000"),
    "mlflow_experiment": (lambda v: isinstance(v, str) and bool(v.strip()),
                          "an experiment name (not empty)"),
}


def allowed_values(key: str) -> str:
    """What `key` (a dotted key) may hold, as the error messages say it; "" when any value
    of the key's type goes."""
    rule = _VALUE_RULES.get(key)
    return rule[1] if rule else ""


def check_value(key: str, value: Any) -> None:
    """Raises ValueError ("Invalid config: batch_size must be a positive integer, got 0")
    when `value` is outside the valid range of `key` (a dotted key); other keys pass."""
    rule = _VALUE_RULES.get(key)
    if rule is not None and not rule[0](value):
        raise ValueError("Invalid config: %s must be %s, got %r" % (key, rule[1], value))


def coerce_like(current: Any, value: Any, key: str) -> Any:
    """Keeps overrides type-consistent with the current value.

    An integer key takes integers (and whole floats such as 8.0), a float key
    numbers, a string key strings, a list of numbers numbers; anything else is a
    ValueError naming the key ("batch_size=8x" fails here, not as a TypeError later).
    """
    if current is None or value is None:
        return value
    leaf = key.rsplit(".", 1)[-1]
    if isinstance(current, bool):
        if isinstance(value, bool) or (isinstance(value, str) and leaf in _BOOL_OR_STRING_KEYS):
            return value
        raise ValueError("Config key %s expects true or false, got %r" % (key, value))
    if isinstance(current, int):
        if isinstance(value, float) and value.is_integer():
            return int(value)
        _expect(_is_int(value), key, "an integer", value)
    elif isinstance(current, float):
        _expect(_is_number(value), key, "a number", value)
        return float(value)
    elif isinstance(current, str):
        if leaf in _STRING_OR_LIST_KEYS and isinstance(value, (list, tuple)):
            _expect(all(isinstance(v, str) for v in value), key, "strings", value)
            return list(value)
        _expect(isinstance(value, str), key, "a string", value)
    elif isinstance(current, (list, tuple)) and leaf not in TUPLE_KEYS:
        items = list(value) if isinstance(value, (list, tuple)) else [value]
        if current and all(_is_number(c) for c in current):
            _expect(bool(items) and all(_is_number(v) for v in items), key, "numbers", value)
        return items
    return value


def _expect(condition: bool, key: str, expected: str, value: Any) -> None:
    """Raises the one-line type error naming `key` unless `condition` holds."""
    if not condition:
        raise ValueError("Config key %s expects %s, got %r" % (key, expected, value))


def flatten(config: Mapping[str, Any], prefix: str = "") -> Dict[str, Any]:
    """{dotted key: value} of a nested config (label_map stays one value)."""
    flat = {}
    for key, value in config.items():
        if isinstance(value, Mapping) and key not in PLAIN_DICT_KEYS:
            flat.update(flatten(value, prefix + key + "."))
        else:
            flat[prefix + key] = value
    return flat


def validate_config(config):
    """Checks values that would otherwise fail deep inside TensorFlow; returns `config`
    (a Config).

    Raises:
      ValueError: a value is out of range; the message names the key and the accepted values.
    """
    def check(condition, message):
        if not condition:
            raise ValueError("Invalid config: " + message)

    for key, value in flatten(config.as_dict()).items():
        check_value(key, value)
    check(config.min_level >= 1 and config.max_level > config.min_level,
          "need 1 <= min_level < max_level, got min_level=%s max_level=%s"
          % (config.min_level, config.max_level))
    check(config.min_level >= 3 or config.max_level <= 5,
          "min_level must be at least 3 (levels below come from the backbone)")
    check(not (config.get("grad_checkpoint") and config.get("batch_norm_renorm")),
          "grad_checkpoint cannot be combined with batch_norm_renorm: renorm's corrections "
          "read moving statistics that the forward pass has already updated, so the "
          "recomputed blocks would differ from the forward")
    check(not (config.get("grad_checkpoint")
               and "quantize" in (config.get("model_optimizations") or {})),
          "grad_checkpoint cannot be combined with model_optimizations.quantize: the "
          "recomputed blocks would move the learned quantization ranges a second time")
    names = label_names(config.label_map)
    check(not names or max(names) <= config.num_classes,
          "label_map names class id %s but num_classes is %s: class ids run from 1 to "
          "num_classes" % (max(names or [0]), config.num_classes))
    check_optimization_settings(config.model_optimizations or {})
    # The wrappers go where the package builds its convolutions; a hub module's are not.
    check(not (config.model_optimizations and config.hub_module_url),
          "model_optimizations (pruning, quantization-aware training) apply to the package's own "
          "network, not to a TF-Hub module; drop one of model_optimizations and hub_module_url")
    return config
