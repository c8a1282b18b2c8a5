"""The Config container: a nested mapping with attribute access, overrides and YAML files."""

import copy
import difflib
import os
from typing import Any, Dict, Iterator, Mapping, Tuple, Union

import yaml

from efficientdet_keras.config.defaults import default_values
from efficientdet_keras.config.overrides import override_mappings, parse_image_size, read_yaml
from efficientdet_keras.config.rules import (PLAIN_DICT_KEYS, TUPLE_KEYS, check_value, coerce_like,
                                             flatten)
from efficientdet_keras.utils.fileio import write_text_atomically


class Config:
    """A nested, attribute-accessible configuration.

    `cfg.a.b` and `cfg["a"]["b"]` are the same value. Assigning a new attribute
    directly adds a key; `override()` only changes keys that already exist. Every way of
    setting a key that has a rule (`override` on the whole config or on a nested one, an
    attribute or item assignment) checks the value against it (`rules.check_value`).

    Args:
      values: the keys and values; nested mappings become nested Configs.
      prefix: the dotted path of this config inside its parent ("nms_configs."), which
        names its keys in messages and finds their rules.
    """

    def __init__(self, values: Mapping[str, Any] = None, prefix: str = ""):
        object.__setattr__(self, "_values", {})
        object.__setattr__(self, "_prefix", prefix)
        for key, value in (values or {}).items():
            self._store(key, value)

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
        if key in self._values and (key in PLAIN_DICT_KEYS or not isinstance(value, Mapping)):
            check_value(self._prefix + key, _normalise_value(key, value))
        self._store(key, value)

    def _store(self, key: str, value: Any) -> None:
        """Sets a key (checked by the caller, or a config being built)."""
        if key in PLAIN_DICT_KEYS and isinstance(value, Mapping):
            value = {_int_or_str(k): v for k, v in value.items()}
        elif isinstance(value, Mapping):
            value = Config(value.as_dict() if isinstance(value, Config) else value,
                           prefix=self._prefix + key + ".")
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
        return Config(copy.deepcopy(self.as_dict(), memo), prefix=self._prefix)

    def __getstate__(self):
        return {"values": self.as_dict(), "prefix": self._prefix}

    def __setstate__(self, state):
        self.__init__(state["values"], state["prefix"])

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
            for mapping in override_mappings(overrides):
                self._update(mapping, allow_new_keys, prefix=self._prefix)
            return self
        if not isinstance(overrides, Mapping):
            raise ValueError("Config overrides must be a dict, a 'k=v,...' string or "
                             "a YAML path, got %r" % type(overrides).__name__)
        self._update(overrides, allow_new_keys, prefix=self._prefix)
        return self

    def _update(self, overrides: Mapping[str, Any], allow_new_keys: bool, prefix: str):
        for key, value in overrides.items():
            if not isinstance(key, str):
                raise ValueError("Config keys must be strings, got %r in %s"
                                 % (key, prefix or "the root"))
            if "." in key:  # A dotted key in a dict: same as a nested dict.
                head, rest = key.split(".", 1)
                self._update({head: {rest: value}}, allow_new_keys, prefix)
                continue
            full_key = prefix + key
            if key not in self._values:
                if not allow_new_keys:
                    raise ValueError(_unknown_key_message(full_key, self._values.keys(), prefix))
                self._store(key, value)
                continue
            current = self._values[key]
            if key in PLAIN_DICT_KEYS and isinstance(value, Mapping):
                # A dict adds to a dict; it replaces a named label map ("coco") or null.
                merged = _merged_nested(current if isinstance(current, Mapping) else {}, value)
                check_value(full_key, merged)
                self._store(key, merged)
            elif isinstance(current, Config) and isinstance(value, Mapping):
                current._update(value, allow_new_keys, full_key + ".")
            else:
                value = coerce_like(current, value, full_key)
                check_value(full_key, value)
                self._store(key, value)

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
        return cls(_fill_missing_keys(read_yaml(path), default_values()))


def config_differences(old: Config, new: Config) -> Dict[str, Tuple[Any, Any]]:
    """{dotted key: (old value, new value)} for the keys whose values differ (a key that
    only one of them has counts, with None on the other side)."""
    old_flat, new_flat = flatten(old.as_dict()), flatten(new.as_dict())
    return {key: (old_flat.get(key), new_flat.get(key))
            for key in sorted(set(old_flat) | set(new_flat))
            if old_flat.get(key) != new_flat.get(key)}


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
                key not in PLAIN_DICT_KEYS:
            _fill_missing_keys(values[key], default)
    return values


def _normalise_value(key: str, value: Any) -> Any:
    if key == "image_size" and value is not None:
        return parse_image_size(value)
    if key in TUPLE_KEYS and isinstance(value, list):
        return tuple(value)
    return value


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
