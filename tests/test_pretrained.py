"""Starting from released checkpoints: EMA values, the class head, other models, backbones."""

import logging
import re

import numpy as np
import pytest
import tensorflow as tf

from helpers import HPARAMS_DIR, tiny_config
from efficientdet_keras import EfficientDetNet, get_efficientdet_config, restore_ckpt, save_ckpt
from efficientdet_keras.checkpoint import EMA_SUFFIX, variable_name
from efficientdet_keras.training.trainer import EfficientDetNetTrain

D0 = "efficientdet-d0"
BACKBONE = "efficientnet-b0/"


def assert_values_from(variables, reader, suffix=""):
    """Each variable equals the checkpoint tensor `<name><suffix>`."""
    for variable in variables:
        np.testing.assert_array_equal(variable.numpy(),
                                      reader.get_tensor(variable_name(variable) + suffix),
                                      err_msg=variable_name(variable))


def snapshot(variables):
    return {variable_name(v): v.numpy().copy() for v in variables}


def assert_unchanged(variables, before):
    for variable in variables:
        np.testing.assert_array_equal(variable.numpy(), before[variable_name(variable)],
                                      err_msg=variable_name(variable))


def randomize(model, seed):
    """Distinct values, so a test can tell which checkpoint a variable came from."""
    rng = np.random.default_rng(seed)
    for variable in model.variables:
        variable.assign(rng.uniform(0.5, 1.5, variable.shape).astype(np.float32))


def class_predict(model, leaf):
    return next(v for v in model.variables
                if variable_name(v) == "class_net/class-predict/" + leaf)


# --- EMA values by default ---------------------------------------------------------------

def test_ema_values_load_when_the_run_keeps_no_average(reference_dir):
    folder = reference_dir(D0)
    reader = tf.train.load_checkpoint(folder)
    model = EfficientDetNet(config=tiny_config(num_classes=90, moving_average_decay=0.0))
    report = restore_ckpt(model, folder)
    assert len(report.loaded_from_ema) == len(model.variables) and not report.loaded
    assert_values_from(model.variables, reader, EMA_SUFFIX)
    stem = variable_name(model.backbone.stem.conv.kernel)
    assert not np.array_equal(reader.get_tensor(stem), reader.get_tensor(stem + EMA_SUFFIX))


def test_use_ema_false_loads_the_plain_values(reference_dir):
    folder = reference_dir(D0)
    model = EfficientDetNet(config=tiny_config(num_classes=90))  # Keeps an EMA of its own.
    report = restore_ckpt(model, folder, use_ema=False)
    assert len(report.loaded) == len(model.variables) and not report.loaded_from_ema
    assert_values_from(model.variables, tf.train.load_checkpoint(folder))


# --- load_pretrained and the class head ---------------------------------------------------

def test_voc_fine_tuning_without_average_loads_ema_and_skips_the_class_head(reference_dir,
                                                                            caplog):
    folder = reference_dir(D0)
    reader = tf.train.load_checkpoint(folder)
    config = get_efficientdet_config(D0)
    config.override("%s/voc.yaml" % HPARAMS_DIR)
    config.override("image_size=128")
    assert config.moving_average_decay == 0 and config.var_exclude_expr is None
    model = EfficientDetNetTrain(config)
    assert model.ema is None
    with caplog.at_level(logging.INFO):
        report = model.load_pretrained(folder)
    assert "class head skipped: 90 classes in checkpoint, 21 in model" in caplog.text
    assert [m.split(":")[0] for m in report.mismatched] == [
        "class_net/class-predict/pointwise_kernel", "class_net/class-predict/bias"]
    assert not report.missing and not report.excluded and not report.loaded
    loaded = [v for v in model.variables if variable_name(v) in report.loaded_from_ema]
    assert len(loaded) == len(model.variables) - 2
    assert_values_from(loaded, reader, EMA_SUFFIX)  # Box head included.


def test_load_pretrained_keeps_a_matching_class_head_and_restarts_the_average(reference_dir):
    folder = reference_dir(D0)
    reader = tf.train.load_checkpoint(folder)
    model = EfficientDetNetTrain(tiny_config(num_classes=90))
    assert model.config.moving_average_decay > 0
    report = model.load_pretrained(folder)
    assert report.num_loaded == len(model.variables) and not report.skipped
    assert_values_from([class_predict(model, "bias"), class_predict(model, "pointwise_kernel")],
                       reader, EMA_SUFFIX)
    averages = model.ema.values_by_name()
    assert len(averages) == len(model.ema.shadows) > 0
    for name, average in averages.items():
        np.testing.assert_array_equal(average.numpy(), reader.get_tensor(name + EMA_SUFFIX),
                                      err_msg=name)


def test_load_pretrained_raw_values_and_user_exclusions(reference_dir):
    folder = reference_dir(D0)
    reader = tf.train.load_checkpoint(folder)
    model = EfficientDetNetTrain(tiny_config(num_classes=90,
                                             var_exclude_expr=r".*/class-predict/.*"))
    initial_bias = class_predict(model, "bias").numpy().copy()
    report = model.load_pretrained(folder, use_ema=False)
    assert len(report.excluded) == 3 and len(report.loaded) == len(model.variables) - 3
    np.testing.assert_array_equal(class_predict(model, "bias").numpy(), initial_bias)
    stem = variable_name(model.backbone.stem.conv.kernel)
    assert_values_from([model.backbone.stem.conv.kernel], reader)
    averages = model.ema.values_by_name()  # Restarted from the raw values just loaded.
    np.testing.assert_array_equal(averages[stem].numpy(), reader.get_tensor(stem))
    np.testing.assert_array_equal(averages["class_net/class-predict/bias"].numpy(), initial_bias)


# --- checkpoints of other models ---------------------------------------------------------

@pytest.fixture(scope="module")
def d0_and_d1_checkpoints(tmp_path_factory):
    """Tiny D0 and D1 models (128 px, 4 classes) with random values, and their checkpoints."""
    root = tmp_path_factory.mktemp("other_models")
    models, paths = {}, {}
    for seed, name in enumerate((D0, "efficientdet-d1")):
        model = EfficientDetNet(config=tiny_config(name))
        model.build_variables()
        randomize(model, seed)
        models[name] = model
        paths[name] = save_ckpt(model, str(root / name / "ckpt-1"))
    return models, paths


def test_checkpoint_of_another_model_is_an_error_naming_it(d0_and_d1_checkpoints):
    _, paths = d0_and_d1_checkpoints
    d0 = EfficientDetNet(config=tiny_config(D0))
    d0.build_variables()
    before = snapshot(d0.variables)
    pattern = (r"looks like efficientdet-d1 \(efficientnet-b1 backbone, 4 BiFPN cells of 88 "
               r"filters, 3 head repeats\), the model is efficientdet-d0 .*loaded (\d+) of %d "
               r"variables" % len(d0.variables))
    with pytest.raises(ValueError, match=pattern) as error:
        restore_ckpt(d0, paths["efficientdet-d1"])
    assert_unchanged(d0.variables, before)  # Nothing is assigned before the check.
    loaded_in_message = int(re.search(pattern, str(error.value)).group(1))
    assert 0 < loaded_in_message < len(d0.variables) / 2

    d1 = EfficientDetNet(config=tiny_config("efficientdet-d1"))
    d1.build_variables()
    with pytest.raises(ValueError, match=r"looks like efficientdet-d0 \(efficientnet-b0 backbone, "
                                         r"3 BiFPN cells of 64 filters.*the model is "
                                         r"efficientdet-d1 .*loaded \d+ of %d variables"
                                         % len(d1.variables)):
        restore_ckpt(d1, paths[D0])


@pytest.mark.quick
def test_allow_partial_keeps_what_fits(d0_and_d1_checkpoints):
    models, paths = d0_and_d1_checkpoints
    d0 = EfficientDetNet(config=tiny_config(D0))
    report = restore_ckpt(d0, paths["efficientdet-d1"], allow_partial=True)
    d1_values = snapshot(models["efficientdet-d1"].variables)
    fits = [v for v in d0.variables if variable_name(v) in d1_values
            and v.shape == d1_values[variable_name(v)].shape]
    assert sorted(report.loaded) == sorted(variable_name(v) for v in fits)
    assert_values_from(fits, tf.train.load_checkpoint(paths["efficientdet-d1"]))


def test_detector_with_another_backbone_is_an_error(reference_dir):
    # Lite0's BiFPN and heads fill more than half of D0, but none of its backbone.
    model = EfficientDetNet(config=tiny_config(D0, num_classes=90))
    with pytest.raises(ValueError, match=r"looks like efficientdet-lite0 .*none of the "
                                         r"efficientnet-b0 backbone"):
        restore_ckpt(model, reference_dir("efficientdet-lite0"))


# --- backbone-only (EfficientNet classification) checkpoints -------------------------------

def write_backbone_checkpoint(model, prefix, drop=()):
    """An EfficientNet classification checkpoint: the model's backbone (random values) plus
    the classifier head and step the detector lacks. Returns {name: value} as written."""
    rng = np.random.default_rng(7)
    tensors = {variable_name(v): rng.normal(size=v.shape).astype(np.float32)
               for v in model.variables if variable_name(v).startswith(BACKBONE)}
    for name in drop:
        del tensors[name]
    tensors[BACKBONE + "head/conv2d/kernel"] = np.ones([1, 1, 320, 1280], np.float32)
    tensors[BACKBONE + "head/dense/kernel"] = np.ones([1280, 10], np.float32)
    tensors["global_step"] = np.array(5, np.int64)
    names = sorted(tensors)
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tf.constant(tensors[n]) for n in names])
    return tensors


def test_backbone_only_checkpoint_fills_the_backbone(tmp_path, caplog):
    model = EfficientDetNet(config=tiny_config(D0))
    model.build_variables()
    prefix = str(tmp_path / "efficientnet-b0")
    written = write_backbone_checkpoint(model, prefix)
    backbone = [v for v in model.variables if variable_name(v).startswith(BACKBONE)]
    others = [v for v in model.variables if not variable_name(v).startswith(BACKBONE)]
    assert 0 < len(backbone) < len(model.variables) / 2  # Less than half: still no error.
    before = snapshot(others)
    with caplog.at_level(logging.INFO):
        report = restore_ckpt(model, prefix)
    assert report.backbone_only
    assert sorted(report.loaded) == sorted(variable_name(v) for v in backbone)
    assert sorted(report.missing) == sorted(variable_name(v) for v in others)
    for variable in backbone:
        np.testing.assert_array_equal(variable.numpy(), written[variable_name(variable)])
    assert_unchanged(others, before)  # BiFPN and heads keep their initial values.
    assert "backbone-only checkpoint: an EfficientNet-b0 classification checkpoint" in caplog.text


def test_backbone_only_checkpoint_must_fill_the_backbone(tmp_path):
    model = EfficientDetNet(config=tiny_config(D0))
    model.build_variables()
    stem = variable_name(model.backbone.stem.conv.kernel)
    prefix = str(tmp_path / "incomplete")
    write_backbone_checkpoint(model, prefix, drop=[stem])
    with pytest.raises(ValueError, match="EfficientNet-b0 classification checkpoint but cannot "
                                         "fill 1 backbone variables.*%s" % stem):
        restore_ckpt(model, prefix)
    report = restore_ckpt(model, prefix, allow_partial=True)
    assert stem in report.missing

    d1 = EfficientDetNet(config=tiny_config("efficientdet-d1"))
    with pytest.raises(ValueError, match="shares no variable.*an EfficientNet-b0 classification "
                                         "checkpoint, the model is efficientdet-d1"):
        restore_ckpt(d1, prefix)


# --- TF-Hub feature modules ----------------------------------------------------------------

def test_hub_model_loads_a_checkpoint_of_its_module_model(tmp_path):
    from efficientdet_keras.exporters.hub_module import export_feature_module
    from efficientdet_keras.training.hub_trainer import EfficientDetNetTrainHub

    config = tiny_config(fpn_num_filters=16, fpn_cell_repeats=1, box_class_repeats=1)
    source = EfficientDetNet(config=config)
    source.build_variables()
    export_feature_module(source, str(tmp_path / "module"))
    randomize(source, 3)
    averages = {variable_name(v): v.numpy() * 0.5 for v in source.variables}
    prefix = save_ckpt(source, str(tmp_path / "run" / "ckpt-1"), ema_values=averages)

    model = EfficientDetNetTrainHub(config, hub_module_url=str(tmp_path / "module"))
    report = model.load_pretrained(prefix)
    assert len(report.loaded_from_ema) == len(model.variables) == len(source.variables)
    for variable in model.variables:  # Module variables and the new heads alike.
        np.testing.assert_array_equal(variable.numpy(), averages[variable_name(variable)])
    for name, average in model.ema.values_by_name().items():
        np.testing.assert_array_equal(average.numpy(), averages[name])
