"""The config reference page: one row per key that shows its default and allowed values as
the code has them, and the allowed values that the checks enforce."""

import glob
import os
import re
import subprocess
import sys

import pytest

from helpers import REPO_ROOT, docs_hook
from efficientdet_keras.config import (MODEL_NAMES, PACKAGED_HPARAMS_DIR, Config,
                                       get_efficientdet_config, validate_config)
from efficientdet_keras.config.defaults import default_values
from efficientdet_keras.config.literals import format_value
from efficientdet_keras.config.rules import allowed_values, flatten

pytestmark = pytest.mark.quick  # All of this file is in the inner-loop set.

HOOK_PATH = os.path.join(REPO_ROOT, "docs", "hooks", "config_reference.py")
KEYS = flatten(default_values())


def load_hook():
    return docs_hook("config_reference")


@pytest.fixture(scope="module")
def hook():
    return load_hook()


def key_rows(page):
    """{dotted key: [type, default, allowed, meaning]} from the key tables of the page."""
    key_tables = page.split("## Pruning and quantization settings")[0]
    rows = {}
    for line in key_tables.splitlines():
        if line.startswith("| `"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            key = cells[0].strip("`")
            assert key not in rows, "two rows for %s" % key
            rows[key] = cells[1:]
    return rows


def test_every_pruning_and_quantization_setting_has_a_row_with_its_default(hook):
    from efficientdet_keras.config.optimization_settings import (PRUNE_DEFAULTS,
                                                                 QUANTIZE_DEFAULTS)
    section = hook.render().split("## Pruning and quantization settings")[1].split("\n## ")[0]
    rows = {cells[0].strip("`"): cells[1:] for cells in (
        [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        for line in section.splitlines() if line.startswith("| `"))}
    # The defaults the checks fill in, which the page must show.
    expected = {"model_optimizations.%s.%s" % (kind, key): default
                for kind, defaults in (("prune", PRUNE_DEFAULTS), ("quantize", QUANTIZE_DEFAULTS))
                for key, default in defaults.items()}
    assert list(rows) == list(expected)
    for key, (default, meaning) in rows.items():
        assert default == "`%s`" % format_value(expected[key]) and meaning, key
    assert rows["model_optimizations.prune.target_sparsity"][0] == "`0.5`"


def test_mkdocs_loads_the_hook_and_gets_the_generated_page(hook, tmp_path):
    pytest.importorskip("mkdocs")
    from mkdocs.config import load_config
    from mkdocs.structure.files import Files
    (tmp_path / "docs").mkdir()
    (tmp_path / "mkdocs.yml").write_text("site_name: test\nhooks:\n  - %s\n" % HOOK_PATH)
    config = load_config(str(tmp_path / "mkdocs.yml"))
    files = config.plugins.on_files(Files([]), config=config)
    assert files.get_file_from_path("reference/config.md").content_string == hook.render()


def test_the_page_has_one_row_per_key_with_its_default_and_allowed_values(hook):
    rows = key_rows(hook.render())
    assert list(rows) == list(KEYS)
    d0 = flatten(get_efficientdet_config("efficientdet-d0").as_dict())
    for key, (_, default, allowed, meaning) in rows.items():
        assert default == "`%s`" % format_value(d0[key]), key
        assert allowed == hook.cell(allowed_values(key)), key
        assert meaning, key
    assert rows["batch_size"][:3] == ["int", "`64`", "a positive integer"]
    assert rows["pooling_type"][2] == "one of max or avg"
    assert rows["mixed_precision"][1:3] == [
        "`false`", "one of false, true, float16, bfloat16, float32 or null"]
    assert rows["aspect_ratios"][:2] == ["list of float", "`[1.0, 2.0, 0.5]`"]
    assert rows["steps_per_epoch"][:2] == ["int or null", "`null`"]
    assert rows["alpha"][2] == ""  # Any number goes.
    # efficientdet-d0's values, which a command without --model_name uses.
    assert [rows[key][1] for key in ("name", "backbone_name", "fpn_num_filters")] == [
        "`efficientdet-d0`", "`efficientnet-b0`", "`64`"]


def test_the_page_has_one_section_per_group_and_a_preset_table(hook):
    page = hook.render()
    headings = re.findall(r"^## (.+)$", page, re.MULTILINE)
    assert headings == [title for title, _ in hook.SECTIONS] + [
        "Pruning and quantization settings", "Model presets"]
    presets = page.split("## Model presets")[1]
    for name in MODEL_NAMES:
        assert presets.count("| `%s` |" % name) == 1, name
    d7x = next(line for line in presets.splitlines() if line.startswith("| `efficientdet-d7x`"))
    assert "`efficientnet-b7`" in d7x and "`8`" in d7x  # backbone_name and max_level.


def test_the_reference_is_built_without_tensorflow():
    script = ("import importlib.util as u, sys\n"
              "s = u.spec_from_file_location('h', %r)\n"
              "m = u.module_from_spec(s); s.loader.exec_module(m); m.render()\n"
              "assert 'tensorflow' not in sys.modules\n" % HOOK_PATH)
    subprocess.run([sys.executable, "-c", script], check=True, cwd=REPO_ROOT)


@pytest.mark.parametrize("key, bad", [
    ("act_type", "gelu2"), ("fpn_weight_method", "x"), ("pooling_type", "mean"),
    ("iou_loss_type", "l1"), ("nms_configs.method", "soft"), ("mixed_precision", "float8"),
    ("backbone_survival_prob", 0.0), ("backbone_survival_prob", 1.5), ("rmsprop_rho", 1.0),
    ("rmsprop_epsilon", 0.0), ("mean_rgb", [1.0, 2.0]), ("aspect_ratios", [1.0, -2.0]),
    ("optimizer", "foo"), ("lr_decay_method", "exponential"), ("strategy", "mirrored"),
    ("backbone_name", "efficientnet-b8"),
])
def test_a_value_outside_the_rule_is_a_one_line_error_naming_the_key(key, bad):
    config = get_efficientdet_config("efficientdet-d0")
    before = config.as_dict()
    expected = "Invalid config: %s must be %s, got %r" % (key, allowed_values(key), bad)
    with pytest.raises(ValueError) as error:
        config.override({key: bad})
    assert str(error.value) == expected and "\n" not in expected
    assert config.as_dict() == before
    head, _, leaf = key.rpartition(".")
    with pytest.raises(ValueError) as error:  # Assigned directly: the same check.
        (config[head] if head else config)[leaf] = bad
    assert str(error.value) == expected
    assert config.as_dict() == before
    values = config.as_dict()  # A config built from values (a run's config.yaml).
    (values[head] if head else values)[leaf] = bad
    with pytest.raises(ValueError) as error:
        validate_config(Config(values))
    assert str(error.value) == expected


def test_clip_gradients_per_tensor_takes_only_true_or_false():
    config = get_efficientdet_config("efficientdet-d0")
    with pytest.raises(ValueError, match="^Invalid config: clip_gradients_per_tensor must be "
                                         "true or false, got 'yes'$"):
        config["clip_gradients_per_tensor"] = "yes"


def test_the_checks_name_the_values_their_consumers_accept():
    from efficientdet_keras.config.keys import choices
    from efficientdet_keras.config.precision import policy_name
    from efficientdet_keras.detection.losses import IOU_LOSS_TYPES
    from efficientdet_keras.detection.postprocess import NMS_METHODS
    from efficientdet_keras.model.bifpn import FUSION_METHODS
    from efficientdet_keras.model.efficientnet import SCALING
    from efficientdet_keras.training import optimizers, runtime
    assert choices.FPN_WEIGHT_METHODS == FUSION_METHODS
    assert choices.OPTIMIZERS == optimizers.OPTIMIZERS
    assert choices.LR_DECAY_METHODS == optimizers.LR_DECAY_METHODS
    assert choices.STRATEGIES == runtime.STRATEGIES
    assert set(choices.BACKBONES) == set(SCALING)
    assert choices.IOU_LOSS_TYPES == IOU_LOSS_TYPES
    assert choices.NMS_METHODS == NMS_METHODS
    for value in choices.MIXED_PRECISION_VALUES:
        policy_name(value)  # Raises for a value the model would refuse.


@pytest.mark.parametrize("key, values", [
    ("fpn_weight_method", ["fastattn", "attn", "channel_attn", "channel_fastattn", "sum"]),
    ("act_type", ["swish", "silu", "relu", "relu6", "hswish", "leaky_relu"]),
    ("mixed_precision", [False, True, "float16", "bfloat16", "float32", None]),
    ("pooling_type", ["max", "avg"]),
    ("iou_loss_type", [None, "", "iou", "giou", "diou", "ciou"]),
    ("nms_configs.method", [None, "", "hard", "gaussian", "combined"]),
    ("backbone_survival_prob", [None, 1.0, 0.8, 1e-3]),
    ("rmsprop_rho", [0.0, 0.9, 0.999]),
    ("rmsprop_epsilon", [1e-7, 1e-3, 1.0]),
    ("clip_gradients_per_tensor", [False, True]),
    ("mean_rgb", [[127.0], [1.0, 2.0, 3.0]]),
])
def test_every_value_the_code_accepts_passes(key, values):
    for value in values:
        validate_config(get_efficientdet_config("efficientdet-d0").override({key: value}))


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_every_preset_and_packaged_hparams_file_passes(name):
    validate_config(get_efficientdet_config(name))
    for path in sorted(glob.glob(os.path.join(PACKAGED_HPARAMS_DIR, "*.yaml"))):
        validate_config(get_efficientdet_config(name).override(path))


def keys_named_in(text: str):
    """The backquoted names of a table cell outside its parentheses (which name flags, values
    and other things)."""
    return re.findall(r"`([\w.]+)`", re.sub(r"\([^)]*\)", "", text))


def test_the_migrating_guides_key_table_agrees_with_the_config():
    """The keys it calls gone are unknown to the config; those it calls new or kept as
    flags are known."""
    with open(os.path.join(REPO_ROOT, "docs", "guides", "migrating.md")) as f:
        rows = dict(re.findall(r"^\| ([^|]+?) \| (.+) \|$", f.read(), re.M))
    gone = keys_named_in(rows["gone (an error names them)"])
    new, flags = keys_named_in(rows["new"]), keys_named_in(rows["were flags, now keys"])
    assert len(gone) > 15 and len(new) > 15 and len(flags) == 6
    assert [key for key in gone if key in KEYS] == []
    assert [key for key in new + flags if key not in KEYS] == []
