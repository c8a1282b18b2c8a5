"""Reading config overrides: "k=v,k2.sub=v" strings, YAML files, and image sizes.

Nothing here knows the config's keys; `Config.override` applies what these functions
return and rejects unknown keys. Values are parsed, never evaluated as Python.
"""

import os
from typing import Any, Dict, Iterator, List, Mapping, Tuple

import yaml

# The YAML files shipped with the package (the checkout's top-level hparams/ links here).
PACKAGED_HPARAMS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                    "hparams")


def override_mappings(text: str) -> Iterator[Dict[str, Any]]:
    """The mappings an override string applies, in order: "short_run.yaml,image_size=128"
    yields the file's mapping, then {"image_size": 128}.

    Each part is read only when the one before it has been applied, so a failing part
    leaves the earlier ones in effect.
    """
    for part in _override_string_parts(text):
        if not part.strip():
            continue
        yield read_yaml(part) if _looks_like_yaml_path(part) else parse_override_string(part)


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


def read_yaml(path: str) -> Dict[str, Any]:
    """The mapping in a YAML file (`resolve_hparams_file` finds it); {} for an empty file.

    Raises:
      ValueError naming the file when it cannot be parsed or holds no mapping.
    """
    from efficientdet_keras.utils.yaml_files import load_yaml_file
    path = resolve_hparams_file(path)
    try:
        data = load_yaml_file(path)
    except (yaml.YAMLError, UnicodeDecodeError) as e:
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
