"""Configuration: the Config object, the EfficientDet model family, and overrides.

A Config is a nested mapping with attribute access. Every model starts from
`default_config()` plus the row of its family in `MODEL_FAMILY`; users then
change it with `override()`, which accepts a dict, a "k=v,k2.sub=v2" string or
a YAML file path, and rejects keys that do not exist.
"""

import copy
import difflib
import os
from typing import Any, Dict, Iterator, List, Mapping, Tuple, Union

import yaml

from efficientdet_keras.utils.fileio import write_text_atomically
from efficientdet_keras.optimization import check_settings as check_optimization_settings

# Keys whose values are always stored as tuples; YAML has no tuples, so they
# are normalised again on load, which keeps save/load round trips exact.
_TUPLE_KEYS = ("image_size",)
# Keys holding free-form mappings (class id -> name): plain dicts, not nested Configs.
_PLAIN_DICT_KEYS = ("label_map", "model_optimizations")
# Boolean keys that also take a string (mixed_precision: "float16" or "bfloat16").
_BOOL_OR_STRING_KEYS = ("mixed_precision",)
# String keys that also take a list of strings (grappler_off: "auto" or pass names).
_STRING_OR_LIST_KEYS = ("grappler_off",)


class Config:
    """A nested, attribute-accessible configuration.

    `cfg.a.b` and `cfg["a"]["b"]` are the same value. Assigning a new attribute
    directly adds a key; `override()` only changes keys that already exist.
    """

    def __init__(self, values: Mapping[str, Any] = None):
        object.__setattr__(self, "_values", {})
        for key, value in (values or {}).items():
            self[key] = value

    # --- mapping and attribute access ---------------------------------------
    def __getattr__(self, key: str) -> Any:
        values = object.__getattribute__(self, "_values")
        if key in values:
            return values[key]
        raise AttributeError(_unknown_key_message(key, values.keys()))

    def __setattr__(self, key: str, value: Any) -> None:
        self[key] = value

    def __getitem__(self, key: str) -> Any:
        if key not in self._values:
            raise KeyError(_unknown_key_message(key, self._values.keys()))
        return self._values[key]

    def __setitem__(self, key: str, value: Any) -> None:
        if key in _PLAIN_DICT_KEYS and isinstance(value, Mapping):
            value = {_int_or_str(k): v for k, v in value.items()}
        elif isinstance(value, Mapping) and not isinstance(value, Config):
            value = Config(value)
        self._values[key] = _normalise_value(key, value)

    def __contains__(self, key: str) -> bool:
        return key in self._values

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, Config):
            return self.as_dict() == other.as_dict()
        return NotImplemented

    def __repr__(self) -> str:
        return "Config(%r)" % self.as_dict()

    def __deepcopy__(self, memo):
        return Config(copy.deepcopy(self.as_dict(), memo))

    def __getstate__(self):
        return self.as_dict()

    def __setstate__(self, state):
        object.__setattr__(self, "_values", {})
        for key, value in state.items():
            self[key] = value

    def keys(self):
        return self._values.keys()

    def items(self):
        return self._values.items()

    def get(self, key: str, default: Any = None) -> Any:
        return self._values.get(key, default)

    def copy(self) -> "Config":
        return copy.deepcopy(self)

    def as_dict(self) -> Dict[str, Any]:
        """Plain nested dicts; tuples become lists so the result is YAML-safe."""
        out = {}
        for key, value in self._values.items():
            if isinstance(value, Config):
                value = value.as_dict()
            elif isinstance(value, tuple):
                value = list(value)
            out[key] = copy.deepcopy(value)
        return out

    # --- overrides -----------------------------------------------------------
    def override(self, overrides: Union[str, Mapping[str, Any], None],
                 allow_new_keys: bool = False) -> "Config":
        """Updates this config in place and returns it.

        Args:
          overrides: a dict (nested dicts update nested configs), a string of
            "key=value" pairs separated by commas (nested keys with dots, lists
            written `a*b*c`), the path of a YAML file, or both ("short_run.yaml,
            image_size=128": files and pairs applied left to right). None or ""
            does nothing.
          allow_new_keys: add keys that do not exist instead of raising.

        Raises:
          ValueError: an unknown key (the message names the closest known keys),
            a malformed "key=value" pair, a YAML file that is not a mapping, or a value
            of the wrong type or out of range (`check_value`; one line naming the key).
            The key that failed keeps its value.
        """
        if overrides is None or (isinstance(overrides, str) and not overrides.strip()):
            return self
        if isinstance(overrides, str):
            parts = _override_string_parts(overrides)
            if len(parts) > 1:  # "preset.yaml,k=v": the file first, then the pairs.
                for part in parts:
                    self.override(part, allow_new_keys)
                return self
            overrides = _read_yaml(overrides) if _looks_like_yaml_path(overrides) \
                else parse_override_string(overrides)
        if not isinstance(overrides, Mapping):
            raise ValueError("Config overrides must be a dict, a 'k=v,...' string or "
                             "a YAML path, got %r" % type(overrides).__name__)
        self._update(overrides, allow_new_keys, prefix="")
        return self

    def _update(self, overrides: Mapping[str, Any], allow_new_keys: bool, prefix: str):
        for key, value in overrides.items():
            if not isinstance(key, str):
                raise ValueError("Config keys must be strings, got %r in %s" % (key, prefix or "the root"))
            if "." in key:  # A dotted key in a dict: same as a nested dict.
                head, rest = key.split(".", 1)
                self._update({head: {rest: value}}, allow_new_keys, prefix)
                continue
            full_key = prefix + key
            if key not in self._values:
                if not allow_new_keys:
                    raise ValueError(_unknown_key_message(full_key, self._values.keys(), prefix))
                self[key] = value
                continue
            current = self._values[key]
            if key in _PLAIN_DICT_KEYS and isinstance(value, Mapping):
                self[key] = _merged_nested(current or {}, value)
            elif isinstance(current, Config) and isinstance(value, Mapping):
                current._update(value, allow_new_keys, full_key + ".")
            else:
                value = _coerce_like(current, value, full_key)
                check_value(full_key, value)
                self[key] = value

    # --- YAML ----------------------------------------------------------------
    def save_yaml(self, path: str) -> str:
        """Writes the config to `path` (a file, or a directory that gets config.yaml).

        The write is atomic and fsynced (fileio.write_text_atomically): a crash never
        leaves a half-written file.
        """
        if os.path.isdir(path):
            path = os.path.join(path, "config.yaml")
        return write_text_atomically(path, yaml.safe_dump(self.as_dict(), default_flow_style=False,
                                                          sort_keys=True))

    @classmethod
    def from_yaml(cls, path: str) -> "Config":
        """Reads a config written by `save_yaml` (a file, or a directory holding config.yaml).

        Keys the package gained after the file was written take their defaults, so the
        run directories of older versions still load; every key in the file is kept as is.
        """
        if os.path.isdir(path):
            path = os.path.join(path, "config.yaml")
        return cls(_fill_missing_keys(_read_yaml(path), default_config().as_dict()))


def _merged_nested(current: Mapping[Any, Any], update: Mapping[Any, Any]) -> Dict[Any, Any]:
    """`current` updated with `update`, merging nested dicts (so that overriding
    model_optimizations.prune.end_step keeps the other prune settings)."""
    merged = dict(current)
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            value = _merged_nested(merged[key], value)
        merged[key] = value
    return merged


def _fill_missing_keys(values: Dict[str, Any], defaults: Mapping[str, Any]) -> Dict[str, Any]:
    """Adds to `values` (in place, nested) the keys of `defaults` it lacks."""
    for key, default in defaults.items():
        if key not in values:
            values[key] = default
        elif isinstance(default, Mapping) and isinstance(values[key], dict) and \
                key not in _PLAIN_DICT_KEYS:
            _fill_missing_keys(values[key], default)
    return values


def _int_or_str(key):
    """Label-map keys are class ids; "1" from an override string becomes 1."""
    try:
        return int(key)
    except (TypeError, ValueError):
        return key


def _unknown_key_message(key: str, known, prefix: str = "") -> str:
    known = list(known)
    leaf = key[len(prefix):] if key.startswith(prefix) else key
    close = difflib.get_close_matches(leaf, known, n=3, cutoff=0.5)
    hint = ("; closest known keys: %s" % ", ".join(prefix + k for k in close)) if close \
        else "; known keys: %s" % ", ".join(prefix + k for k in sorted(known)[:20])
    return "Unknown config key %r%s" % (key, hint)


def _looks_like_yaml_path(text: str) -> bool:
    return text.endswith((".yaml", ".yml")) and "=" not in text


def _override_string_parts(text: str) -> List[str]:
    """Splits "a.yaml,k=v,k2=v2,b.yaml" into ["a.yaml", "k=v,k2=v2", "b.yaml"]; a string
    without a YAML path among its comma-separated items is one part."""
    items = [item.strip() for item in text.split(",")]
    if len(items) == 1 or not any(_looks_like_yaml_path(item) for item in items):
        return [text]
    parts: List[str] = []
    for item in items:
        if _looks_like_yaml_path(item) or not parts or _looks_like_yaml_path(parts[-1]):
            parts.append(item)
        else:
            parts[-1] += "," + item
    return parts


# The YAML files shipped with the package (the checkout's top-level hparams/ links here).
PACKAGED_HPARAMS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "hparams")


def resolve_hparams_file(path: str) -> str:
    """`path` itself when it exists; a bare name such as "voc.yaml" that is not in the
    working directory means the packaged file of that name.

    Raises:
      ValueError naming the path (and the packaged files) when neither exists.
    """
    if os.path.exists(path):
        return path
    packaged = os.path.join(PACKAGED_HPARAMS_DIR, path)
    if os.path.dirname(path) == "" and os.path.exists(packaged):
        return packaged
    shipped = sorted(os.listdir(PACKAGED_HPARAMS_DIR)) if os.path.isdir(PACKAGED_HPARAMS_DIR) else []
    raise ValueError("Config YAML file not found: %s (packaged files, usable by name: %s)"
                     % (path, ", ".join(shipped) or "none"))


def _read_yaml(path: str) -> Dict[str, Any]:
    path = resolve_hparams_file(path)
    with open(path) as f:
        try:
            data = yaml.safe_load(f)
        except yaml.YAMLError as e:
            raise ValueError("Cannot parse YAML file %s: %s" % (path, e)) from None
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ValueError("YAML file %s must hold a mapping of config keys, got %s"
                         % (path, type(data).__name__))
    return data


def parse_scalar(text: str) -> Any:
    """Parses one value of an override string: bool, None, int, float or str."""
    text = text.strip()
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("none", "null"):
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def parse_override_string(text: str) -> Dict[str, Any]:
    """Parses "a=1,b.c=x,d=1*2*3" into {"a": 1, "b": {"c": "x"}, "d": [1, 2, 3]}.

    Values are parsed by `parse_scalar`; `*` separates list items. Nothing is
    evaluated as Python.
    """
    result: Dict[str, Any] = {}
    for pair in text.split(","):
        if not pair.strip():
            continue
        if pair.count("=") != 1:
            raise ValueError("Malformed config override %r: expected key=value" % pair.strip())
        key, raw = (part.strip() for part in pair.split("="))
        if not key or any(not part for part in key.split(".")):
            raise ValueError("Malformed config override %r: empty key" % pair.strip())
        value = [parse_scalar(item) for item in raw.split("*")] if "*" in raw else parse_scalar(raw)
        node = result
        *parents, leaf = key.split(".")
        for parent in parents:
            node = node.setdefault(parent, {})
            if not isinstance(node, dict):
                raise ValueError("Malformed config override %r: %s is both a value and a group"
                                 % (pair.strip(), parent))
        node[leaf] = value
    return result


def parse_image_size(value: Any) -> Tuple[int, int]:
    """Returns (height, width) from 512, "512", "640x384" (W x H) or a (h, w) pair."""
    if isinstance(value, bool):
        raise ValueError("image_size must be a size, got %r" % value)
    if isinstance(value, int):
        size = (value, value)
    elif isinstance(value, str):
        parts = value.lower().split("x")
        try:
            numbers = [int(p) for p in parts]
        except ValueError:
            raise ValueError("image_size %r is neither N nor WxH" % value) from None
        if len(numbers) == 1:
            size = (numbers[0], numbers[0])
        elif len(numbers) == 2:
            size = (numbers[1], numbers[0])  # Written width x height.
        else:
            raise ValueError("image_size %r is neither N nor WxH" % value)
    elif isinstance(value, (list, tuple)) and len(value) == 2:
        size = (int(value[0]), int(value[1]))
    else:
        raise ValueError("image_size %r is neither N, 'N', 'WxH' nor (height, width)" % (value,))
    if min(size) <= 0:
        raise ValueError("image_size must be positive, got %r" % (value,))
    return size


def _normalise_value(key: str, value: Any) -> Any:
    if key == "image_size" and value is not None:
        return parse_image_size(value)
    if key in _TUPLE_KEYS and isinstance(value, list):
        return tuple(value)
    return value


def _coerce_like(current: Any, value: Any, key: str) -> Any:
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
    elif isinstance(current, (list, tuple)) and leaf not in _TUPLE_KEYS:
        items = list(value) if isinstance(value, (list, tuple)) else [value]
        if current and all(_is_number(c) for c in current):
            _expect(bool(items) and all(_is_number(v) for v in items), key, "numbers", value)
        return items
    return value


def _expect(condition: bool, key: str, expected: str, value: Any) -> None:
    """Raises the one-line type error naming `key` unless `condition` holds."""
    if not condition:
        raise ValueError("Config key %s expects %s, got %r" % (key, expected, value))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _in_range(low: float, high: float, high_included: bool = False):
    """A check that a number lies in [low, high) (or [low, high])."""
    def check(value):
        return _is_number(value) and low <= value and (value <= high if high_included
                                                         else value < high)
    return check


# Grappler passes grappler_off may name (fields of TensorFlow's RewriterConfig; see
# training/grappler.py). "second_iteration" is Grappler's second round over all the passes.
GRAPPLER_PASSES = ("memory_optimization", "arithmetic_optimization", "dependency_optimization",
                   "constant_folding", "layout_optimizer", "remapping", "loop_optimization",
                   "shape_optimization", "function_optimization", "second_iteration")


def _is_grappler_setting(value: Any) -> bool:
    names = [value] if isinstance(value, str) else value
    return value == "auto" or not value or (
        isinstance(names, (list, tuple)) and all(name in GRAPPLER_PASSES for name in names))


# Values of autoaugment_policy: off, the detection policies v0-v3, RandAugment.
AUTOAUGMENT_POLICIES = (None, "v0", "v1", "v2", "v3", "randaug")

# Single values with a valid range, checked by every override and by validate_config:
# dotted key -> (check, what the value must be). Wrong values fail here in one line
# naming the key instead of as a ZeroDivisionError or a shape error deep in training.
_VALUE_RULES = {
    **{key: (lambda v: _is_int(v) and v >= 1, "a positive integer") for key in (
        "batch_size", "num_epochs", "num_classes", "steps_per_execution", "map_freq",
        "max_instances_per_image", "fpn_num_filters", "fpn_cell_repeats", "box_class_repeats",
        "num_scales", "nms_configs.max_output_size", "tflite_max_detections")},
    "steps_per_epoch": (lambda v: v is None or (_is_int(v) and v >= 1),
                        "none or a positive integer"),
    "nms_configs.max_nms_inputs": (lambda v: _is_int(v) and v >= 0,
                                   "a non-negative integer (0 keeps all)"),
    **{key: (lambda v: _is_number(v) and v > 0, "a positive number") for key in (
        "learning_rate", "jitter_min", "jitter_max", "batch_norm_epsilon", "anchor_scale")},
    **{key: (lambda v: _is_number(v) and v >= 0, "a non-negative number") for key in (
        "lr_warmup_init", "lr_warmup_epoch", "weight_decay", "clip_gradients_norm",
        "box_loss_weight", "iou_loss_weight", "first_lr_drop_epoch", "second_lr_drop_epoch")},
    **{key: (_in_range(0.0, 1.0), "a number in [0, 1)") for key in (
        "momentum", "moving_average_decay", "label_smoothing", "batch_norm_momentum")},
    **{key: (_in_range(0.0, 1.0, high_included=True), "a number in [0, 1]") for key in (
        "nms_configs.iou_thresh", "nms_configs.score_thresh")},
    "nan_recovery_attempts": (lambda v: _is_int(v) and v >= 0, "a non-negative integer"),
    "backup_steps": (lambda v: _is_int(v) and v >= 0, "a non-negative integer (0: epoch ends)"),
    **{key: (lambda v: isinstance(v, bool), "true or false") for key in (
        "batch_norm_renorm", "grid_mask", "fold_batch_norm", "grad_checkpoint")},
    **{key: (_in_range(0.0, 1.0, high_included=True), "a probability in [0, 1]") for key in (
        "mosaic", "mixup")},
    "mosaic_close_epochs": (lambda v: _is_int(v) and v >= 0, "a non-negative integer"),
    "randaugment_num_layers": (lambda v: _is_int(v) and v >= 1, "a positive integer"),
    "randaugment_magnitude": (_in_range(0.0, 30.0, high_included=True), "a number in [0, 30]"),
    "autoaugment_policy": (lambda v: v in AUTOAUGMENT_POLICIES,
                           "none, %s" % ", ".join(p for p in AUTOAUGMENT_POLICIES if p)),
    "nan_recovery_lr_factor": (lambda v: _is_number(v) and 0 < v < 1, "a number in (0, 1)"),
    "grappler_off": (_is_grappler_setting, "auto, none or a list of Grappler passes from %s"
                     % ", ".join(GRAPPLER_PASSES)),
    "sync_batch_norm": (lambda v: v is None or isinstance(v, bool),
                        "null (on with more than one replica), true or false"),
}


def check_value(key: str, value: Any) -> None:
    """Raises ValueError ("Invalid config: batch_size must be a positive integer, got 0")
    when `value` is outside the valid range of `key` (a dotted key); other keys pass."""
    rule = _VALUE_RULES.get(key)
    if rule is not None and not rule[0](value):
        raise ValueError("Invalid config: %s must be %s, got %r" % (key, rule[1], value))


def flatten(config: Mapping[str, Any], prefix: str = "") -> Dict[str, Any]:
    """{dotted key: value} of a nested config (label_map stays one value)."""
    flat = {}
    for key, value in config.items():
        if isinstance(value, Mapping) and key not in _PLAIN_DICT_KEYS:
            flat.update(flatten(value, prefix + key + "."))
        else:
            flat[prefix + key] = value
    return flat


def config_differences(old: Config, new: Config) -> Dict[str, Tuple[Any, Any]]:
    """{dotted key: (old value, new value)} for the keys whose values differ (a key that
    only one of them has counts, with None on the other side)."""
    old_flat, new_flat = flatten(old.as_dict()), flatten(new.as_dict())
    return {key: (old_flat.get(key), new_flat.get(key))
            for key in sorted(set(old_flat) | set(new_flat))
            if old_flat.get(key) != new_flat.get(key)}


# ---------------------------------------------------------------------------
# The model family.
# ---------------------------------------------------------------------------

def default_config() -> Config:
    """The defaults shared by every EfficientDet model (COCO training recipe)."""
    return Config(dict(
        name="efficientdet-d1",
        # Model.
        backbone_name="efficientnet-b1",
        image_size=640,
        num_classes=90,
        label_map=None,  # None, a dict {id: name}, or a dataset name such as "coco" or "voc".
        min_level=3,
        max_level=7,
        num_scales=3,
        aspect_ratios=[1.0, 2.0, 0.5],
        anchor_scale=4.0,
        fpn_num_filters=88,
        fpn_cell_repeats=4,
        box_class_repeats=3,
        fpn_weight_method="fastattn",  # fastattn, attn, channel_attn, channel_fastattn or sum.
        separable_conv=True,
        apply_bn_for_resampling=True,
        conv_after_downsample=False,
        conv_bn_act_pattern=False,
        pooling_type="max",
        act_type="swish",
        survival_prob=None,  # None: the backbone's own default; heads then skip drop-connect.
        # Backbone drop-connect; None: none for efficientnet-b0 (as released), 0.8 otherwise.
        backbone_survival_prob=None,
        batch_norm_momentum=0.99,
        batch_norm_epsilon=1e-3,
        # Batch Renormalization (model/layers.py): for short runs on small images, where a
        # batch gives the coarse levels too few values for training and inference to agree.
        # Adds renorm variables, so released checkpoints need it off (the COCO recipe's).
        batch_norm_renorm=False,
        # BatchNorm statistics of the global batch, all-reduced across replicas in training:
        # null = on when built under a strategy with more than one replica; true/false force it.
        sync_batch_norm=None,
        # Inference only (model/folding.py sets it): every BatchNorm is folded into the conv
        # before it, so the network has no BatchNorm layers and cannot be trained.
        fold_batch_norm=False,
        is_training_bn=True,
        # Gradient checkpointing (model/recompute.py): each backbone block's activations are
        # recomputed in the backward pass instead of kept; less memory, about one more
        # backbone forward of time per step. The released trainer's flag of the same name.
        grad_checkpoint=False,
        # Input pipeline and augmentation.
        mean_rgb=[0.485 * 255, 0.456 * 255, 0.406 * 255],
        stddev_rgb=[0.229 * 255, 0.224 * 255, 0.225 * 255],
        input_rand_hflip=True,
        jitter_min=0.1,
        jitter_max=2.0,
        max_instances_per_image=100,
        # Stronger augmentation, all off in the COCO recipe (README "Augmentation").
        # autoaugment_policy: none, v0-v3 (the learned detection policies) or randaug
        # (RandAugment with the two keys after it); data/autoaugment.py.
        autoaugment_policy=None,
        randaugment_num_layers=1,
        randaugment_magnitude=15.0,
        grid_mask=False,  # GridMask: a grid of square holes cut from each image.
        mosaic=0.0,  # Probability that a training image is a mosaic of four images.
        mosaic_close_epochs=0,  # The last this many epochs train without mosaic.
        mixup=0.0,  # Probability that a training image is blended with a second one.
        skip_crowd_during_training=True,
        # Class ids outside 1..num_classes: false drops those boxes with a warning; true
        # stops at the first one with an error naming the record.
        strict_data=False,
        # Loss.
        alpha=0.25,
        gamma=1.5,
        label_smoothing=0.0,
        delta=0.1,
        box_loss_weight=50.0,
        iou_loss_type=None,  # None, iou, giou, diou or ciou.
        iou_loss_weight=1.0,
        weight_decay=4e-5,
        # Optimisation.
        optimizer="sgd",
        momentum=0.9,  # SGD and RMSprop momentum; Adam's beta_1.
        rmsprop_rho=0.9,  # RMSprop decay of the squared-gradient average (EfficientNet's 0.9).
        rmsprop_epsilon=1e-3,  # RMSprop epsilon, inside the square root (EfficientNet's 0.001).
        learning_rate=0.08,  # For a global batch of 64; scaled linearly with the batch.
        lr_warmup_init=0.008,
        lr_warmup_epoch=1.0,
        lr_decay_method="cosine",  # cosine, stepwise, polynomial or constant.
        first_lr_drop_epoch=200.0,
        second_lr_drop_epoch=250.0,
        poly_lr_power=0.9,
        clip_gradients_norm=10.0,
        clip_gradients_per_tensor=False,  # Also clip each gradient to clip_gradients_norm first.
        # After a NaN or inf step: roll back to the last backup this many times, each time
        # with the learning rate x nan_recovery_lr_factor (0: stop with an error).
        nan_recovery_attempts=0,
        nan_recovery_lr_factor=0.5,
        num_epochs=300,
        batch_size=64,  # Global batch.
        steps_per_epoch=None,  # Set by the train CLI from num_examples_per_epoch / batch_size.
        # Steps between the backups (model_dir/backup) a killed run resumes from, besides the
        # one at each epoch end; 0: epoch ends only. A backup (weights, optimizer slots, EMA:
        # about 50 MB for D0) takes well under a second, and 200 steps are minutes on a GPU,
        # so a kill loses minutes of training for a write cost under 1%.
        backup_steps=200,
        moving_average_decay=0.9998,
        var_freeze_expr=None,
        var_exclude_expr=None,  # Regex of variables load_pretrained leaves at their initial values.
        hub_module_url=None,  # A TF-Hub feature module to fine-tune (EfficientDetNetTrainHub).
        # tensorflow-model-optimization: {} (none), {"prune": {...}} or {"quantize": {...}};
        # see efficientdet_keras/optimization.
        model_optimizations={},
        # Precision, compilation, distribution.
        mixed_precision=False,  # False, "float16", "bfloat16", or True (float16 on GPU, bfloat16 on TPU).
        jit_compile=False,
        # Grappler passes fit and evaluate turn off: "auto" (the memory optimizer, on a
        # machine without GPUs or TPUs: a faster first step), none, or names
        # (training/grappler.py).
        grappler_off="auto",
        steps_per_execution=1,
        strategy="",
        # Evaluation and post-processing.
        map_freq=5,
        nms_configs=dict(
            method="gaussian",  # gaussian (soft-NMS), hard, or combined (class-aware).
            iou_thresh=0.5,
            score_thresh=0.001,
            sigma=0.5,
            max_nms_inputs=5000,  # Candidates kept before NMS; 0 keeps all.
            max_output_size=100,
        ),
        # Detections a .tflite with outputs=detections returns (TFLite_Detection_PostProcess).
        tflite_max_detections=25,
    ))


# name: (backbone, image size, BiFPN filters, BiFPN repeats, head repeats, extras).
_SWISH_FAMILY = {
    "efficientdet-d0": ("efficientnet-b0", 512, 64, 3, 3, {}),
    "efficientdet-d1": ("efficientnet-b1", 640, 88, 4, 3, {}),
    "efficientdet-d2": ("efficientnet-b2", 768, 112, 5, 3, {}),
    "efficientdet-d3": ("efficientnet-b3", 896, 160, 6, 4, {}),
    "efficientdet-d4": ("efficientnet-b4", 1024, 224, 7, 4, {}),
    "efficientdet-d5": ("efficientnet-b5", 1280, 288, 7, 4, {}),
    "efficientdet-d6": ("efficientnet-b6", 1280, 384, 8, 5, {"fpn_weight_method": "sum"}),
    "efficientdet-d7": ("efficientnet-b6", 1536, 384, 8, 5,
                        {"fpn_weight_method": "sum", "anchor_scale": 5.0}),
    "efficientdet-d7x": ("efficientnet-b7", 1536, 384, 8, 5,
                         {"fpn_weight_method": "sum", "max_level": 8}),
}

# Lite models: integer-friendly normalisation, relu6, and plain sum fusion.
_LITE_DEFAULTS = {"mean_rgb": [127.0], "stddev_rgb": [128.0], "act_type": "relu6",
                  "fpn_weight_method": "sum"}
_LITE_FAMILY = {
    "efficientdet-lite0": ("efficientnet-lite0", 320, 64, 3, 3, {"anchor_scale": 3.0}),
    "efficientdet-lite1": ("efficientnet-lite1", 384, 88, 4, 3, {"anchor_scale": 3.0}),
    "efficientdet-lite2": ("efficientnet-lite2", 448, 112, 5, 3, {"anchor_scale": 3.0}),
    "efficientdet-lite3": ("efficientnet-lite3", 512, 160, 6, 4, {"anchor_scale": 4.0}),
    "efficientdet-lite3x": ("efficientnet-lite3", 640, 200, 6, 4, {"anchor_scale": 3.0}),
    "efficientdet-lite4": ("efficientnet-lite4", 640, 224, 7, 4, {"anchor_scale": 4.0}),
}

MODEL_NAMES = tuple(_SWISH_FAMILY) + tuple(_LITE_FAMILY)


def get_efficientdet_config(model_name: str = "efficientdet-d0") -> Config:
    """Returns a fresh Config for one of `MODEL_NAMES`.

    Raises:
      ValueError: the name is not in the family; the message lists the known names.
    """
    if model_name in _SWISH_FAMILY:
        row, extras = _SWISH_FAMILY[model_name], {}
    elif model_name in _LITE_FAMILY:
        row, extras = _LITE_FAMILY[model_name], dict(_LITE_DEFAULTS)
    else:
        raise ValueError("Unknown model name %r; known models: %s"
                         % (model_name, ", ".join(MODEL_NAMES)))
    backbone, size, filters, fpn_repeats, head_repeats, row_extras = row
    extras.update(row_extras)
    config = default_config()
    config.override(dict(name=model_name, backbone_name=backbone, image_size=size,
                         fpn_num_filters=filters, fpn_cell_repeats=fpn_repeats,
                         box_class_repeats=head_repeats, **extras))
    return config


def validate_config(config: Config) -> Config:
    """Checks values that would otherwise fail deep inside TensorFlow.

    Raises:
      ValueError naming the key and the accepted values.
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
    check(isinstance(config.num_classes, int) and config.num_classes >= 1,
          "num_classes must be a positive integer, got %r" % (config.num_classes,))
    check(config.num_scales >= 1 and len(config.aspect_ratios) >= 1,
          "num_scales and aspect_ratios must not be empty")
    check(config.fpn_weight_method in ("fastattn", "attn", "channel_attn", "channel_fastattn", "sum"),
          "fpn_weight_method must be one of fastattn, attn, channel_attn, channel_fastattn, "
          "sum; got %r" % config.fpn_weight_method)
    check(config.act_type in ACTIVATIONS,
          "act_type must be one of %s; got %r" % (", ".join(ACTIVATIONS), config.act_type))
    check(config.mixed_precision in (False, True, "float16", "bfloat16", "float32", None),
          "mixed_precision must be false, true, 'float16' or 'bfloat16'; got %r"
          % (config.mixed_precision,))
    check(len(config.mean_rgb) in (1, 3) and len(config.stddev_rgb) in (1, 3),
          "mean_rgb and stddev_rgb need 1 or 3 values")
    check(not (config.get("grad_checkpoint") and config.get("batch_norm_renorm")),
          "grad_checkpoint cannot be combined with batch_norm_renorm: renorm's corrections "
          "read moving statistics that the forward pass has already updated, so the "
          "recomputed blocks would differ from the forward")
    check(not (config.get("grad_checkpoint")
               and "quantize" in (config.get("model_optimizations") or {})),
          "grad_checkpoint cannot be combined with model_optimizations.quantize: the "
          "recomputed blocks would move the learned quantization ranges a second time")
    survival = config.backbone_survival_prob
    check(survival is None or (_is_number(survival) and 0.0 < survival <= 1.0),
          "backbone_survival_prob must be none or in (0, 1]; got %r" % (survival,))
    check(_is_number(config.rmsprop_rho) and 0.0 <= config.rmsprop_rho < 1.0,
          "rmsprop_rho must be in [0, 1); got %r" % (config.rmsprop_rho,))
    check(_is_number(config.rmsprop_epsilon) and config.rmsprop_epsilon > 0,
          "rmsprop_epsilon must be positive; got %r" % (config.rmsprop_epsilon,))
    check_optimization_settings(config.model_optimizations or {})
    # The wrappers go where the package builds its convolutions; a hub module's are not.
    check(not (config.model_optimizations and config.hub_module_url),
          "model_optimizations (pruning, quantization-aware training) apply to the package's own "
          "network, not to a TF-Hub module; drop one of model_optimizations and hub_module_url")
    check(isinstance(config.clip_gradients_per_tensor, bool),
          "clip_gradients_per_tensor must be true or false; got %r"
          % (config.clip_gradients_per_tensor,))
    return config


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# Names accepted for act_type; the functions live in model/layers.py.
ACTIVATIONS = ("swish", "silu", "relu", "relu6", "hswish", "leaky_relu")
