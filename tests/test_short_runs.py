"""The short-run preset and benchmark: the preset is what the demo uses, the COCO recipe
keeps plain BatchNorm, and the benchmark trains, evaluates and reports what it prints."""

import math
import os

import pytest
import yaml

from efficientdet_keras import get_efficientdet_config
from benchmarks.short_runs import HEADER, format_epoch, run_short_run, short_run_config
from efficientdet_keras.config import PACKAGED_HPARAMS_DIR


def read_hparams(name):
    with open(os.path.join(PACKAGED_HPARAMS_DIR, name)) as f:
        return yaml.safe_load(f)


@pytest.mark.quick
def test_the_demo_settings_are_the_short_run_preset_plus_its_dataset_without_renorm():
    preset, demo = read_hparams("short_run.yaml"), read_hparams("demo.yaml")
    assert preset.pop("batch_norm_renorm") is True and "batch_norm_renorm" not in demo
    assert {key: demo.get(key) for key in preset} == preset
    assert set(demo) - set(preset) == {"image_size", "num_classes", "label_map", "batch_size",
                                       "num_epochs", "steps_per_epoch"}


@pytest.mark.quick
def test_renorm_layers_only_where_the_config_asks_for_them():
    from efficientdet_keras.model.layers import batch_norm
    config, style = short_run_config("glyphs")
    assert list(config.image_size) == [128, 128] and config.label_map == style.label_map
    layer = batch_norm(config, "bn")
    assert layer.renorm and layer.renorm_momentum == config.batch_norm_momentum
    assert not batch_norm(get_efficientdet_config("efficientdet-d0"), "bn").renorm
    with pytest.raises(ValueError, match="batch_norm_renorm"):
        get_efficientdet_config("efficientdet-d0").override({"batch_norm_renorm": "yes"})


@pytest.mark.slow  # The benchmark's own command; the preset it runs is checked above.
def test_a_tiny_short_run_reports_ap_and_both_loss_ratios(tmp_path):
    lines = []
    # Every augmentation on (mosaic closing for the last epoch), so model.fit trains through
    # them as the augmentation AP table of the benchmarks page does.
    augmentation = {"autoaugment_policy": "v0", "grid_mask": True, "mosaic": 1.0,
                    "mosaic_close_epochs": 1, "mixup": 0.5}
    results = run_short_run("glyphs", str(tmp_path), log=lines.append,
                            overrides=dict(augmentation, image_size=64, batch_size=2,
                                           num_epochs=2, steps_per_epoch=2,
                                           # A small BiFPN and heads (keys the preset does
                                           # not set): the train step's trace is most of
                                           # this test's time.
                                           fpn_num_filters=16, fpn_cell_repeats=1,
                                           box_class_repeats=1))
    assert [r.epoch for r in results] == [1, 2] and [r.steps for r in results] == [2, 4]
    for result in results:
        assert 0.0 <= result.ap <= 1.0 and 0.0 <= result.ap50 <= 1.0
        assert math.isfinite(result.loss_ratio) and math.isfinite(result.ema_loss_ratio)
        assert result.val_ema_loss > 0 and result.seconds > 0
    # At 64 px the glyphs are 7-29 px: the recommended anchors come first.
    assert lines[0].startswith("glyphs: anchors as efficientdet-check-data recommends: "
                               "anchor_scale=")
    assert len(lines) == 3 and len(lines[1].split()) == len(HEADER.split())
    assert lines[2] == format_epoch("glyphs", results[1])
