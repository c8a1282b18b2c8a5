"""BatchNorm folding (model/folding.py): the folded network computes what the model computes
in inference mode, without BatchNorm ops, and is what export and evaluation run."""

import numpy as np
import pytest
import tensorflow as tf

from helpers import tiny_config
from efficientdet_keras import EfficientDetNet, restore_ckpt
from efficientdet_keras.model.folding import fold_batch_norms, fold_into

BATCH_NORM_OPS = {"FusedBatchNormV3", "FusedBatchNorm", "FusedBatchNormV2"}


def randomise_batch_norm_statistics(model, seed: int) -> None:
    """Moving statistics and affine terms far from their initial values, so that a fold that
    dropped or misapplied any of them shows."""
    rng = np.random.default_rng(seed)
    for layer in model._flatten_layers():
        if not hasattr(layer, "moving_mean"):  # Not a BatchNorm, or one never called.
            continue
        layer.moving_mean.assign(rng.normal(0.0, 0.5, layer.moving_mean.shape))
        layer.moving_variance.assign(rng.uniform(0.3, 3.0, layer.moving_variance.shape))
        layer.gamma.assign(rng.uniform(0.5, 1.5, layer.gamma.shape))
        layer.beta.assign(rng.normal(0.0, 0.3, layer.beta.shape))


def relative_errors(model, folded, images):
    return relative_error(model(images, training=False), folded(images, training=False))


def op_types(fn, images) -> set:
    graph = tf.function(fn).get_concrete_function(images).graph
    return {op.type for op in graph.get_operations()}


def relative_error(expected, actual) -> float:
    expected, actual = tf.nest.flatten(expected), tf.nest.flatten(actual)
    return max(float(tf.reduce_max(tf.abs(a - e)) / tf.reduce_max(tf.abs(e)))
               for a, e in zip(actual, expected))


@pytest.mark.parametrize("name, ema", [("efficientdet-d0", True), ("efficientdet-lite0", False)])
def test_folded_reference_checkpoint_gives_the_same_outputs(reference_dir, name, ema):
    """Part by part on the same inputs: the reference weights are random, and their
    activations grow to 1e5 by the last block, so float rounding compounds through the
    whole network (a few % at level 7) while each part agrees to 1e-5."""
    model = EfficientDetNet(config=tiny_config(name, num_classes=90, image_size=128))
    restore_ckpt(model, reference_dir(name), use_ema=ema, skip_mismatch=False)
    folded = fold_batch_norms(model)
    images = tf.random.stateless_uniform([2, 128, 128, 3], [1, 2], -2.0, 2.0)
    x = model.backbone.stem(images)
    assert relative_error(x, folded.backbone.stem(images)) < 1e-5
    for block, folded_block in zip(model.backbone.blocks, folded.backbone.blocks):
        assert relative_error(block(x), folded_block(x)) < 1e-4, block.name
        x = block(x)
    features = model.pyramid_features(images)
    for cell, folded_cell in zip(model.fpn_cells.cells, folded.fpn_cells.cells):
        assert relative_error(cell(features), folded_cell(features)) < 1e-4, cell.name
    with tf.name_scope(""):
        for head, folded_head in [(model.class_net, folded.class_net),
                                  (model.box_net, folded.box_net)]:
            assert relative_error(head(features), folded_head(features)) < 1e-4, head.name
    assert "FusedBatchNormV3" in op_types(lambda x: model(x, training=False), images)
    assert not BATCH_NORM_OPS & op_types(lambda x: folded(x, training=False), images)


@pytest.mark.parametrize("overrides", [
    dict(separable_conv=False),  # Plain 3x3 convs in the BiFPN and heads.
    dict(conv_bn_act_pattern=True, survival_prob=0.8),  # BiFPN convs without bias; residuals.
    dict(batch_norm_renorm=True),  # Renorm's extra variables are not used in inference.
])
def test_folding_matches_the_model_for_other_layouts(overrides):
    config = tiny_config(image_size=64, fpn_num_filters=16, fpn_cell_repeats=1,
                         box_class_repeats=2, **overrides)
    model = EfficientDetNet(config=config)
    model.build_variables()
    randomise_batch_norm_statistics(model, seed=3)
    images = tf.random.stateless_uniform([2, 64, 64, 3], [3, 4], -2.0, 2.0)
    assert relative_errors(model, fold_batch_norms(model), images) < 2e-5


def test_fold_into_refolds_new_weights_and_bfloat16_stays_close():
    config = tiny_config(image_size=64, fpn_num_filters=16, fpn_cell_repeats=1,
                         box_class_repeats=2)
    model = EfficientDetNet(config=config)
    model.build_variables()
    randomise_batch_norm_statistics(model, seed=5)
    folded = fold_batch_norms(model)
    images = tf.random.stateless_uniform([2, 64, 64, 3], [5, 6], -2.0, 2.0)
    randomise_batch_norm_statistics(model, seed=6)  # As a new checkpoint would.
    for variable in model.trainable_variables[:10]:
        variable.assign(variable * 1.5)
    assert relative_errors(model, folded, images) > 1e-2  # Stale until re-folded.
    fold_into(model, folded)
    assert relative_errors(model, folded, images) < 2e-5
    in_bfloat16 = fold_batch_norms(model, mixed_precision="bfloat16")
    assert in_bfloat16.compute_dtype == "bfloat16"
    assert relative_errors(model, in_bfloat16, images) < 0.1


@pytest.mark.quick
def test_a_folded_model_cannot_be_trained_or_folded_again():
    from efficientdet_keras.training.trainer import EfficientDetNetTrain
    config = tiny_config(image_size=64, fold_batch_norm=True)
    with pytest.raises(ValueError, match="fold_batch_norm is for inference"):
        EfficientDetNetTrain(config)
    with pytest.raises(ValueError, match="not folded already"):
        fold_batch_norms(EfficientDetNet(config=config))


def test_the_exported_detector_runs_folded_and_detects_as_the_model(tmp_path):
    from efficientdet_keras.exporters.saved_model import export_detector
    from efficientdet_keras.inference.serving_graph import DetectionModule, inference_network
    config = tiny_config(image_size=64, fpn_num_filters=16, fpn_cell_repeats=1,
                         box_class_repeats=2)
    model = EfficientDetNet(config=config)
    model.build_variables()
    randomise_batch_norm_statistics(model, seed=7)
    images = tf.cast(tf.random.stateless_uniform([1, 48, 80, 3], [7, 8], 0, 255), tf.uint8)
    module = DetectionModule(model, config)  # Its tf.functions hold it only weakly.
    expected = module.detect_images(images)
    loaded = tf.saved_model.load(export_detector(model, str(tmp_path / "folded")))
    serving = loaded.signatures["serving_default"]
    assert not BATCH_NORM_OPS & {node.op for function in
                                 serving.graph.as_graph_def().library.function
                                 for node in function.node_def}
    actual = serving(images=images)
    np.testing.assert_allclose(actual["detection_scores"], expected["detection_scores"],
                               atol=1e-5)
    np.testing.assert_allclose(actual["detection_boxes"], expected["detection_boxes"],
                               atol=1e-4)
    assert inference_network(model, fold_batch_norm=False) is model
    with pytest.raises(ValueError, match="needs fold_batch_norm"):
        inference_network(model, fold_batch_norm=False, mixed_precision="bfloat16")
