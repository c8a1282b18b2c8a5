"""Fine-tuning keeps a checkpoint's class rows for the classes it knows by name: the carried
channels equal the checkpoint's at every anchor, the others keep the model's initial values."""

import json
import math
import os

import numpy as np
import pytest
import tensorflow as tf

from helpers import SMALL_NETWORK, synthetic_images, tiny_config
from efficientdet_keras import save_ckpt
from efficientdet_keras.checkpoint import EMA_SUFFIX, variable_name
from efficientdet_keras.checkpoint.class_rows import (ClassRows, checkpoint_class_names,
                                                      class_channels, match_class_names)
from efficientdet_keras.checkpoint.restore import restore_ckpt
from efficientdet_keras.config.label_maps import COCO_LABEL_MAP
from efficientdet_keras.training.trainer import EfficientDetNetTrain

pytestmark = pytest.mark.quick

PRIOR_BIAS = -math.log(0.99 / 0.01)
SHAPES = {1: "circle", 2: "square", 3: "triangle"}


def class_predict(model, leaf):
    return next(v for v in model.variables
                if variable_name(v) == "class_net/class-predict/" + leaf).numpy()


def channels(value, class_id, num_classes, anchors=9):
    """The channels of one class at every anchor (anchor-major layout)."""
    return value[..., np.arange(anchors) * num_classes + class_id - 1]


# --- names -------------------------------------------------------------------------------

def test_names_match_ignoring_case_spaces_and_separators_or_by_alias():
    checkpoint = {1: "person", 3: "car", 4: "motorcycle", 5: "airplane", 10: "traffic light",
                  72: "tv"}
    data = {1: "Traffic_Light", 2: "motorbike", 3: "aeroplane", 4: "tvmonitor", 5: "widget",
            6: "CAR", 7: "people"}
    assert match_class_names(data, checkpoint) == {1: 10, 2: 4, 3: 5, 4: 72, 6: 3, 7: 1}
    assert match_class_names({1: "widget"}, checkpoint) == {}
    # An exact name wins over an alias when the checkpoint has both.
    assert match_class_names({1: "sofa"}, {1: "couch", 2: "sofa"}) == {1: 2}


def test_every_voc_class_is_one_of_cocos():
    from efficientdet_keras.config.label_maps import VOC_LABEL_MAP
    rows = match_class_names(VOC_LABEL_MAP, COCO_LABEL_MAP)
    assert len(rows) == 20
    assert {VOC_LABEL_MAP[m]: COCO_LABEL_MAP[k] for m, k in rows.items() if
            VOC_LABEL_MAP[m] != COCO_LABEL_MAP[k]} == {
        "aeroplane": "airplane", "diningtable": "dining table", "motorbike": "motorcycle",
        "pottedplant": "potted plant", "sofa": "couch", "tvmonitor": "tv"}


def test_class_channels_by_hand():
    # 2 anchors; the checkpoint has 3 classes (channels a0c1 a0c2 a0c3 a1c1 a1c2 a1c3),
    # the model 2: its class 1 is the checkpoint's 3, its class 2 is new.
    checkpoint = np.array([11., 12., 13., 21., 22., 23.])
    initial = np.array([-1., -2., -3., -4.])
    # A bias keeps the new class's initial value (the prior); a kernel's initial values are
    # scaled to a spread of 0.01, so that the class's logit starts near the prior.
    assert class_channels(checkpoint, initial, {1: 3}, 2, kernel=False).tolist() == [
        13., -2., 23., -4.]
    np.testing.assert_allclose(class_channels(checkpoint, initial, {1: 3}, 2, kernel=True),
                               [13., -0.02, 23., -0.04])  # -2 and -4 spread by 1
    spread = np.std(initial)  # sqrt(1.25)
    np.testing.assert_allclose(class_channels(None, initial, {}, 2, kernel=True),
                               initial * 0.01 / spread)
    # A kernel whose every class is carried is the checkpoint's alone.
    assert class_channels(checkpoint[:4], initial, {1: 1, 2: 2}, 2, kernel=True).tolist() == [
        11., 12., 13., 21.]
    with pytest.raises(ValueError, match="beyond its 3 classes"):
        class_channels(checkpoint, initial, {1: 4}, 2, kernel=False)


def test_checkpoint_names_of_a_released_name_a_run_and_an_export(tmp_path):
    assert checkpoint_class_names("efficientdet-d0", "unused") == COCO_LABEL_MAP
    run = tmp_path / "run"
    (run / "archive").mkdir(parents=True)
    (run / "archive" / "archive.json").write_text("[]")
    (run / "config.yaml").write_text("label_map: {1: circle, 2: square}\n")
    assert checkpoint_class_names(str(run / "archive" / "ckpt-3"),
                                  str(run / "archive" / "ckpt-3")) == {1: "circle", 2: "square"}
    exported = tmp_path / "exported"
    exported.mkdir()
    (exported / "classes.json").write_text(json.dumps(
        {"format": "coco", "classes": [{"id": 1, "name": "gadget", "data_id": 7}]}))
    assert checkpoint_class_names(str(exported / "ckpt-1"),
                                  str(exported / "ckpt-1")) == {1: "gadget"}
    assert checkpoint_class_names(str(tmp_path / "ckpt-1"), str(tmp_path / "ckpt-1")) is None


# --- loading -----------------------------------------------------------------------------

def small_trainer(label_map, **overrides):
    config = tiny_config(num_classes=len(label_map), label_map=label_map,
                         moving_average_decay=0.0, **dict(SMALL_NETWORK, **overrides))
    return EfficientDetNetTrain(config)


@pytest.fixture(scope="module")
def shapes_run(tmp_path_factory):
    """A run folder of a three-shape model: config.yaml naming its classes and a checkpoint
    with distinct values everywhere."""
    model = small_trainer(SHAPES)
    rng = np.random.default_rng(3)
    for variable in model.variables:
        variable.assign(rng.uniform(0.5, 1.5, variable.shape).astype(np.float32))
    run = tmp_path_factory.mktemp("shapes-run")
    model.config.save_yaml(str(run / "config.yaml"))
    return str(run), save_ckpt(model, str(run / "ckpt-1"))


def test_two_known_classes_carried_the_new_one_near_the_prior(shapes_run, capsys):
    run, prefix = shapes_run
    reader = tf.train.load_checkpoint(prefix)
    model = small_trainer({1: "Square", 2: "cross", 3: "circle"})
    initial_kernel = class_predict(model, "pointwise_kernel")
    report = model.load_pretrained(run)
    assert report.class_rows.ids == {1: 2, 3: 1}
    bias, kernel = class_predict(model, "bias"), class_predict(model, "pointwise_kernel")
    ckpt_bias = reader.get_tensor("class_net/class-predict/bias")
    ckpt_kernel = reader.get_tensor("class_net/class-predict/pointwise_kernel")
    for model_id, ckpt_id in ((1, 2), (3, 1)):
        np.testing.assert_array_equal(channels(bias, model_id, 3), channels(ckpt_bias, ckpt_id, 3))
        np.testing.assert_array_equal(channels(kernel, model_id, 3),
                                      channels(ckpt_kernel, ckpt_id, 3))
    np.testing.assert_allclose(channels(bias, 2, 3), PRIOR_BIAS, rtol=1e-6)
    new = channels(initial_kernel, 2, 3)
    np.testing.assert_allclose(channels(kernel, 2, 3), new * 0.01 / np.std(new), rtol=1e-5)
    # The rest of the head is the same for every class and loads whole.
    depthwise = "class_net/class-predict/depthwise_kernel"
    np.testing.assert_array_equal(class_predict(model, "depthwise_kernel"),
                                  reader.get_tensor(depthwise))
    assert not report.skipped
    assert report.class_rows.describe(run) == (
        "Class head: 2 of 3 classes start from %s's rows by name: Square, circle; new: cross"
        % run)


def test_equal_counts_with_other_names_no_longer_take_the_whole_head(shapes_run):
    run, prefix = shapes_run
    model = small_trainer({1: "gizmo", 2: "gadget", 3: "widget"})
    initial = class_predict(model, "bias").copy()
    report = model.load_pretrained(run)
    assert report.class_rows.ids == {}
    np.testing.assert_array_equal(class_predict(model, "bias"), initial)
    # Every class near the prior.
    np.testing.assert_allclose(np.std(class_predict(model, "pointwise_kernel")), 0.01, rtol=1e-5)
    # Another class count, names not asked for: the head is skipped, and starts near the prior.
    fewer = small_trainer({1: "gizmo", 2: "gadget"}, class_rows_by_name=False)
    skipped = fewer.load_pretrained(run)
    assert sorted(name.split(":")[0] for name in skipped.mismatched) == [
        "class_net/class-predict/bias", "class_net/class-predict/pointwise_kernel"]
    np.testing.assert_allclose(np.std(class_predict(fewer, "pointwise_kernel")), 0.01, rtol=1e-5)
    np.testing.assert_allclose(class_predict(fewer, "bias"), PRIOR_BIAS, rtol=1e-6)
    assert report.class_rows.describe("x") == (
        "Class head: none of the 3 classes is one of x's by name; all start new")


def test_the_same_classes_load_the_whole_head_and_the_switch_turns_names_off(shapes_run):
    run, prefix = shapes_run
    reader = tf.train.load_checkpoint(prefix)
    same = small_trainer(dict(SHAPES))
    assert same.load_pretrained(run).class_rows is None
    np.testing.assert_array_equal(class_predict(same, "bias"),
                                  reader.get_tensor("class_net/class-predict/bias"))
    renamed = small_trainer({1: "gizmo", 2: "gadget", 3: "widget"}, class_rows_by_name=False)
    assert renamed.load_pretrained(run).class_rows is None  # Counts match: loads whole.
    np.testing.assert_array_equal(class_predict(renamed, "bias"),
                                  reader.get_tensor("class_net/class-predict/bias"))


def test_coco_rows_of_the_released_d0_for_voc_names(reference_dir):
    """VOC's spelling of COCO classes takes the released D0's rows (its EMA values)."""
    folder = reference_dir("efficientdet-d0")
    reader = tf.train.load_checkpoint(folder)
    data = {1: "motorbike", 2: "widget", 3: "person"}
    model = EfficientDetNetTrain(tiny_config(num_classes=3, label_map=data))
    rows = ClassRows(match_class_names(data, COCO_LABEL_MAP), data, COCO_LABEL_MAP)
    assert rows.ids == {1: 4, 3: 1}
    initial_kernel = class_predict(model, "pointwise_kernel")
    report = restore_ckpt(model, folder, class_rows=rows)
    assert report.class_rows is rows and not report.skipped
    assert rows.describe("efficientdet-d0") == (
        "Class head: 2 of 3 classes start from efficientdet-d0's rows by name: motorbike (its "
        "motorcycle), person; new: widget")
    kernel = reader.get_tensor("class_net/class-predict/pointwise_kernel" + EMA_SUFFIX)
    np.testing.assert_array_equal(channels(class_predict(model, "pointwise_kernel"), 1, 3),
                                  channels(kernel, 4, 90))
    np.testing.assert_array_equal(channels(class_predict(model, "pointwise_kernel"), 3, 3),
                                  channels(kernel, 1, 90))
    np.testing.assert_allclose(channels(class_predict(model, "bias"), 2, 3), PRIOR_BIAS,
                               rtol=1e-6)
    # On images, in inference mode: the new class's logit starts near the prior at every
    # anchor of every level; the initializer's own kernel, on the released network's
    # features, puts it far off.
    images = tf.constant(np.stack(synthetic_images(2, 128, 128)), tf.float32) / 255.0

    def new_class_logits():
        class_outputs, _ = model(images, training=False)
        return np.concatenate([channels(level.numpy(), 2, 3).ravel() for level in class_outputs])

    near = np.abs(new_class_logits() - PRIOR_BIAS).max()
    class_outputs, _ = model(images, training=False)
    for level in class_outputs:
        assert np.ptp(channels(level.numpy(), 3, 3)) > 0.1  # A carried class sees the image.
    unscaled = class_predict(model, "pointwise_kernel")
    unscaled[..., np.arange(9) * 3 + 1] = channels(initial_kernel, 2, 3)
    model.class_net.predict.pointwise_kernel.assign(unscaled)
    far = np.abs(new_class_logits() - PRIOR_BIAS).max()
    assert near < 0.1 and far > 5 * near, (near, far)


def test_a_training_run_says_which_classes_it_carried(shapes_run, tmp_path, capsys):
    from efficientdet_keras.training.run import TrainingRun
    run, _ = shapes_run
    config = small_trainer({1: "cross", 2: "circle"}).config
    TrainingRun(config, str(tmp_path / "new"), None, steps_per_epoch=1,
                pretrained_ckpt=run).build_model()
    assert "Class head: 1 of 2 classes start from %s's rows by name: circle; new: cross" % run \
        in capsys.readouterr().out


def test_a_released_name_is_read_with_cocos_names(reference_dir, tmp_path, monkeypatch):
    """By name, the released D0 (here placed in the cache by hand) names COCO's classes."""
    from efficientdet_keras.checkpoint.class_rows import plan_class_rows
    from efficientdet_keras.checkpoint.download import HOME_ENV
    os.symlink(reference_dir("efficientdet-d0"), str(tmp_path / "efficientdet-d0"))
    monkeypatch.setenv(HOME_ENV, str(tmp_path))
    rows = plan_class_rows("efficientdet-d0", {1: "dog", 2: "aeroplane", 3: "thing"}, 3)
    assert rows.ids == {1: 18, 2: 5} and rows.checkpoint_names == COCO_LABEL_MAP
    assert plan_class_rows("efficientdet-d0", "coco", 90) is None  # COCO's own: all of it.
    assert plan_class_rows("efficientdet-d0", None, 3) is None  # Data without names.


def test_rows_are_carried_into_mirrored_variables(shapes_run, two_cpu_strategy):
    """Under MirroredStrategy (as a multi-GPU run builds its model) both replicas get the
    carried rows."""
    run, prefix = shapes_run
    reader = tf.train.load_checkpoint(prefix)
    with two_cpu_strategy.scope():
        model = small_trainer({1: "circle", 2: "widget"})
        report = model.load_pretrained(run)
    assert report.class_rows.ids == {1: 1}
    bias = next(v for v in model.variables
                if variable_name(v) == "class_net/class-predict/bias")
    for replica_value in two_cpu_strategy.experimental_local_results(bias):
        np.testing.assert_array_equal(
            channels(replica_value.numpy(), 1, 2),
            channels(reader.get_tensor("class_net/class-predict/bias"), 1, 3))
