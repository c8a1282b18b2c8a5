import os
import pickle
import re

import pytest
import yaml

from helpers import HPARAMS_DIR
from efficientdet_keras import MODEL_NAMES, Config, get_efficientdet_config
from efficientdet_keras.config import parse_override_string, validate_config

pytestmark = pytest.mark.quick  # All of this file is in the inner-loop set.

# name: (backbone, size, filters, fpn repeats, head repeats), from the paper's table.
FAMILY = {
    "efficientdet-d0": ("efficientnet-b0", 512, 64, 3, 3),
    "efficientdet-d1": ("efficientnet-b1", 640, 88, 4, 3),
    "efficientdet-d2": ("efficientnet-b2", 768, 112, 5, 3),
    "efficientdet-d3": ("efficientnet-b3", 896, 160, 6, 4),
    "efficientdet-d4": ("efficientnet-b4", 1024, 224, 7, 4),
    "efficientdet-d5": ("efficientnet-b5", 1280, 288, 7, 4),
    "efficientdet-d6": ("efficientnet-b6", 1280, 384, 8, 5),
    "efficientdet-d7": ("efficientnet-b6", 1536, 384, 8, 5),
    "efficientdet-d7x": ("efficientnet-b7", 1536, 384, 8, 5),
    "efficientdet-lite0": ("efficientnet-lite0", 320, 64, 3, 3),
    "efficientdet-lite1": ("efficientnet-lite1", 384, 88, 4, 3),
    "efficientdet-lite2": ("efficientnet-lite2", 448, 112, 5, 3),
    "efficientdet-lite3": ("efficientnet-lite3", 512, 160, 6, 4),
    "efficientdet-lite3x": ("efficientnet-lite3", 640, 200, 6, 4),
    "efficientdet-lite4": ("efficientnet-lite4", 640, 224, 7, 4),
}


def test_family_is_complete():
    assert set(MODEL_NAMES) == set(FAMILY)


@pytest.mark.parametrize("name", sorted(FAMILY))
def test_family_rows(name):
    config = get_efficientdet_config(name)
    backbone, size, filters, fpn_repeats, head_repeats = FAMILY[name]
    assert config.name == name
    assert config.backbone_name == backbone
    assert config.image_size == (size, size)
    assert (config.fpn_num_filters, config.fpn_cell_repeats, config.box_class_repeats) == (
        filters, fpn_repeats, head_repeats)
    lite = "lite" in name
    assert config.act_type == ("relu6" if lite else "swish")
    assert config.mean_rgb == ([127.0] if lite else pytest.approx([123.675, 116.28, 103.53]))
    assert config.stddev_rgb == ([128.0] if lite else pytest.approx([58.395, 57.12, 57.375]))
    if lite or name in ("efficientdet-d6", "efficientdet-d7", "efficientdet-d7x"):
        assert config.fpn_weight_method == "sum"
    else:
        assert config.fpn_weight_method == "fastattn"


def test_family_extras():
    assert get_efficientdet_config("efficientdet-d7").anchor_scale == 5.0
    assert get_efficientdet_config("efficientdet-d7x").max_level == 8
    assert get_efficientdet_config("efficientdet-d0").max_level == 7
    assert [get_efficientdet_config("efficientdet-lite%s" % n).anchor_scale
            for n in ("0", "1", "2", "3", "3x", "4")] == [3.0, 3.0, 3.0, 4.0, 3.0, 4.0]


def test_training_defaults_match_the_recipe():
    c = get_efficientdet_config("efficientdet-d0")
    assert (c.min_level, c.max_level, c.num_scales, c.aspect_ratios, c.anchor_scale) == (
        3, 7, 3, [1.0, 2.0, 0.5], 4.0)
    assert (c.optimizer, c.momentum, c.learning_rate, c.lr_warmup_init, c.lr_warmup_epoch) == (
        "sgd", 0.9, 0.08, 0.008, 1.0)
    assert (c.lr_decay_method, c.num_epochs, c.weight_decay, c.clip_gradients_norm) == (
        "cosine", 300, 4e-5, 10.0)
    assert (c.alpha, c.gamma, c.label_smoothing, c.delta, c.box_loss_weight) == (
        0.25, 1.5, 0.0, 0.1, 50.0)
    assert (c.iou_loss_type, c.iou_loss_weight, c.moving_average_decay) == (None, 1.0, 0.9998)
    assert (c.jitter_min, c.jitter_max, c.input_rand_hflip, c.max_instances_per_image) == (
        0.1, 2.0, True, 100)
    assert (c.batch_norm_momentum, c.batch_norm_epsilon) == (0.99, 1e-3)
    assert c.nms_configs.method == "gaussian" and c.nms_configs.sigma == 0.5
    assert c.nms_configs.score_thresh == 0.001 and c.nms_configs.max_output_size == 100
    assert c.mixed_precision is False and c.jit_compile is False


def test_unknown_model_lists_known_names():
    with pytest.raises(ValueError) as e:
        get_efficientdet_config("efficientdet-d9")
    assert "efficientdet-d9" in str(e.value) and "efficientdet-lite3x" in str(e.value)


def test_configs_are_independent():
    a = get_efficientdet_config("efficientdet-d0")
    a.nms_configs.sigma = 0.1
    a.aspect_ratios.append(3.0)
    b = get_efficientdet_config("efficientdet-d0")
    assert b.nms_configs.sigma == 0.5 and b.aspect_ratios == [1.0, 2.0, 0.5]


def test_attribute_and_item_access():
    c = get_efficientdet_config("efficientdet-d0")
    assert c.nms_configs.method == c["nms_configs"]["method"] == "gaussian"
    c["num_classes"] = 7
    assert c.num_classes == 7
    with pytest.raises(AttributeError, match="num_clases"):
        c.num_clases


def test_override_with_string():
    c = get_efficientdet_config("efficientdet-d0")
    c.override("num_classes=21,image_size=384x640,nms_configs.method=hard,"
               "aspect_ratios=1.0*2.0,jit_compile=true,label_map=none,learning_rate=1")
    assert c.num_classes == 21
    assert c.image_size == (640, 384)  # Written WxH, stored (height, width).
    assert c.nms_configs.method == "hard" and c.nms_configs.sigma == 0.5
    assert c.aspect_ratios == [1.0, 2.0]
    assert c.jit_compile is True and c.label_map is None
    assert c.learning_rate == 1.0 and isinstance(c.learning_rate, float)


def test_override_with_dict_and_yaml(tmp_path):
    c = get_efficientdet_config("efficientdet-d0")
    c.override({"nms_configs": {"iou_thresh": 0.6}, "image_size": "512"})
    assert c.nms_configs.iou_thresh == 0.6 and c.image_size == (512, 512)
    path = tmp_path / "h.yaml"
    path.write_text("num_classes: 3\nnms_configs:\n  max_output_size: 50\nimage_size: 320x256\n")
    c.override(str(path))
    assert (c.num_classes, c.nms_configs.max_output_size, c.image_size) == (3, 50, (256, 320))


@pytest.mark.parametrize("size,expected", [(512, (512, 512)), ("512", (512, 512)),
                                           ("640x384", (384, 640)), ([300, 200], (300, 200))])
def test_image_size_forms(size, expected):
    c = get_efficientdet_config("efficientdet-d0")
    c.override({"image_size": size})
    assert c.image_size == expected


def test_unknown_key_names_the_closest_keys():
    c = get_efficientdet_config("efficientdet-d0")
    with pytest.raises(ValueError) as e:
        c.override("num_clases=3")
    assert "num_clases" in str(e.value) and "num_classes" in str(e.value)
    with pytest.raises(ValueError) as e:
        c.override({"nms_configs": {"sigmaa": 1}})
    assert "nms_configs.sigmaa" in str(e.value) and "nms_configs.sigma" in str(e.value)


@pytest.mark.parametrize("bad", ["num_classes", "num_classes=3=4", "=3", "a..b=1"])
def test_malformed_pair_is_named(bad):
    with pytest.raises(ValueError) as e:
        get_efficientdet_config("efficientdet-d0").override(bad)
    assert bad.split(",")[0] in str(e.value)


def test_no_python_evaluation():
    parsed = parse_override_string("name=__import__('os').getcwd()")
    assert parsed == {"name": "__import__('os').getcwd()"}


def test_bad_values_are_errors():
    c = get_efficientdet_config("efficientdet-d0")
    with pytest.raises(ValueError, match="jit_compile"):
        c.override("jit_compile=maybe")
    with pytest.raises(ValueError, match="image_size"):
        c.override("image_size=big")


def test_yaml_round_trip_is_exact(tmp_path):
    c = get_efficientdet_config("efficientdet-lite0")
    c.override("image_size=384x640,label_map.1=person", allow_new_keys=True)
    path = c.save_yaml(str(tmp_path))
    assert os.path.basename(path) == "config.yaml"
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]
    loaded = Config.from_yaml(str(tmp_path))
    assert loaded == c
    assert loaded.as_dict() == c.as_dict()
    assert loaded.image_size == (640, 384)
    # The file is plain YAML, safe to load by anything.
    assert yaml.safe_load(open(path))["image_size"] == [640, 384]


def test_hparams_files_apply_cleanly():
    voc = get_efficientdet_config("efficientdet-d0").override(os.path.join(HPARAMS_DIR, "voc.yaml"))
    assert voc.num_classes == 21 and len(voc.label_map) == 20 and voc.label_map[15] == "person"
    assert "efficientnet" in voc.var_freeze_expr and "fpn_cells" in voc.var_freeze_expr
    demo = get_efficientdet_config("efficientdet-d0").override(os.path.join(HPARAMS_DIR, "demo.yaml"))
    assert demo.image_size == (256, 256) and demo.num_classes == len(demo.label_map)


def test_yaml_must_be_a_mapping(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("- 1\n- 2\n")
    with pytest.raises(ValueError, match="bad.yaml"):
        get_efficientdet_config("efficientdet-d0").override(str(path))
    with pytest.raises(ValueError, match="missing.yaml"):
        get_efficientdet_config("efficientdet-d0").override(str(tmp_path / "missing.yaml"))


def test_run_config_of_an_older_version_gains_the_new_keys(tmp_path):
    """A config.yaml written before a key existed loads with that key's default, nested too,
    and keeps every value the file has."""
    config = get_efficientdet_config("efficientdet-d1")
    config.override("backbone_survival_prob=0.7,nms_configs.sigma=0.3")
    saved = config.as_dict()
    del saved["clip_gradients_per_tensor"], saved["rmsprop_rho"], saved["nms_configs"]["method"]
    with open(tmp_path / "config.yaml", "w") as f:
        yaml.safe_dump(saved, f)
    loaded = Config.from_yaml(str(tmp_path))
    assert loaded.clip_gradients_per_tensor is False and loaded.rmsprop_rho == 0.9
    assert loaded.nms_configs.method == "gaussian" and loaded.nms_configs.sigma == 0.3
    assert loaded.backbone_survival_prob == 0.7 and loaded.name == "efficientdet-d1"
    assert loaded.as_dict() == config.as_dict()


@pytest.mark.parametrize("override,message", [
    ("batch_size=0", "Invalid config: batch_size must be a positive integer, got 0"),
    ("batch_size=8x", "Config key batch_size expects an integer, got '8x'"),
    ("num_epochs=0", "Invalid config: num_epochs must be a positive integer, got 0"),
    ("num_epochs=1.5", "Config key num_epochs expects an integer, got 1.5"),
    ("image_size=abc", "image_size 'abc' is neither N nor WxH"),
    ("learning_rate=-0.1", "Invalid config: learning_rate must be a positive number, got -0.1"),
    ("learning_rate=fast", "Config key learning_rate expects a number, got 'fast'"),
    ("momentum=1.5", "Invalid config: momentum must be a number in [0, 1), got 1.5"),
    ("steps_per_epoch=-3", "Invalid config: steps_per_epoch must be none or a positive integer, got -3"),
    ("nms_configs.iou_thresh=2",
     "Invalid config: nms_configs.iou_thresh must be a number in [0, 1], got 2.0"),
    ("optimizer=3", "Config key optimizer expects a string, got 3"),
    ("backbone_blocks_per_stage=0",
     "Invalid config: backbone_blocks_per_stage must be null or a positive integer, got 0"),
    ("mean_rgb=1*x*3", "Config key mean_rgb expects numbers, got [1, 'x', 3]"),
])
def test_wrong_values_are_one_line_errors_naming_the_key(override, message):
    c = get_efficientdet_config("efficientdet-d0")
    before = c.as_dict()
    with pytest.raises(ValueError) as error:
        c.override(override)
    assert str(error.value) == message
    assert c.as_dict() == before  # The key that failed keeps its value.


def test_values_are_checked_from_dicts_yaml_files_and_validate_config(tmp_path):
    from efficientdet_keras import validate_config
    c = get_efficientdet_config("efficientdet-d0")
    with pytest.raises(ValueError, match="batch_size must be a positive integer, got 0"):
        c.override({"batch_size": 0})  # The path of efficientdet-train --batch_size.
    path = tmp_path / "bad.yaml"
    path.write_text("jitter_min: -1\n")
    with pytest.raises(ValueError, match="jitter_min must be a positive number, got -1"):
        c.override(str(path))
    assert c.override({"batch_size": 16.0, "learning_rate": 1}).batch_size == 16
    assert c.learning_rate == 1.0 and isinstance(c.learning_rate, float)
    with pytest.raises(ValueError, match="num_epochs must be a positive integer, got 0"):
        c.num_epochs = 0  # Assigned directly: the same check.
    # A config built from values (a run's config.yaml) is checked where a model is made.
    with pytest.raises(ValueError, match="num_epochs must be a positive integer, got 0"):
        validate_config(Config(dict(c.as_dict(), num_epochs=0)))


def test_nested_configs_check_their_keys_as_the_whole_config_does():
    c = get_efficientdet_config("efficientdet-d0")
    message = "nms_configs.iou_thresh must be a number in [0, 1], got 7.0"
    for set_value in (lambda: c.override({"nms_configs": {"iou_thresh": 7.0}}),
                      lambda: c.nms_configs.override({"iou_thresh": 7.0}),
                      lambda: c.nms_configs.override("iou_thresh=7"),
                      lambda: setattr(c.nms_configs, "iou_thresh", 7.0),
                      lambda: c["nms_configs"].__setitem__("iou_thresh", 7.0)):
        with pytest.raises(ValueError, match=re.escape(message.replace("7.0", "7"))):
            set_value()
    with pytest.raises(ValueError, match="nms_configs.score_thresh must be a number"):
        c.nms_configs.override({"score_thresh": None})  # Later a TypeError in NMS.
    with pytest.raises(ValueError, match="Unknown config key 'nms_configs.iou'"):
        c.nms_configs.override({"iou": 0.5})
    assert c.nms_configs.iou_thresh == 0.5 and c.nms_configs.score_thresh == 0.001
    with pytest.raises(ValueError, match="label_map must be null, a dict"):
        c.label_map = {0: "background"}  # Class ids start at 1.
    copied = pickle.loads(pickle.dumps(c.copy()))
    with pytest.raises(ValueError, match="nms_configs.iou_thresh"):
        copied.nms_configs.override({"iou_thresh": 7.0})


def test_model_optimizations_are_checked_at_the_door():
    config = get_efficientdet_config("efficientdet-d0")
    config.override({"model_optimizations": {"prune": {"target_sparsity": 0.5, "end_step": 10}}})
    validate_config(config)
    with pytest.raises(ValueError, match="unknown entry 'distill'"):
        validate_config(config.copy().override({"model_optimizations": {"distill": {}}}))
    with pytest.raises(ValueError, match="not to a TF-Hub module"):
        validate_config(config.copy().override({"hub_module_url": "exported/demo-hub"}))


def test_a_yaml_file_and_pairs_in_one_override_string_apply_left_to_right(tmp_path):
    first = tmp_path / "first.yaml"
    first.write_text("num_classes: 3\nlearning_rate: 0.5\n")
    config = get_efficientdet_config("efficientdet-d0").override(
        "%s,learning_rate=0.25,image_size=96x64,short_run.yaml" % first)
    assert config.num_classes == 3 and config.learning_rate == 0.04  # The preset came last.
    assert list(config.image_size) == [64, 96] and config.batch_norm_renorm is True
    with pytest.raises(ValueError, match="nmu_classes"):
        get_efficientdet_config("efficientdet-d0").override("short_run.yaml,nmu_classes=3")
