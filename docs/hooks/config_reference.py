"""MkDocs hook: the page reference/config.md, every config key with its type, default,
allowed values and meaning, and the keys each model preset changes.

Everything on the page is read from the package: defaults from config/defaults.py, allowed
values from config/rules.py (the text the checks print), meanings from
config/descriptions.py, presets from config/family.py. The build fails when a key has no
description (`missing_descriptions`).
"""

import os
import sys
from typing import Any, Dict, List, Tuple

HOOKS_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HOOKS_DIR))
# This checkout's package, whatever else is installed; the table helpers beside this file
# (MkDocs loads a hook by its path, not as a package).
for folder in (REPO_ROOT, HOOKS_DIR):
    if folder not in sys.path:
        sys.path.insert(0, folder)

from efficientdet_keras.config.defaults import default_values  # noqa: E402
from efficientdet_keras.config.descriptions import (KEY_DESCRIPTIONS, SECTIONS,  # noqa: E402
                                                    VALUE_TYPES)
from efficientdet_keras.config.family import (MODEL_PRESETS,  # noqa: E402
                                              get_efficientdet_config)
from efficientdet_keras.config.optimization_settings import (  # noqa: E402
    PRUNE_DEFAULTS, QUANTIZE_DEFAULTS, SETTING_DESCRIPTIONS)
from efficientdet_keras.config.rules import allowed_values, flatten, format_value  # noqa: E402
from generated_pages import serve_page  # noqa: E402
from markdown_tables import cell, table  # noqa: E402

PAGE = "reference/config.md"

INTRO = (
    "The *Default* column holds efficientdet-d0's values, which the commands and "
    "`get_efficientdet_config()` start from when no model is named; another model differs "
    "from it in the keys of its row in the last table. Change keys "
    "with `--hparams=k=v,k2.sub=v2` on the commands that build a model (lists as "
    "`1.0*2.0*0.5`), with a YAML file (`--hparams=my.yaml`, nested keys as nested "
    "mappings), or in Python with "
    "`Config.override(\"k=v\")`, `Config.override({\"k\": v})` or "
    "`Config.override(\"my.yaml\")`. Each value is checked as it is set: a value outside "
    "*Allowed* is a one-line error naming the key.")

_TYPE_NAMES = {bool: "bool", int: "int", float: "float", str: "str", dict: "dict"}


def default_keys() -> Dict[str, Any]:
    """{dotted key: default}, in the order of defaults.py."""
    return flatten(default_values())


def d0_values() -> Dict[str, Any]:
    """{dotted key: efficientdet-d0's value}: the defaults with D0's preset applied."""
    return flatten(get_efficientdet_config("efficientdet-d0").as_dict())


def missing_descriptions() -> List[str]:
    """Dotted keys the page cannot describe (no description, or a null default without a
    type) and names in descriptions.py that are no config key."""
    defaults = default_keys()
    undescribed = set(defaults) - set(KEY_DESCRIPTIONS)
    untyped = {key for key, value in defaults.items()
               if value is None and key not in VALUE_TYPES}
    named = set(KEY_DESCRIPTIONS) | set(VALUE_TYPES) | {first for _, first in SECTIONS}
    settings = set(optimization_settings())
    unexplained = {"model_optimizations." + key
                   for key in (settings ^ set(SETTING_DESCRIPTIONS))}
    return sorted(undescribed | untyped | (named - set(defaults)) | unexplained)


def type_name(key: str, default: Any) -> str:
    """The key's type: from descriptions.VALUE_TYPES, else the default's."""
    if key in VALUE_TYPES:
        return VALUE_TYPES[key]
    if isinstance(default, list):
        return "list of %s" % type_name(key, default[0]) if default else "list"
    return _TYPE_NAMES[type(default)]


def sectioned_keys() -> List[Tuple[str, List[str]]]:
    """[(section title, its dotted keys)]: each section runs from its first key to the
    next section's."""
    keys = list(default_keys())
    starts = [keys.index(first) for _, first in SECTIONS] + [len(keys)]
    return [(title, keys[start:end])
            for (title, _), start, end in zip(SECTIONS, starts, starts[1:])]


def render() -> str:
    """The Markdown of reference/config.md."""
    parts = ["# Config reference", INTRO]
    parts += [render_section(title, keys) for title, keys in sectioned_keys()]
    parts.append(render_optimization_settings())
    parts.append(render_presets())
    return "\n\n".join(parts) + "\n"


def render_section(title: str, keys: List[str]) -> str:
    defaults, d0 = default_keys(), d0_values()
    rows = [["`%s`" % key, cell(type_name(key, defaults[key])), code(d0[key]),
             cell(allowed_values(key)), cell(KEY_DESCRIPTIONS[key])]
            for key in keys]
    return "## %s\n\n%s" % (title, table(["Key", "Type", "Default", "Allowed", "Meaning"], rows))


def optimization_settings() -> Dict[str, Any]:
    """{"prune.schedule": its default, ...}: the settings model_optimizations' entries take."""
    settings = {"prune.%s" % key: value for key, value in PRUNE_DEFAULTS.items()}
    settings.update({"quantize.%s" % key: value for key, value in QUANTIZE_DEFAULTS.items()})
    return settings


def render_optimization_settings() -> str:
    rows = [["`model_optimizations.%s`" % key, code(default), cell(SETTING_DESCRIPTIONS[key])]
            for key, default in optimization_settings().items()]
    intro = ("`model_optimizations` holds one entry, `prune` or `quantize`, whose settings are "
             "all optional; `{prune: {}}` prunes with the defaults below, except that "
             "polynomial_decay needs `end_step`. A wrong setting is a one-line error naming it.")
    return "## Pruning and quantization settings\n\n%s\n\n%s" % (
        intro, table(["Key", "Default", "Meaning"], rows))


def render_presets() -> str:
    """One row per model: the values its preset sets over the base defaults (an empty cell
    keeps the base value, which is D0's)."""
    preset_keys = [key for key in default_keys()
                   if any(key in preset for preset in MODEL_PRESETS.values())]
    rows = [["`%s`" % name] + [code(preset[key]) if key in preset else ""
                               for key in preset_keys]
            for name, preset in MODEL_PRESETS.items()]
    intro = ("`get_efficientdet_config(name)` sets `name` and the keys of its row; an empty "
             "cell keeps the value of the tables above.")
    header = ["Model"] + ["`%s`" % key for key in preset_keys]
    return "## Model presets\n\n%s\n\n%s" % (intro, table(header, rows))


def code(value: Any) -> str:
    """A value as a YAML-like literal in a code span (Markdown keeps a | in a code span
    inside its table cell)."""
    return "`%s`" % format_value(value)


def on_files(files, config):
    """MkDocs hook: serves reference/config.md, or stops the build when a key
    has no description."""
    from mkdocs.exceptions import PluginError
    missing = missing_descriptions()
    if missing:
        raise PluginError("%s: describe these config keys in efficientdet_keras/config/"
                          "descriptions.py (or drop the names that are no keys): %s"
                          % (PAGE, ", ".join(missing)))
    return serve_page(files, config, PAGE, render())
