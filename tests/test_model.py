import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from helpers import tiny_config
from efficientdet_keras import EfficientDetNet, get_efficientdet_config
from efficientdet_keras.model.efficientnet import EfficientNetBackbone, block_specs
from efficientdet_keras.checkpoint import variable_name
from efficientdet_keras.model.bifpn import bifpn_nodes, fpn_nodes


def read_vars_tsv(path):
    rows = {}
    with open(path) as f:
        next(f)
        for line in f:
            name, shape, trainable = line.rstrip("\n").split("\t")
            dims = () if shape == "scalar" else tuple(int(d) for d in shape.split("x"))
            rows[name] = (dims, trainable == "True")
    return rows


def model_vars(model):
    return {variable_name(v): (tuple(v.shape.as_list()), v.trainable) for v in model.variables}


@pytest.mark.parametrize("name", ["efficientdet-d0", "efficientdet-lite0"])
def test_variable_names_match_released_checkpoints(name, reference_dir):
    expected = read_vars_tsv(reference_dir(name) + "/vars.tsv")
    first = EfficientDetNet(name)
    first.build_variables()
    assert model_vars(first) == expected
    # A second model in the same process, first called inside a tf.function,
    # must not get suffixes such as "efficientnet-b0_1".
    second = EfficientDetNet(name)
    tf.function(lambda x: second(x, training=True))(tf.zeros([1, 128, 128, 3]))
    assert model_vars(second) == expected


def test_output_shapes_non_square():
    config = tiny_config(num_classes=5)
    model = EfficientDetNet(config=config)
    class_outputs, box_outputs = model(tf.zeros([2, 96, 160, 3]), training=False)
    expected_sizes = [(12, 20), (6, 10), (3, 5), (2, 3), (1, 2)]  # ceil(size / 2^level)
    assert [tuple(c.shape) for c in class_outputs] == [(2, h, w, 9 * 5) for h, w in expected_sizes]
    assert [tuple(b.shape) for b in box_outputs] == [(2, h, w, 9 * 4) for h, w in expected_sizes]
    assert all(c.dtype == tf.float32 for c in class_outputs + box_outputs)


def test_class_bias_gives_prior_probability():
    model = EfficientDetNet(config=tiny_config())
    class_outputs, _ = model(tf.zeros([1, 128, 128, 3]))
    bias = model.class_net.predict.bias.numpy()
    np.testing.assert_allclose(1 / (1 + np.exp(-bias)), 0.01, rtol=1e-5)
    assert class_outputs[0].shape[-1] == 9 * 4


def test_d7x_has_level_8():
    config = get_efficientdet_config("efficientdet-d7x")
    config.override("fpn_num_filters=16,fpn_cell_repeats=1,box_class_repeats=1,backbone_name=efficientnet-b0")
    model = EfficientDetNet(config=config)
    class_outputs, _ = model(tf.zeros([1, 256, 256, 3]))
    assert [c.shape[1] for c in class_outputs] == [32, 16, 8, 4, 2, 1]
    assert any(variable_name(v).startswith("resample_p6/") for v in model.variables)
    assert not any(variable_name(v).startswith(("resample_p7/", "resample_p8/"))
                   for v in model.variables)  # Already 16 channels: pooling only.


def test_bifpn_graph_of_released_models():
    # The P3-P7 graph of the paper: a top-down pass, then bottom-up with skip edges.
    nodes = [(n.level, tuple(n.input_ids)) for n in bifpn_nodes(3, 7)]
    assert nodes == [(6, (3, 4)), (5, (2, 5)), (4, (1, 6)), (3, (0, 7)),
                     (4, (1, 7, 8)), (5, (2, 6, 9)), (6, (3, 5, 10)), (7, (4, 11))]


# The reference implementation's QuFPN graph for P3-P7 (google/automl,
# efficientdet/tf2/fpn_configs_test.py): (level, input ids); every node weighs its inputs by
# fastattn.
REFERENCE_QUFPN_L3L7 = [
    (6, (3, 4)), (5, (2, 5)), (4, (1, 6)), (3, (0, 7)), (4, (1, 7, 8)), (5, (2, 6, 9)),
    (6, (3, 5, 10)), (7, (4, 11)), (4, (1, 0)), (5, (2, 13)), (6, (3, 14)), (7, (4, 15)),
    (6, (3, 15, 16)), (5, (2, 14, 17)), (4, (1, 13, 18)), (3, (0, 19)), (7, (12, 16)),
    (6, (11, 17)), (5, (10, 18)), (4, (9, 19)), (3, (8, 20))]


def test_fpn_name_selects_the_reference_graphs():
    assert [(n.level, tuple(n.input_ids)) for n in fpn_nodes("qufpn", 3, 7)] == \
        REFERENCE_QUFPN_L3L7
    assert [n.weight_method for n in fpn_nodes("qufpn", 3, 7)][-5:] == ["fastattn"] * 5
    assert fpn_nodes("bifpn_dyn", 2, 7) == fpn_nodes(None, 2, 7) == bifpn_nodes(2, 7)
    assert [(n.level, tuple(n.input_ids)) for n in bifpn_nodes(2, 7)][-5:] == [
        (3, (1, 9, 10)), (4, (2, 8, 11)), (5, (3, 7, 12)), (6, (4, 6, 13)), (7, (5, 14))]
    with pytest.raises(ValueError, match="fpn_name must be one of"):
        tiny_config(fpn_name="panet")


def test_a_qufpn_model_builds_runs_and_names_its_nodes():
    config = tiny_config(fpn_name="qufpn", fpn_weight_method="sum", image_size=64,
                         num_classes=3, fpn_num_filters=16, fpn_cell_repeats=1,
                         box_class_repeats=1)
    model = EfficientDetNet(config=config)
    model.build_variables()
    names = {v.name for v in model.variables}
    # 21 nodes; the quad nodes weigh by fastattn whatever fpn_weight_method says.
    assert "fpn_cells/cell_0/fnode20/op_after_combine25/conv/depthwise_kernel:0" in names
    assert "fpn_cells/cell_0/fnode20/WSM_1:0" in names and \
        "fpn_cells/cell_0/fnode15/WSM:0" not in names
    class_outputs, _ = model(tf.zeros([1, 64, 64, 3]), training=False)
    assert [c.shape[1] for c in class_outputs] == [8, 4, 2, 1, 1]


def test_backbone_block_counts():
    assert len(block_specs("efficientnet-b0")) == 16
    assert len(block_specs("efficientnet-b7")) == 55
    # Lite keeps the first and last stage unscaled and has no squeeze-excite.
    lite4 = block_specs("efficientnet-lite4")
    assert lite4[0].input_filters == 32 and lite4[0].se_ratio is None
    assert len(lite4) == 1 + 4 + 4 + 6 + 6 + 8 + 1


def test_a_block_per_stage_keeps_each_stages_first_block_and_the_feature_levels():
    full, shallow = block_specs("efficientnet-b3"), block_specs("efficientnet-b3", 1)
    firsts = [spec for i, spec in enumerate(full)
              if i == 0 or spec.output_filters != full[i - 1].output_filters]
    assert shallow == firsts and len(shallow) == 7
    assert len(block_specs("efficientnet-b3", 2)) == 2 * 7  # Every b3 stage has 2 or more.
    assert block_specs("efficientnet-b0", 99) == block_specs("efficientnet-b0")

    config = tiny_config(image_size=64, backbone_blocks_per_stage=1)
    backbone = EfficientNetBackbone(config)
    features = backbone(tf.zeros([1, 64, 64, 3]))
    assert [f.shape[1] for f in features] == [32, 16, 8, 4, 2]
    assert [f.shape[-1] for f in features] == [16, 24, 40, 112, 320]
    names = {v.name for v in backbone.variables}
    assert "efficientnet-b0/blocks_6/conv2d/kernel:0" in names  # Named as a released b0.
    assert not any("blocks_7/" in name for name in names)


@pytest.mark.parametrize("method,wsm_shape", [("fastattn", ()), ("attn", ()), ("sum", None),
                                              ("channel_attn", (16,)), ("channel_fastattn", (16,))])
def test_fusion_methods(method, wsm_shape):
    config = tiny_config(fpn_weight_method=method, fpn_num_filters=16, fpn_cell_repeats=1,
                         box_class_repeats=1)
    model = EfficientDetNet(config=config)
    model(tf.zeros([1, 128, 128, 3]))
    weights = [v for v in model.variables if "/WSM" in v.name]
    if wsm_shape is None:
        assert not weights
    else:
        assert len(weights) == 2 * 5 + 3 * 3  # Two inputs on 5 nodes, three on 3.
        assert all(tuple(w.shape) == wsm_shape for w in weights)


def test_fast_normalised_fusion_values():
    config = tiny_config(fpn_num_filters=16, fpn_cell_repeats=1, box_class_repeats=1)
    model = EfficientDetNet(config=config)
    model(tf.zeros([1, 128, 128, 3]))
    fnode = model.fpn_cells.cells[0].fnodes[4]  # Three inputs.
    for w, value in zip(fnode.edge_weights, [2.0, -1.0, 0.5]):
        w.assign(value)
    nodes = [tf.fill([1, 2, 2, 16], v) for v in (1.0, 10.0, 4.0)]
    expected = (1.0 * 2.0 + 10.0 * 0.0 + 4.0 * 0.5) / (2.0 + 0.0 + 0.5 + 1e-4)  # relu(w)
    np.testing.assert_allclose(fnode.fuse(nodes).numpy(), expected, rtol=1e-6)


def test_is_training_bn_false_freezes_batchnorm_statistics():
    config = tiny_config(is_training_bn=False, fpn_num_filters=16, fpn_cell_repeats=1)
    model = EfficientDetNet(config=config)
    model.build_variables()
    before = [v.numpy().copy() for v in model.variables if "moving_mean" in v.name]
    model(tf.random.uniform([2, 128, 128, 3]), training=True)
    after = [v.numpy() for v in model.variables if "moving_mean" in v.name]
    assert all(np.array_equal(a, b) for a, b in zip(before, after))
    # With the default (True), the same call updates them.
    trained = EfficientDetNet(config=tiny_config(fpn_num_filters=16, fpn_cell_repeats=1))
    trained.build_variables()
    mean = trained.backbone.stem.bn.moving_mean
    start = mean.numpy().copy()
    trained(tf.random.uniform([2, 128, 128, 3]), training=True)
    assert not np.array_equal(start, mean.numpy())


def test_survival_prob_adds_head_residuals():
    x = tf.random.uniform([1, 128, 128, 3])
    plain = EfficientDetNet(config=tiny_config(box_class_repeats=2))
    residual = EfficientDetNet(config=tiny_config(box_class_repeats=2, survival_prob=0.8))
    plain.build_variables()
    residual.build_variables()
    for a, b in zip(plain.variables, residual.variables):
        b.assign(a)
    out_plain = plain(x)[1][0].numpy()
    out_residual = residual(x)[1][0].numpy()
    # Untrained outputs can be tiny, so compare relative to their size.
    assert np.abs(out_plain - out_residual).max() > 1e-2 * np.abs(out_plain).max()
    # In inference mode drop-connect is off, so the output is deterministic.
    np.testing.assert_array_equal(out_residual, residual(x)[1][0].numpy())


@pytest.mark.quick
@pytest.mark.parametrize("name, last", [("efficientdet-d0", 1.0), ("efficientdet-d1", 0.8),
                                        ("efficientdet-lite0", 0.8)])
def test_backbone_survival_probs_follow_the_released_choice(name, last):
    # The released EfficientDet turns drop-connect off for efficientnet-b0 only.
    backbone = EfficientNetBackbone(tiny_config(name))
    count = len(backbone.blocks)
    expected = [1.0 - (1.0 - last) * i / count for i in range(count)]
    assert backbone.survival_probs == pytest.approx(expected)
    # An explicit value wins, b0 included.
    explicit = EfficientNetBackbone(tiny_config(name, backbone_survival_prob=0.5))
    assert explicit.survival_probs[-1] == pytest.approx(1.0 - 0.5 * (count - 1) / count)


def test_d0_backbone_is_deterministic_in_training_and_d1_is_not():
    images = tf.random.uniform([4, 64, 64, 3], seed=1)

    def features_twice(name):
        backbone = EfficientNetBackbone(tiny_config(name))
        return [[f.numpy() for f in backbone(images, training=True)] for _ in range(2)]

    first, second = features_twice("efficientdet-d0")
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
    first, second = features_twice("efficientdet-d1")
    assert not all(np.array_equal(a, b) for a, b in zip(first, second))


@pytest.mark.parametrize("value", [0.0, 1.5, "high"])
def test_backbone_survival_prob_is_validated(value):
    with pytest.raises(ValueError, match="backbone_survival_prob"):
        EfficientDetNet(config=tiny_config(backbone_survival_prob=value))


@pytest.mark.parametrize("precision,compute", [("bfloat16", "bfloat16"), ("float16", "float16")])
def test_mixed_precision_from_config_without_global_state(precision, compute):
    global_before = keras.mixed_precision.global_policy().name
    model = EfficientDetNet(config=tiny_config(mixed_precision=precision, fpn_num_filters=16,
                                               fpn_cell_repeats=1))
    class_outputs, box_outputs = model(tf.random.uniform([1, 128, 128, 3]))
    assert model.backbone.stem.conv.compute_dtype == compute
    assert model.backbone.stem.conv.kernel.dtype == tf.float32  # Variables stay float32.
    assert all(o.dtype == tf.float32 for o in class_outputs + box_outputs)
    assert all(np.isfinite(o.numpy()).all() for o in class_outputs + box_outputs)
    assert keras.mixed_precision.global_policy().name == global_before


def test_model_name_and_config_must_agree():
    with pytest.raises(ValueError, match="disagrees"):
        EfficientDetNet("efficientdet-d1", config=get_efficientdet_config("efficientdet-d0"))
    with pytest.raises(ValueError, match="fpn_weight_method"):
        EfficientDetNet(config=tiny_config(fpn_weight_method="average"))


# Published parameter counts (trainable, 90 classes), in millions.
PUBLISHED_PARAMS = {"efficientdet-d0": 3.9, "efficientdet-d1": 6.6, "efficientdet-d2": 8.1,
                    "efficientdet-d3": 12.0, "efficientdet-d4": 20.7, "efficientdet-d5": 33.7,
                    "efficientdet-d6": 51.9, "efficientdet-d7": 51.9, "efficientdet-d7x": 77.0}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMS))
def test_parameter_counts_match_the_paper(name):
    model = EfficientDetNet(name)  # build_variables uses a small input; counts do not depend on it.
    model.build_variables()
    trainable = sum(v.shape.num_elements() for v in model.trainable_variables)
    assert trainable / 1e6 == pytest.approx(PUBLISHED_PARAMS[name], rel=0.01)


@pytest.mark.quick
@pytest.mark.parametrize("source,target", [((2, 3), (3, 5)), ((4, 4), (8, 7)), ((1, 1), (2, 1))])
def test_upsampling_equals_the_released_resize(source, target):
    from efficientdet_keras.model.bifpn import upsample_nearest
    x = tf.random.uniform([2, *source, 3])
    reference = tf.raw_ops.ResizeNearestNeighbor(images=x, size=target, align_corners=False,
                                                 half_pixel_centers=False)
    np.testing.assert_array_equal(upsample_nearest(x, 2, *target), reference)
    # Unknown sizes (a SavedModel's serving signature) take the dynamic shapes instead.
    unknown = tf.function(lambda x, height, width: upsample_nearest(x, 2, height, width),
                          input_signature=[tf.TensorSpec([None, None, None, 3]),
                                           tf.TensorSpec([], tf.int32),
                                           tf.TensorSpec([], tf.int32)])
    np.testing.assert_array_equal(unknown(x, *target), reference)


@pytest.mark.parametrize("act_type", ["swish_native", "mish"])
def test_more_activations_with_the_same_variables(act_type):
    from efficientdet_keras.model.layers import activation_fn
    x = tf.constant([-2.0, 0.0, 1.5])
    expected = {"swish_native": [-2 / (1 + np.exp(2)), 0.0, 1.5 / (1 + np.exp(-1.5))],
                "mish": [-2 * np.tanh(np.log1p(np.exp(-2))), 0.0,
                         1.5 * np.tanh(np.log1p(np.exp(1.5)))]}[act_type]
    np.testing.assert_allclose(activation_fn(x, act_type), expected, rtol=1e-6)
    small = dict(image_size=64, num_classes=3, fpn_num_filters=16, fpn_cell_repeats=1,
                 box_class_repeats=1)
    models = [EfficientDetNet(config=tiny_config(act_type=name, **small))
              for name in ("swish", act_type)]
    for model in models:
        model.build_variables()
    assert [v.name for v in models[0].variables] == [v.name for v in models[1].variables]
    models[1].set_weights(models[0].get_weights())
    image = tf.random.stateless_uniform([1, 64, 64, 3], [0, 1])
    swish, other = (model(image, training=False)[1][0] for model in models)  # Box level 3.
    difference = np.abs(other - swish).max() / np.abs(swish).max()
    if act_type == "swish_native":  # The same function: the same outputs.
        assert difference < 1e-4
    else:
        assert difference > 1e-2
