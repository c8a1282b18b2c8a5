"""MkDocs hook: the page reference/config.md, every config key with its type, default,
allowed values and meaning, and the keys each model preset changes.

Everything on the page is read from the package: each key's row in the key table
(config/keys/: type, allowed values as the checks print them, meaning, section), the
pruning and quantization settings' rows (config/optimization_settings.py), the presets
(config/family.py). A row cannot lack a meaning: the table refuses it on import.
"""

import os
import sys
from typing import Any, Dict, Sequence

HOOKS_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HOOKS_DIR))
# This checkout's package, whatever else is installed; the table helpers beside this file
# (MkDocs loads a hook by its path, not as a package).
for folder in (REPO_ROOT, HOOKS_DIR):
    if folder not in sys.path:
        sys.path.insert(0, folder)

from efficientdet_keras.config.family import (MODEL_PRESETS,  # noqa: E402
                                              get_efficientdet_config)
from efficientdet_keras.config.keys import CONFIG_KEYS, SECTIONS  # noqa: E402
from efficientdet_keras.config.keys.row import ConfigKey  # noqa: E402
from efficientdet_keras.config.literals import format_value  # noqa: E402
from efficientdet_keras.config.optimization_settings import (  # noqa: E402
    PRUNE_SETTINGS, QUANTIZE_SETTINGS)
from efficientdet_keras.config.rules import flatten  # noqa: E402
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


def d0_values() -> Dict[str, Any]:
    """{dotted key: efficientdet-d0's value}: the defaults with D0's preset applied."""
    return flatten(get_efficientdet_config("efficientdet-d0").as_dict())


def render() -> str:
    """The Markdown of reference/config.md."""
    parts = ["# Config reference", INTRO]
    parts += [render_section(title, rows) for title, rows in SECTIONS]
    parts.append(render_optimization_settings())
    parts.append(render_presets())
    return "\n\n".join(parts) + "\n"


def render_section(title: str, rows: Sequence[ConfigKey]) -> str:
    """A section's table: one line per key, its default as efficientdet-d0 has it."""
    d0 = d0_values()
    lines = [["`%s`" % row.name, cell(row.type), code(d0[row.name]), cell(row.check.allowed),
              cell(row.meaning)]
             for row in rows]
    return "## %s\n\n%s" % (title, table(["Key", "Type", "Default", "Allowed", "Meaning"], lines))


def render_optimization_settings() -> str:
    """The table of the settings model_optimizations' entries (prune, quantize) take."""
    rows = [["`model_optimizations.%s.%s`" % (kind, setting.name), code(setting.default),
             cell(setting.meaning)]
            for kind, settings in (("prune", PRUNE_SETTINGS), ("quantize", QUANTIZE_SETTINGS))
            for setting in settings]
    intro = ("`model_optimizations` holds one entry, `prune` or `quantize`, whose settings are "
             "all optional; `{prune: {}}` prunes with the defaults below, except that "
             "polynomial_decay needs `end_step`. A wrong setting is a one-line error naming it.")
    return "## Pruning and quantization settings\n\n%s\n\n%s" % (
        intro, table(["Key", "Default", "Meaning"], rows))


def render_presets() -> str:
    """One row per model: the values its preset sets over the base defaults (an empty cell
    keeps the base value, which is D0's)."""
    preset_keys = [row.name for row in CONFIG_KEYS
                   if any(row.name in preset for preset in MODEL_PRESETS.values())]
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
    """MkDocs hook: serves reference/config.md."""
    return serve_page(files, config, PAGE, render())
