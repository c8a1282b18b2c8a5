"""The checks a config key's values must pass, each with the text that error messages and
the config reference print, and the generic kinds of check the key rows share."""

from typing import Any, Callable, NamedTuple, Optional, Sequence

from efficientdet_keras.config.literals import format_value


class Check(NamedTuple):
    """A rule for one key's values.

    Attributes:
      accepts: whether a value is allowed.
      allowed: what an allowed value is, as "Invalid config: <key> must be <allowed>" says
        it; "" when any value of the key's type goes.
    """
    accepts: Callable[[Any], bool]
    allowed: str


def is_integer(value: Any) -> bool:
    """An int that is not a bool (YAML's true is no count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """An int or float that is not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# Keys whose type says all there is: coerce_like keeps overrides to the type already.
ANY_VALUE = Check(lambda value: True, "")
BOOLEAN = Check(lambda value: isinstance(value, bool), "true or false")
POSITIVE_NUMBER = Check(lambda value: is_number(value) and value > 0, "a positive number")
NON_NEGATIVE_NUMBER = Check(lambda value: is_number(value) and value >= 0,
                            "a non-negative number")


def integer_at_least(low: int, note: str = "") -> Check:
    """Integers from `low` (0 or 1) up; `note` says in brackets what the lowest value means."""
    words = {0: "a non-negative integer", 1: "a positive integer"}[low]
    return Check(lambda value: is_integer(value) and value >= low,
                 "%s (%s)" % (words, note) if note else words)


def number_in(low: float, high: float, low_open: bool = False, high_open: bool = True,
              noun: str = "a number") -> Check:
    """Numbers between `low` and `high`, each end included unless open: "a number in [0, 1)"."""
    def accepts(value):
        return is_number(value) and (low < value if low_open else low <= value) and (
            value < high if high_open else value <= high)
    return Check(accepts, "%s in %s%g, %g%s" % (noun, "(" if low_open else "[", low, high,
                                                 ")" if high_open else "]"))


def optional(check: Check, allowed: Optional[str] = None) -> Check:
    """`check`, or null; the text "null or <check's text>" unless `allowed` words it."""
    return Check(lambda value: value is None or check.accepts(value),
                 allowed or "null or %s" % check.allowed)


def one_of(*choices: Any) -> Check:
    """Exactly `choices`, its text naming them: "one of a, b or c"."""
    names = [format_value(choice) for choice in choices]
    return Check(lambda value: value in choices,
                 "one of %s or %s" % (", ".join(names[:-1]), names[-1]))


def number_list(lengths: Sequence[int] = (), positive: bool = False) -> Check:
    """A non-empty list of numbers: of one of `lengths` if given, each above 0 if `positive`."""
    def accepts(value):
        return isinstance(value, (list, tuple)) and bool(value) and \
            all(is_number(item) and (item > 0 or not positive) for item in value) and \
            (not lengths or len(value) in lengths)
    if lengths:
        allowed = "a list of %s %snumbers" % (" or ".join(map(str, lengths)),
                                              "positive " if positive else "")
    else:
        allowed = "a non-empty list of %snumbers" % ("positive " if positive else "")
    return Check(accepts, allowed)


def non_empty_text(allowed: str) -> Check:
    """A string with more than blanks in it."""
    return Check(lambda value: isinstance(value, str) and bool(value.strip()), allowed)
