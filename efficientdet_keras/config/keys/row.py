"""The row type of the config key table: one ConfigKey per dotted key."""

from dataclasses import dataclass
from typing import Any

from efficientdet_keras.config.keys.checks import Check

# What values a key takes besides those of its default's kind, which overrides respect
# (rules.coerce_like); most keys take only values of their default's kind.
LIKE_DEFAULT = "like default"
# N, "WxH" or [height, width], kept as a (height, width) tuple (image_size).
SIZE_PAIR = "size pair"
# A dict of free keys (class ids, optimization settings), kept plain, not a nested Config.
FREE_MAPPING = "free mapping"
# true, false or a string (mixed_precision: float16).
BOOL_OR_NAME = "bool or name"
# A string or a list of strings (grappler_off: auto, or pass names).
NAME_OR_NAMES = "name or names"
FORMS = (LIKE_DEFAULT, SIZE_PAIR, FREE_MAPPING, BOOL_OR_NAME, NAME_OR_NAMES)


@dataclass(frozen=True)
class ConfigKey:
    """One config key: everything the default config, the checks and the config reference
    know about it.

    Attributes:
      name: the dotted key ("batch_size", "nms_configs.method").
      default: the value every model starts from (a model preset may change it).
      type: the values' type as the reference shows it ("int", "str or null").
      check: what values are allowed (checks.py); ANY_VALUE when any of the type goes.
      meaning: what the key does, one paragraph for the reference.
      form: what values besides the default's kind overrides keep (one of FORMS).
    """
    name: str
    default: Any
    type: str
    check: Check
    meaning: str
    form: str = LIKE_DEFAULT

    def __post_init__(self):
        # An incomplete row fails on import, before any config or page is made from it.
        for field in ("name", "type", "meaning"):
            if not isinstance(getattr(self, field), str) or not getattr(self, field).strip():
                raise ValueError("Config key row %r: %s must be a non-empty string"
                                 % (self.name, field))
        if not isinstance(self.check, Check):
            raise ValueError("Config key row %r: check must be a checks.Check, got %r"
                             % (self.name, self.check))
        if self.form not in FORMS:
            raise ValueError("Config key row %r: form must be one of %s, got %r"
                             % (self.name, ", ".join(FORMS), self.form))
