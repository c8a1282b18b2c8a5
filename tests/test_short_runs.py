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


@pytest.mark.quick
def test_the_box_target_offset_moves_box_targets_alone():
    import numpy as np
    import tensorflow as tf

    from benchmarks.short_runs import offset_box_targets
    labels = {"box_targets_3": tf.constant([[0.5, -1.0]]),
              "class_targets_3": tf.constant([[1, -1]]), "image_scales": tf.constant([2.0])}
    dataset = tf.data.Dataset.from_tensors((tf.zeros([1, 2, 2, 3]), labels))
    assert offset_box_targets(dataset, 0.0) is dataset
    _, shifted = next(iter(offset_box_targets(dataset, 1e-7)))
    # float32 steps near 0.5 and 1.0 are 6e-8 and 1.2e-7: one or two steps each.
    np.testing.assert_array_equal(shifted["box_targets_3"].numpy(),
                                  np.float32([[0.5, -1.0]]) + np.float32(1e-7))
    assert shifted["box_targets_3"].numpy()[0, 0] != 0.5
    np.testing.assert_array_equal(shifted["class_targets_3"].numpy(), [[1, -1]])
    np.testing.assert_array_equal(shifted["image_scales"].numpy(), [2.0])


@pytest.mark.quick
def test_the_spread_summary_counts_seeds_and_leaves_the_perturbed_run_out():
    from benchmarks.short_run_spread import (SUMMARY_COLUMNS, SpreadResult, SpreadRun,
                                             spread_runs, summarise, summary_cells)
    runs = spread_runs(["glyphs"], [0, 1, 2], perturbed_seed=0)
    assert [r.label for r in runs] == ["seed 0", "seed 1", "seed 2",
                                       "seed 0 + 1e-07 on box targets"]
    results = [SpreadResult(runs[0], 0.50, 0.80, [2.0, 1.0], [2.0, 1.25], 1.0),
               SpreadResult(runs[1], 0.56, 0.84, [1.5, 4.0], [2.0, 1.0], 1.0),
               SpreadResult(runs[2], 0.53, 0.86, [1.0, 0.5], [2.0, 1.0], 1.0),
               SpreadResult(runs[3], 0.10, 0.20, [9.0, 9.0], [1.0, 1.0], 1.0)]
    row = summarise(results)["glyphs"]
    assert row["runs"] == 3
    assert row["ap_mean"] == pytest.approx(0.53) and row["ap_span"] == pytest.approx(0.06)
    assert (row["ap50_min"], row["ap50_max"]) == (0.80, 0.86)
    assert row["worst_loss_ratio"] == pytest.approx(4.0)  # Seed 1's second epoch: 4.0 / 1.0.
    cells = summary_cells(summarise(results))
    assert cells == [["glyphs", "3", "0.530", "0.500-0.560 (0.060)", "0.833",
                      "0.800-0.860 (0.060)", "4.00"]]
    assert len(cells[0]) == len(SUMMARY_COLUMNS)


class TestLearningGuard:
    """Training still learns as much as it did: the guard's run (benchmarks/learning_guard.py)
    ends inside the band its seeds span.

    The band lies between the guard's seeds and the same run with half the steps or half the
    learning rate, as `python benchmarks/bench.py --what=learning_guard` measured them (the
    learning guard table of the benchmarks page), with room for another CPU's rounding: the
    losses tell the runs apart best; AP, on 20 images, has the widest band."""

    BAND = {"loss": (1.48, 1.70), "val_loss": (1.00, 1.35), "ap": (0.03, 0.20),
            "ap50": (0.10, 0.40)}

    def test_the_demo_recipe_learns_as_much_as_its_seeds_did(self, tmp_path):
        from benchmarks.learning_guard import guard_run
        result = guard_run(str(tmp_path / "guard"), seed=0)
        outside = {key: (round(getattr(result, key), 4), band) for key, band in self.BAND.items()
                   if not band[0] <= getattr(result, key) <= band[1]}
        assert not outside, "the learning guard's run left its band: %s" % outside


@pytest.mark.slow  # The demo's full 240 steps; the learning guard stands in for it in make test.
class TestRepeatableDemo:
    """The README's repeatable demo ends at the figure the README gives.

    To the bit on the README's kind of CPU, outside the suite's oneDNN cap (conftest.py). Here,
    or on another CPU, kernels add in another order: a run is then one more run of the recipe,
    which the spread benchmark (the benchmarks page) puts this close to any other."""

    TOLERANCE = 0.05

    def test_the_readme_figure_is_what_the_repeatable_demo_gives(self, tmp_path):
        import re

        from helpers import REPO_ROOT

        from efficientdet_keras import train
        with open(os.path.join(REPO_ROOT, "README.md"), encoding="utf-8") as f:
            readme = f.read()
        assert "efficientdet-train --demo --deterministic" in readme
        stated = re.search(r"repeats to the bit on one kind of CPU \(AP (0\.\d+) / AP50 (0\.\d+)",
                           readme)
        assert stated, "the README no longer states the repeatable demo's figure"
        # What `efficientdet-train --demo --deterministic` runs.
        result = train(str(tmp_path / "demo-repeatable"), demo=True,
                       config_overrides={"deterministic": True}, report=lambda _: None)
        got = (result.last_metrics["AP"], result.last_metrics["AP50"])
        for value, figure in zip(got, stated.groups()):
            assert abs(value - float(figure)) <= self.TOLERANCE, (
                "the repeatable demo ended at AP %.4f / AP50 %.4f; the README says %s / %s"
                % (got + stated.groups()))
