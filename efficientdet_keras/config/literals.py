"""How config values are written in YAML and override strings (the reverse of
overrides.parse_scalar), for error messages, the config reference and run records."""

from typing import Any, Mapping


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
