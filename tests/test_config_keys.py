"""The config key table (config/keys/): a complete row for every key, defaults that pass
their own checks, checks that refuse a wrong value in one line naming the key, and the
generic checks' bounds and wording."""

import re

import pytest

from efficientdet_keras.config import Config, default_config, validate_config
from efficientdet_keras.config.defaults import default_values
from efficientdet_keras.config.keys import CONFIG_KEYS, SECTIONS, repeated_names
from efficientdet_keras.config.keys.checks import (ANY_VALUE, BOOLEAN, Check, integer_at_least,
                                                   number_in, number_list, one_of, optional)
from efficientdet_keras.config.keys.row import FORMS, ConfigKey
from efficientdet_keras.config.optimization_settings import PRUNE_SETTINGS, QUANTIZE_SETTINGS
from efficientdet_keras.config.rules import flatten

pytestmark = pytest.mark.quick  # All of this file is in the inner-loop set.

CHECKED = [row for row in CONFIG_KEYS if row.check is not ANY_VALUE]
# Values of many kinds; every checked key refuses at least one of them.
CANDIDATES = [-1, "no such value", None, [], 2.5, 0, {"x": 1}]

# A row's type as the reference writes it -> the kinds of value its words name.
_TYPE_WORDS = {"int": int, "float": float, "str": str, "bool": bool, "dict": dict,
               "null": type(None)}


def kinds_named(type_text):
    """The Python types a row's type text names ('int or null' -> {int, NoneType});
    'list of float' names list."""
    words = re.split(r", | or ", re.sub(r"\s*\(.*?\)", "", type_text))
    return {list if word.startswith("list of") or word.startswith("[") else
            _TYPE_WORDS.get(word) for word in words} - {None}


def test_the_default_config_has_exactly_the_rows_keys_in_their_order():
    assert list(flatten(default_values())) == [row.name for row in CONFIG_KEYS]
    assert [row for _, rows in SECTIONS for row in rows] == list(CONFIG_KEYS)
    assert all(rows for _, rows in SECTIONS)


def test_every_row_has_a_type_a_check_a_meaning_and_a_known_form():
    for row in CONFIG_KEYS:
        assert row.type.strip() and row.meaning.strip(), row.name
        assert isinstance(row.check, Check) and row.form in FORMS, row.name
        assert row.meaning.endswith("."), row.name  # A sentence in the page's last column.


def test_every_rows_type_names_the_kind_of_its_default():
    for row in CONFIG_KEYS:
        named = kinds_named(row.type)
        assert named, "%s: no known type in %r" % (row.name, row.type)
        assert type(row.default) in named, "%s: %r is not a %s" % (row.name, row.default,
                                                                   row.type)


@pytest.mark.parametrize("field", ["type", "meaning"])
def test_a_row_without_a_type_or_meaning_is_refused_naming_the_key(field):
    fields = dict(name="batch_size", default=64, type="int", check=integer_at_least(1),
                  meaning="Global batch.")
    fields[field] = " "
    with pytest.raises(ValueError, match="^Config key row 'batch_size': %s must be" % field):
        ConfigKey(**fields)
    with pytest.raises(ValueError, match="check must be a checks.Check"):
        ConfigKey("batch_size", 64, "int", lambda value: value > 0, "Global batch.")


def test_a_key_with_two_rows_is_found():
    row = CONFIG_KEYS[0]
    assert repeated_names(CONFIG_KEYS) == []
    assert repeated_names(CONFIG_KEYS + (row,)) == [row.name]


def test_every_default_passes_its_keys_check():
    for row in CONFIG_KEYS:
        assert row.check.accepts(row.default), row.name
    validate_config(default_config())


def test_default_values_are_fresh_copies():
    first, second = default_values(), default_values()
    first["aspect_ratios"].append(3.0)
    first["model_optimizations"]["prune"] = {}
    first["nms_configs"]["method"] = "hard"
    assert second == default_values()


@pytest.mark.parametrize("row", CHECKED, ids=[row.name for row in CHECKED])
def test_a_value_a_checked_key_refuses_is_a_one_line_error_naming_the_key(row):
    refused = [value for value in CANDIDATES if not row.check.accepts(value)]
    assert refused, "%s accepts every candidate value" % row.name
    bad = refused[0]
    expected = "Invalid config: %s must be %s, got %r" % (row.name, row.check.allowed, bad)
    assert row.check.allowed and "\n" not in expected
    head, _, leaf = row.name.rpartition(".")
    config = default_config()
    with pytest.raises(ValueError) as error:
        (config[head] if head else config)[leaf] = bad
    assert str(error.value) == expected
    values = default_values()  # A config read from a file goes through validate_config.
    (values[head] if head else values)[leaf] = bad
    with pytest.raises(ValueError) as error:
        validate_config(Config(values))
    assert str(error.value) == expected


def test_unchecked_keys_print_nothing_in_allowed():
    for row in CONFIG_KEYS:
        assert (row.check.allowed == "") == (row.check is ANY_VALUE), row.name


def test_every_pruning_and_quantization_setting_has_a_meaning():
    for setting in PRUNE_SETTINGS + QUANTIZE_SETTINGS:
        assert setting.meaning.strip().endswith("."), setting.name
    assert len({s.name for s in PRUNE_SETTINGS}) == len(PRUNE_SETTINGS)


# --- the generic checks ---------------------------------------------------------

@pytest.mark.parametrize("check, allowed, accepted, refused", [
    (integer_at_least(1), "a positive integer", [1, 7], [0, -1, 1.0, True, None]),
    (integer_at_least(0, note="0 keeps all"), "a non-negative integer (0 keeps all)",
     [0, 5], [-1, 0.5, False]),
    (number_in(0.0, 1.0), "a number in [0, 1)", [0, 0.0, 0.999], [1, 1.0, -0.1, True, "0.5"]),
    (number_in(0.0, 1.0, high_open=False, noun="a probability"), "a probability in [0, 1]",
     [0.0, 1.0], [1.01, None]),
    (number_in(0.0, 1.0, low_open=True), "a number in (0, 1)", [0.5], [0.0, 1.0]),
    (number_in(0.0, 30.0, high_open=False), "a number in [0, 30]", [30, 15.0], [30.5]),
    (optional(integer_at_least(1)), "null or a positive integer", [None, 3], [0, "3"]),
    (optional(integer_at_least(1), allowed="none or a positive integer"),
     "none or a positive integer", [None], [0]),
    (one_of(None, "", "flip"), 'one of null, "" or flip', [None, "", "flip"], ["flop", 0]),
    (one_of(False, True, "float16"), "one of false, true or float16", [False, "float16"],
     ["float8"]),
    (number_list(positive=True), "a non-empty list of positive numbers", [[1.0, 2], (0.5,)],
     [[], [1.0, 0.0], [1.0, "2"], 1.0, [True]]),
    (number_list(lengths=(1, 3)), "a list of 1 or 3 numbers", [[1.0], [1, 2, 3]],
     [[1.0, 2.0], [], [1, 2, 3, 4]]),
    (BOOLEAN, "true or false", [True, False], [0, 1, "true", None]),
])
def test_generic_checks_accept_their_values_and_word_them(check, allowed, accepted, refused):
    assert check.allowed == allowed
    assert [value for value in accepted if not check.accepts(value)] == []
    assert [value for value in refused if check.accepts(value)] == []
