"""The config key table: one ConfigKey row per dotted key (its default, type, check and
meaning), which the default config (defaults.py), the checks (rules.py) and the generated
page reference/config.md all read.

  row.py            the ConfigKey row type, and the forms of value overrides keep
  checks.py         Check and the generic checks the rows share (ranges, choices, null)
  choices.py        the names some keys choose from
  model.py ... tracking.py   the rows, one module per section of the reference page

Rows are listed in the order of the default config and of the page.
"""

from collections import Counter
from typing import Dict, Iterable, List, Tuple

from efficientdet_keras.config.keys import (evaluation, execution, input_pipeline, loss, model,
                                            optimisation, tracking)
from efficientdet_keras.config.keys.row import ConfigKey

_SECTION_MODULES = (model, input_pipeline, loss, optimisation, execution, evaluation, tracking)

# (section title, its rows), in the page's order.
SECTIONS: Tuple[Tuple[str, Tuple[ConfigKey, ...]], ...] = tuple(
    (module.TITLE, module.KEYS) for module in _SECTION_MODULES)

CONFIG_KEYS: Tuple[ConfigKey, ...] = tuple(row for _, rows in SECTIONS for row in rows)


def repeated_names(rows: Iterable[ConfigKey]) -> List[str]:
    """The names that more than one of `rows` has, sorted."""
    counts = Counter(row.name for row in rows)
    return sorted(name for name, count in counts.items() if count > 1)


# A second row would silently replace the first in the lookups below.
if repeated_names(CONFIG_KEYS):
    raise ValueError("Config keys with more than one row: %s"
                     % ", ".join(repeated_names(CONFIG_KEYS)))

KEYS_BY_NAME: Dict[str, ConfigKey] = {row.name: row for row in CONFIG_KEYS}


def names_of_form(form: str) -> Tuple[str, ...]:
    """The dotted names of the keys whose values take `form` (one of row.FORMS)."""
    return tuple(row.name for row in CONFIG_KEYS if row.form == form)
