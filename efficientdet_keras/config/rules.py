"""What each config value may be: the checks of single keys (their rows in keys/, which
`check_value` applies and `allowed_values` words for the config reference), the kinds of
value overrides keep (`coerce_like`), and the checks across keys that `validate_config` runs
before a model is built.

A wrong value fails here in one line naming the key, instead of as a ZeroDivisionError
or a shape error deep inside TensorFlow.
"""

from typing import Any, Dict, Mapping

from efficientdet_keras.config.keys import KEYS_BY_NAME, names_of_form
from efficientdet_keras.config.keys.checks import is_integer, is_number
from efficientdet_keras.config.keys.row import BOOL_OR_NAME, FREE_MAPPING, NAME_OR_NAMES, SIZE_PAIR
from efficientdet_keras.config.label_maps import label_names
from efficientdet_keras.config.optimization_settings import check_optimization_settings

__all__ = ["PLAIN_DICT_KEYS", "TUPLE_KEYS", "allowed_values", "check_value", "coerce_like",
           "flatten", "validate_config"]

# Keys whose values are always stored as tuples; YAML has no tuples, so they
# are normalised again on load, which keeps save/load round trips exact.
TUPLE_KEYS = names_of_form(SIZE_PAIR)
# Keys holding free-form mappings (class id -> name): plain dicts, not nested Configs.
PLAIN_DICT_KEYS = names_of_form(FREE_MAPPING)
# Boolean keys that also take a string (mixed_precision: "float16" or "bfloat16").
_BOOL_OR_STRING_KEYS = names_of_form(BOOL_OR_NAME)
# String keys that also take a list of strings (grappler_off: "auto" or pass names).
_STRING_OR_LIST_KEYS = names_of_form(NAME_OR_NAMES)


def allowed_values(key: str) -> str:
    """What `key` (a dotted key) may hold, as the error messages say it; "" when any value
    of the key's type goes."""
    row = KEYS_BY_NAME.get(key)
    return row.check.allowed if row else ""


def check_value(key: str, value: Any) -> None:
    """Raises ValueError ("Invalid config: batch_size must be a positive integer, got 0")
    when `value` is outside the valid range of `key` (a dotted key); other keys pass."""
    row = KEYS_BY_NAME.get(key)
    if row is not None and not row.check.accepts(value):
        raise ValueError("Invalid config: %s must be %s, got %r" % (key, row.check.allowed, value))


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
        _expect(is_integer(value), key, "an integer", value)
    elif isinstance(current, float):
        _expect(is_number(value), key, "a number", value)
        return float(value)
    elif isinstance(current, str):
        if leaf in _STRING_OR_LIST_KEYS and isinstance(value, (list, tuple)):
            _expect(all(isinstance(v, str) for v in value), key, "strings", value)
            return list(value)
        _expect(isinstance(value, str), key, "a string", value)
    elif isinstance(current, (list, tuple)) and leaf not in TUPLE_KEYS:
        items = list(value) if isinstance(value, (list, tuple)) else [value]
        if current and all(is_number(c) for c in current):
            _expect(bool(items) and all(is_number(v) for v in items), key, "numbers", value)
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
    # Each service worker counts only the images it makes, so none knows when the last epochs
    # begin: mosaic would close later the more workers there are.
    check(not (config.get("data_service") and config.mosaic > 0 and config.mosaic_close_epochs),
          "mosaic_close_epochs cannot be combined with data_service: each tf.data service "
          "worker counts only its own images, so none knows when the last epochs begin; set "
          "mosaic_close_epochs=0 or train without data_service")
    # The service deals the records out anew each epoch: a worker's cache would replay the
    # records it happened to get first.
    check(not (config.get("data_service") and config.get("cache")),
          "cache cannot be combined with data_service: the service deals the records out to "
          "its workers anew each epoch, so a worker's cache would not hold the ones it gets "
          "next; train with one or the other")
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
