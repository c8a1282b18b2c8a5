import logging
import os

import numpy as np
import pytest
import tensorflow as tf

from helpers import tiny_config
from efficientdet_keras import EfficientDetNet, get_efficientdet_config, restore_ckpt, save_ckpt
from efficientdet_keras.checkpoint import EMA_SUFFIX, variable_name

LEVELS = range(3, 8)


def max_output_error(model, reference_folder, prefix):
    """Largest absolute difference between the model's outputs and the stored ones."""
    stored = np.load(os.path.join(reference_folder, "outputs.npz"))
    class_outputs, box_outputs = model(tf.constant(stored["image"]), training=False)
    errors = []
    for i, level in enumerate(LEVELS):
        for kind, output in (("cls", class_outputs[i]), ("box", box_outputs[i])):
            expected = stored["%s_%s_l%d" % (prefix, kind, level)]
            assert output.shape == expected.shape
            errors.append(np.abs(output.numpy() - expected).max())
    return max(errors)


@pytest.mark.parametrize("use_ema,prefix", [(True, "ema"), (False, "raw")])
def test_golden_d0(reference_dir, use_ema, prefix):
    folder = reference_dir("efficientdet-d0")
    model = EfficientDetNet("efficientdet-d0")
    report = restore_ckpt(model, folder, use_ema=use_ema, skip_mismatch=False)
    assert not report.skipped
    assert len(report.loaded_from_ema if use_ema else report.loaded) == len(model.variables)
    assert max_output_error(model, folder, prefix) <= 1e-4


def test_golden_d0_defaults_to_ema(reference_dir):
    folder = reference_dir("efficientdet-d0")
    model = EfficientDetNet("efficientdet-d0")  # moving_average_decay > 0 by default.
    restore_ckpt(model, folder)
    assert max_output_error(model, folder, "ema") <= 1e-4


@pytest.mark.quick
def test_golden_lite0_falls_back_to_plain_values(reference_dir, caplog):
    folder = reference_dir("efficientdet-lite0")
    model = EfficientDetNet("efficientdet-lite0")
    with caplog.at_level(logging.WARNING):
        report = restore_ckpt(model, folder, use_ema=True)
    assert "no ExponentialMovingAverage" in caplog.text
    assert len(report.loaded) == len(model.variables) and not report.loaded_from_ema
    assert max_output_error(model, folder, "raw") <= 1e-4


def test_new_class_count_skips_the_class_head(reference_dir, caplog):
    folder = reference_dir("efficientdet-d0")
    config = get_efficientdet_config("efficientdet-d0")
    config.override("num_classes=21,image_size=384x640")
    model = EfficientDetNet(config=config)
    with caplog.at_level(logging.WARNING):
        report = restore_ckpt(model, folder)
    assert [m.split(":")[0] for m in report.mismatched] == [
        "class_net/class-predict/pointwise_kernel", "class_net/class-predict/bias"]
    assert "class-predict" in caplog.text  # One message lists what was skipped.
    # Everything else came from the checkpoint's EMA values.
    reader = tf.train.load_checkpoint(folder)
    kernel = model.box_net.predict.pointwise_kernel
    np.testing.assert_array_equal(
        kernel.numpy(), reader.get_tensor(variable_name(kernel) + EMA_SUFFIX))
    class_outputs, _ = model(tf.zeros([1, 640, 384, 3]))
    assert class_outputs[0].shape == (1, 80, 48, 9 * 21)
    # The skipped head starts near the focal-loss prior: the prior bias, a kernel of spread 0.01.
    np.testing.assert_allclose(np.std(model.class_net.predict.pointwise_kernel.numpy()), 0.01,
                               rtol=1e-5)
    np.testing.assert_allclose(model.class_net.predict.bias.numpy(), -np.log(0.99 / 0.01),
                               rtol=1e-6)
    with pytest.raises(ValueError, match="class-predict"):
        restore_ckpt(EfficientDetNet(config=config), folder, skip_mismatch=False)


def test_exclude_regex_keeps_initial_values(reference_dir):
    folder = reference_dir("efficientdet-d0")
    model = EfficientDetNet("efficientdet-d0")
    model.build_variables()
    initial_bias = model.class_net.predict.bias.numpy().copy()
    report = restore_ckpt(model, folder, exclude=r".*/class-predict/.*")
    assert len(report.excluded) == 3 and not report.missing and not report.mismatched
    np.testing.assert_array_equal(model.class_net.predict.bias.numpy(), initial_bias)


@pytest.mark.quick
def test_missing_path_is_a_clear_error(tmp_path):
    model = EfficientDetNet(config=tiny_config())
    with pytest.raises(FileNotFoundError, match="nowhere"):
        restore_ckpt(model, str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match="No checkpoint found"):
        restore_ckpt(model, str(tmp_path))


def test_unrelated_checkpoint_is_a_clear_error(tmp_path):
    prefix = str(tmp_path / "other")
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=["some/other/variable"], shape_and_slices=[""],
                      tensors=[tf.zeros([3])])
    with pytest.raises(ValueError, match="shares no variable"):
        restore_ckpt(EfficientDetNet(config=tiny_config()), prefix)


def test_own_checkpoint_round_trip_with_ema(tmp_path):
    config = tiny_config(fpn_num_filters=16, fpn_cell_repeats=1, box_class_repeats=1)
    source = EfficientDetNet(config=config)
    source.build_variables()
    ema = {variable_name(v): v.numpy() * 0.5 for v in source.trainable_variables}
    prefix = save_ckpt(source, str(tmp_path / "run" / "ckpt-3"), ema_values=ema)
    save_ckpt(source, str(tmp_path / "run" / "ckpt-7"))
    assert sorted(os.listdir(tmp_path / "run")) == [
        "checkpoint", "ckpt-3.data-00000-of-00001", "ckpt-3.index",
        "ckpt-7.data-00000-of-00001", "ckpt-7.index"]  # No temporary files left.
    assert tf.train.latest_checkpoint(str(tmp_path / "run")).endswith("ckpt-7")

    x = tf.random.uniform([1, 128, 128, 3])
    raw = EfficientDetNet(config=config)
    restore_ckpt(raw, prefix, use_ema=False, skip_mismatch=False)
    for a, b in zip(source(x), raw(x)):
        for u, v in zip(a, b):
            np.testing.assert_array_equal(u.numpy(), v.numpy())

    averaged = EfficientDetNet(config=config)
    report = restore_ckpt(averaged, prefix, use_ema=True)
    assert len(report.loaded_from_ema) == len(source.trainable_variables)
    kernel = averaged.backbone.stem.conv.kernel
    np.testing.assert_array_equal(kernel.numpy(), ema[variable_name(kernel)])


def test_keras_save_weights_checkpoint_loads(tmp_path):
    config = tiny_config(fpn_num_filters=16, fpn_cell_repeats=1, box_class_repeats=1)
    source = EfficientDetNet(config=config)
    source.build_variables()
    source.save_weights(str(tmp_path / "keras_weights"))
    target = EfficientDetNet(config=config)
    report = restore_ckpt(target, str(tmp_path / "keras_weights"))
    assert len(report.loaded) == len(target.variables)
    for a, b in zip(source.variables, target.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def synthetic_detector_keys(backbone, filters, cells, head_repeats):
    """{key: shape} with the released layout's scopes, as infer_architecture reads them."""
    shapes = {backbone + "/stem/conv2d/kernel": [3, 3, 3, 32], "resample_p6/bn/beta": [filters]}
    for cell in range(cells):
        shapes["fpn_cells/cell_%d/fnode0/op_after_combine5/bn/beta" % cell] = [filters]
    for repeat in range(head_repeats):
        shapes["class_net/class-%d/bias" % repeat] = [filters]
        shapes["box_net/box-%d/bias" % repeat] = [filters]
    return shapes


@pytest.mark.quick
@pytest.mark.parametrize("row,expected", [
    (("efficientnet-b3", 160, 6, 4), "efficientdet-d3 (efficientnet-b3 backbone, 6 BiFPN cells "
                                     "of 160 filters, 4 head repeats)"),
    (("efficientnet-b6", 384, 8, 5), "efficientdet-d6 or efficientdet-d7 ("),
    (("efficientnet-lite3", 200, 6, 4), "efficientdet-lite3x ("),
    (("efficientnet-b0", 96, 3, 3), "an unlisted EfficientDet variant (efficientnet-b0 backbone, "
                                    "3 BiFPN cells of 96 filters"),
])
def test_checkpoint_keys_name_the_model(row, expected):
    from efficientdet_keras.checkpoint import infer_architecture
    shapes = synthetic_detector_keys(*row)
    shapes.update({key + EMA_SUFFIX: shape for key, shape in shapes.items()})
    architecture = infer_architecture(shapes)
    assert architecture.describe().startswith(expected)
    assert not architecture.backbone_only


def test_classification_keys_are_a_backbone_only_checkpoint():
    from efficientdet_keras.checkpoint import infer_architecture
    architecture = infer_architecture({"efficientnet-lite2/stem/conv2d/kernel": [3, 3, 3, 32],
                                       "efficientnet-lite2/head/dense/kernel": [1280, 1000],
                                       "global_step": []})
    assert architecture.backbone_only
    assert architecture.describe() == "an EfficientNet-lite2 classification checkpoint"


@pytest.mark.quick
def test_archive_directory_means_its_best_checkpoint(tmp_path):
    from efficientdet_keras.checkpoint.archive import CheckpointArchive
    from efficientdet_keras.checkpoint import resolve_checkpoint_path
    model = EfficientDetNet(config=tiny_config(fpn_num_filters=16, fpn_cell_repeats=1,
                                               box_class_repeats=1))
    model.build_variables()
    archive = CheckpointArchive(str(tmp_path / "archive"))
    for epoch, ap in [(1, 0.2), (2, 0.6), (3, 0.4)]:
        archive.consider(save_ckpt(model, str(tmp_path / ("ckpt-%d" % epoch))), epoch, {"AP": ap})
    assert resolve_checkpoint_path(str(tmp_path)) == str(tmp_path / "ckpt-3")  # latest
    assert resolve_checkpoint_path(str(tmp_path / "archive")) == str(tmp_path / "archive" / "ckpt-2")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "archive.json").write_text(
        '{"monitor": "AP", "mode": "max", "checkpoints": []}')
    with pytest.raises(FileNotFoundError, match="lists no checkpoint"):
        resolve_checkpoint_path(str(tmp_path / "empty"))


@pytest.mark.parametrize("mode, values", [("max", [0.5, 0.5, 0.5]), ("min", [1.0, 1.0, 2.0])])
def test_archive_ties_keep_the_newer_checkpoint(tmp_path, mode, values):
    from efficientdet_keras.checkpoint.archive import CheckpointArchive
    model = EfficientDetNet(config=tiny_config(fpn_num_filters=16, fpn_cell_repeats=1,
                                               box_class_repeats=1))
    model.build_variables()
    archive = CheckpointArchive(str(tmp_path / "archive"), keep=1, monitor="loss", mode=mode)
    kept = [archive.consider(save_ckpt(model, str(tmp_path / ("ckpt-%d" % epoch))), epoch,
                             {"loss": value}) for epoch, value in enumerate(values, 1)]
    # Equal to the archived one: the newer replaces it; worse (min: 2.0): not archived.
    assert kept == ([True, True, True] if mode == "max" else [True, True, False])
    expected = "ckpt-3" if mode == "max" else "ckpt-2"
    assert [entry["name"] for entry in archive.entries()] == [expected]
    assert sorted(os.listdir(tmp_path / "archive")) == sorted(
        ["archive.json", expected + ".data-00000-of-00001", expected + ".index"])
