import json
import os

import numpy as np
import pytest
import tensorflow as tf

from helpers import bright_box_image, make_records, tiny_config, write_image, write_tfrecord
from efficientdet_keras.data.augmentation import autoaugment
from efficientdet_keras.data.pipeline import InputPipeline
from efficientdet_keras.data.sources import (CocoSource, RecordsSource, TFRecordSource,
                                             make_source)
from efficientdet_keras.data.formats.coco_json import records_to_coco
from efficientdet_keras.data.formats.records import ImageRecord


def config(**overrides):
    return tiny_config(**dict(dict(num_classes=3, batch_size=2), **overrides))


def first_batches(dataset, n):
    return [tf.nest.map_structure(lambda t: t.numpy(), b) for b in dataset.take(n)]


def test_tfrecord_coco_and_records_sources_agree(tmp_path):
    records = make_records(str(tmp_path))
    tfrecord = write_tfrecord(str(tmp_path / "data.tfrecord"), records)
    coco_json = tmp_path / "gt.json"
    coco = records_to_coco(records, {1: "a", 2: "b", 3: "c"})
    for image in coco["images"]:
        image["file_name"] = os.path.basename(image["file_name"])
    coco_json.write_text(json.dumps(coco))
    sources = [TFRecordSource(tfrecord), CocoSource(str(coco_json), str(tmp_path)),
               RecordsSource(records)]
    results = [first_batches(InputPipeline(config(), s, is_training=False)(), 3) for s in sources]
    for other in results[1:]:
        for a, b in zip(results[0], other):
            np.testing.assert_allclose(a[0], b[0], atol=1e-5)
            for key in a[1]:
                np.testing.assert_allclose(a[1][key], b[1][key], atol=1e-4, err_msg=key)
    assert make_source(coco_json=str(coco_json), image_dir=str(tmp_path)).records[0].image_id == 100


@pytest.mark.quick
def test_eval_resize_pad_and_normalise(tmp_path):
    box = [30, 40, 90, 120]
    path = write_image(str(tmp_path / "a.png"), bright_box_image(120, 160, box), "png")
    record = ImageRecord(7, path, 120, 160, np.array([box], np.float32), np.array([2]),
                         np.zeros(1, bool), np.zeros(1, np.float32))
    cfg = config()
    images, labels = next(iter(InputPipeline(cfg, RecordsSource([record]), is_training=False)()))
    # 160x120 fits 128x128 at scale 0.8: content 96x128, then 32 rows of padding.
    np.testing.assert_allclose(labels["image_scales"], [1.25])
    np.testing.assert_allclose(labels["groundtruth_boxes"][0, 0], np.array(box) * 0.8)
    assert labels["groundtruth_classes"][0, 0] == 2 and labels["groundtruth_classes"][0, 1] == -1
    mean, std = np.array(cfg.mean_rgb), np.array(cfg.stddev_rgb)
    np.testing.assert_allclose(images[0, 50, 60], (255 - mean) / std, rtol=1e-4)  # Inside the box.
    np.testing.assert_allclose(images[0, 5, 5], (0 - mean) / std, rtol=1e-4)
    assert not images[0, 100:].numpy().any()  # Padding is exactly zero after normalisation.
    assert labels["source_ids"][0] == 7 and labels["source_ids"].dtype == tf.int64
    assert labels["num_positives"][0] >= 1
    assert labels["class_targets_3"].shape == (1, 16, 16, 9)


def test_eval_stretch_resizes_each_axis_alone(tmp_path):
    box = [30, 40, 90, 120]
    path = write_image(str(tmp_path / "a.png"), bright_box_image(120, 160, box), "png")
    record = ImageRecord(7, path, 120, 160, np.array([box], np.float32), np.array([2]),
                         np.zeros(1, bool), np.zeros(1, np.float32))
    cfg = config(resize_mode="stretch")
    images, labels = next(iter(InputPipeline(cfg, RecordsSource([record]), is_training=False)()))
    # 120x160 to 128x128: rows x 128/120, columns x 0.8, nothing padded.
    np.testing.assert_allclose(labels["image_scales"], [[120 / 128, 160 / 128]], rtol=1e-6)
    np.testing.assert_allclose(labels["groundtruth_boxes"][0, 0],
                               [30 * 128 / 120, 40 * 0.8, 90 * 128 / 120, 120 * 0.8], rtol=1e-5)
    mean, std = np.array(cfg.mean_rgb), np.array(cfg.stddev_rgb)
    np.testing.assert_allclose(images[0, 120, 5], (0 - mean) / std, rtol=1e-4)  # No padding.
    np.testing.assert_allclose(images[0, 64, 64], (255 - mean) / std, rtol=1e-4)  # The box.
    training = InputPipeline(cfg, RecordsSource([record] * 2), is_training=True)
    _, train_labels = next(iter(training()))
    assert train_labels["image_scales"].shape == (2, 2)


@pytest.mark.quick
def test_training_augmentation_keeps_boxes_on_their_objects(tmp_path):
    records = make_records(str(tmp_path), count=4)
    cfg = config(jitter_min=0.5, jitter_max=1.5, mean_rgb=[0.0], stddev_rgb=[255.0])
    pipeline = InputPipeline(cfg, RecordsSource(records), is_training=True, batch_size=4, seed=5)
    checked = 0
    for images, labels in first_batches(pipeline(), 3):
        for image, boxes, classes in zip(images, labels["groundtruth_boxes"],
                                         labels["groundtruth_classes"]):
            for box, cls in zip(boxes, classes):
                if cls != 1 or (box[2] - box[0]) < 4 or (box[3] - box[1]) < 4:
                    continue
                ymin, xmin, ymax, xmax = np.round(box).astype(int)
                inside = image[ymin + 1:ymax - 1, xmin + 1:xmax - 1]
                assert inside.mean() > 0.9  # The white object is where its box says.
                checked += 1
    assert checked >= 6


def test_training_is_repeatable_with_a_seed(tmp_path):
    records = make_records(str(tmp_path), count=5)
    cfg = config(jitter_min=0.5, jitter_max=1.5)
    run = lambda seed: first_batches(  # noqa: E731
        InputPipeline(cfg, RecordsSource(records), is_training=True, seed=seed)(), 4)
    a, b, c = run(1), run(1), run(2)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x[0], y[0])
        np.testing.assert_array_equal(x[1]["groundtruth_boxes"], y[1]["groundtruth_boxes"])
    assert any(not np.array_equal(x[0], z[0]) for x, z in zip(a, c))
    # Augmentation differs between epochs of the same run.
    assert not all(np.array_equal(a[0][0], a[i][0]) for i in range(1, 4))


def test_greyscale_and_rgba_images_become_rgb(tmp_path):
    grey = write_image(str(tmp_path / "g.png"), np.full([40, 40, 1], 200, np.uint8), "png")
    rgba = write_image(str(tmp_path / "r.png"), np.full([40, 40, 4], 100, np.uint8), "png")
    records = [ImageRecord(i + 1, p, 40, 40, np.array([[5, 5, 30, 30]], np.float32), np.array([1]),
                           np.zeros(1, bool), np.zeros(1, np.float32))
               for i, p in enumerate([grey, rgba])]
    cfg = config(mean_rgb=[0.0], stddev_rgb=[1.0])
    images, _ = next(iter(InputPipeline(cfg, RecordsSource(records), is_training=False)()))
    assert images.shape == (2, 128, 128, 3)
    np.testing.assert_allclose(images[0, 10, 10], [200, 200, 200], atol=0.5)
    np.testing.assert_allclose(images[1, 10, 10], [100, 100, 100], atol=0.5)


def one_image_records(tmp_path, boxes, classes, name="x.jpg", image_id=1):
    path = write_image(str(tmp_path / name), np.zeros([100, 100, 3], np.uint8))
    boxes = np.array(boxes, np.float32).reshape(-1, 4)
    return ImageRecord(image_id, path, 100, 100, boxes, np.array(classes, np.int64),
                       np.zeros(len(classes), bool), np.zeros(len(classes), np.float32))


def run_eval(records, **overrides):
    pipeline = InputPipeline(config(**overrides), RecordsSource(records), is_training=False)
    batches = first_batches(pipeline(), 10)
    return batches, pipeline.health.summary()


def test_undecodable_image_is_skipped_and_counted(tmp_path, capfd):
    good = one_image_records(tmp_path, [[10, 10, 50, 50]], [1], "good.jpg", 1)
    (tmp_path / "broken.jpg").write_bytes(b"\xff\xd8 not really a jpeg")
    broken = ImageRecord(2, str(tmp_path / "broken.jpg"), 100, 100, np.zeros([0, 4], np.float32),
                         np.zeros(0, np.int64), np.zeros(0, bool), np.zeros(0, np.float32))
    missing = ImageRecord(3, str(tmp_path / "missing.jpg"), 100, 100, np.zeros([0, 4], np.float32),
                          np.zeros(0, np.int64), np.zeros(0, bool), np.zeros(0, np.float32))
    batches, health = run_eval([good, broken, missing])
    assert sum(len(b[0]) for b in batches) == 1
    assert health["undecodable_images"] == 1 and health["unreadable_image_files"] == 1
    warnings = capfd.readouterr().err
    assert "undecodable images in record source_id 2 / broken.jpg" in warnings
    assert "unreadable image files in record source_id 3 / missing.jpg" in warnings
    assert "function_node" not in warnings


def test_bad_boxes_are_clipped_or_dropped_and_counted(tmp_path):
    record = one_image_records(
        tmp_path,
        [[10, 10, 50, 50],        # Fine.
         [-10, 80, 40, 130],      # Partly outside: clipped to [0, 80, 40, 100].
         [20, 20, 20, 60],        # No height: dropped.
         [np.nan, 0, 10, 10],     # NaN: dropped.
         [120, 120, 150, 150]],   # Entirely outside: empty after clipping, dropped.
        [1, 2, 3, 1, 2])
    batches, health = run_eval([record])
    labels = batches[0][1]
    classes = labels["groundtruth_classes"][0]
    assert list(classes[:3]) == [1, 2, -1]
    np.testing.assert_allclose(labels["groundtruth_boxes"][0, 1], np.array([0, 80, 40, 100]) * 1.28,
                               rtol=1e-5)
    assert health["boxes_clipped"] == 2 and health["empty_boxes_dropped"] == 2
    assert health["nan_boxes_dropped"] == 1


def test_class_id_out_of_range_stops_in_strict_mode(tmp_path):
    record = one_image_records(tmp_path, [[10, 10, 50, 50]], [4], "wrong_label.jpg", 42)
    with pytest.raises(tf.errors.InvalidArgumentError) as e:
        run_eval([record], strict_data=True)
    assert "record source_id 42 / wrong_label.jpg has class id 4 outside 1..3" in str(e.value)


def test_more_instances_than_the_maximum_keeps_the_first(tmp_path, capfd):
    boxes = [[i, i, i + 20, i + 20] for i in range(6)]
    exact = one_image_records(tmp_path, boxes[:5], [1] * 5, "five.jpg", 1)
    over = one_image_records(tmp_path, boxes, [1, 1, 1, 1, 1, 2], "six.jpg", 2)
    batches, health = run_eval([exact, over], max_instances_per_image=5)
    classes = batches[0][1]["groundtruth_classes"]
    assert classes.shape == (2, 5) and (classes == 1).all()
    warnings = capfd.readouterr().err
    assert health["instances_truncated"] == 1 and "six.jpg" in warnings
    assert "five.jpg" not in warnings


@pytest.mark.quick
def test_pattern_matching_nothing_names_the_pattern(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing-here"):
        TFRecordSource(str(tmp_path / "nothing-here-*.tfrecord"))
    with pytest.raises(FileNotFoundError, match="missing"):
        TFRecordSource([str(tmp_path / "missing-*"), str(tmp_path / "x")])


def test_list_of_patterns_and_sharding_by_input_context(tmp_path):
    records = make_records(str(tmp_path), count=8)
    write_tfrecord(str(tmp_path / "a.tfrecord"), records[:4])
    write_tfrecord(str(tmp_path / "b.tfrecord"), records[4:])
    source = TFRecordSource([str(tmp_path / "a.tfrecord"), str(tmp_path / "b*.tfrecord")])
    assert len(source.files) == 2
    seen = []
    for pipeline_id in range(2):
        context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=pipeline_id,
                                             num_replicas_in_sync=2)
        pipeline = InputPipeline(config(), source, is_training=False, batch_size=4)
        batches = first_batches(pipeline(context), 10)
        assert all(len(b[0]) <= 2 for b in batches)  # Per-replica share of the global batch.
        seen.append({int(i) for b in batches for i in b[1]["source_ids"]})
    assert not seen[0] & seen[1] and seen[0] | seen[1] == set(range(100, 108))


class _SameRecordsForEveryPipeline:
    """A source that ignores sharding: every pipeline reads the same records."""

    def __init__(self, records):
        self.inner = RecordsSource(records)

    def raw_dataset(self, input_context, shuffle, seed):
        return self.inner.raw_dataset(None, shuffle, seed)


def test_augmentation_draws_differ_across_input_pipelines(tmp_path):
    # One image only, so whatever differs between pipelines is the augmentation.
    source = _SameRecordsForEveryPipeline(make_records(str(tmp_path), count=1))

    def boxes_and_images(pipeline_id):
        context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=pipeline_id,
                                             num_replicas_in_sync=2)
        pipeline = InputPipeline(config(batch_size=8), source, is_training=True, seed=3)
        batches = first_batches(pipeline(context), 2)
        return (np.concatenate([b[1]["groundtruth_boxes"] for b in batches]),
                np.concatenate([b[0] for b in batches]))

    boxes_0, images_0 = boxes_and_images(0)
    boxes_1, images_1 = boxes_and_images(1)
    assert boxes_0.shape == (8, 100, 4)  # 2 batches of 4 (the per-replica share of 8).
    assert not np.array_equal(boxes_0, boxes_1)
    # Same element index, different pipeline: different flip, scale and crop.
    assert all(not np.array_equal(a, b) for a, b in zip(boxes_0, boxes_1))
    # The same pipeline id reproduces its draws exactly.
    again_boxes, again_images = boxes_and_images(1)
    np.testing.assert_array_equal(again_boxes, boxes_1)
    np.testing.assert_array_equal(again_images, images_1)


def test_images_follow_the_precision_policy(tmp_path):
    records = make_records(str(tmp_path), count=2)
    images, labels = next(iter(InputPipeline(config(mixed_precision="bfloat16"),
                                             RecordsSource(records), is_training=True, seed=0)()))
    assert images.dtype == tf.bfloat16
    assert labels["box_targets_3"].dtype == tf.float32


# Solid colours of the images the mosaic and mixup tests mix (class i + 1 has colour i).
SOLID_COLOURS = np.array([(255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 0)])


def solid_colour_records(tmp_path, sizes):
    """One image per size, filled with SOLID_COLOURS[i], its one box the whole image."""
    records = []
    for i, (h, w) in enumerate(sizes):
        image = np.broadcast_to(SOLID_COLOURS[i].astype(np.uint8), (h, w, 3))
        path = write_image(str(tmp_path / ("solid%d.png" % i)), image, "png")
        records.append(ImageRecord(i + 1, path, h, w, np.array([[0, 0, h, w]], np.float32),
                                   np.array([i + 1]), np.zeros(1, bool), np.zeros(1, np.float32)))
    return records


def mixing_config(**overrides):
    """No flip or jitter, pixels in 0..1: what the tests see is the mosaic or mixup itself."""
    return config(**dict(dict(num_classes=4, input_rand_hflip=False, jitter_min=1.0,
                              jitter_max=1.0, mean_rgb=[0.0], stddev_rgb=[255.0]), **overrides))


def colours_shown(image):
    """The SOLID_COLOURS indices that fill at least 2% of the image."""
    return {i for i, colour in enumerate(SOLID_COLOURS / 255.0)
            if np.all(np.abs(image - colour) < 0.02, -1).mean() >= 0.02}


def mosaic_pipeline(records, start_step=0, **overrides):
    """mosaic=1.0 for 3 epochs of 2 steps of 2 images, the last epoch without mosaic."""
    closing = dict(mosaic=1.0, num_epochs=3, steps_per_epoch=2, mosaic_close_epochs=1)
    return InputPipeline(mixing_config(**dict(closing, **overrides)), RecordsSource(records),
                         is_training=True, seed=4, start_step=start_step)


def test_mosaic_shows_four_images_with_their_boxes_until_it_closes(tmp_path):
    sizes = [(60, 80), (80, 60), (50, 50), (40, 90)]
    batches = first_batches(mosaic_pipeline(solid_colour_records(tmp_path, sizes))(), 6)
    images = np.concatenate([images for images, _ in batches])
    labels = {key: np.concatenate([b[1][key] for b in batches]) for key in batches[0][1]}
    # Images 0-7 (steps 0-3) are mosaics; from step 4, the last epoch, single images.
    assert [len(colours_shown(image)) for image in images] == [4] * 8 + [1] * 4
    kept = 0
    for image, boxes, classes in zip(images[:8], labels["groundtruth_boxes"],
                                     labels["groundtruth_classes"]):
        returned = {int(c) - 1: box for box, c in zip(boxes, classes) if c > 0}
        for i, (h, w) in enumerate(sizes):
            colour = np.all(np.abs(image - SOLID_COLOURS[i] / 255.0) < 0.02, -1)
            ys, xs = np.nonzero(colour)
            shown = np.array([ys.min(), xs.min(), ys.max() + 1, xs.max() + 1])
            # Each image fills its box (the whole image), resized to fit 128x128.
            share = colour.sum() / (h * w * min(128 / h, 128 / w) ** 2)
            if i in returned:  # The box is where its image shows: edges within 1 px.
                assert np.abs(returned[i] - shown).max() <= 1.0
                kept += 1
            # Remnants under 20% of their area are dropped.
            assert (i in returned) == (share >= 0.2) or abs(share - 0.2) < 0.02
    assert kept >= 16
    assert (labels["image_scales"][:8] == 1.0).all()  # The canvas is the input size.


def test_mosaic_closed_for_all_epochs_or_after_a_resume_makes_none(tmp_path):
    records = solid_colour_records(tmp_path, [(64, 64)] * 4)
    # A run resumed at step 4, past the close point: single images only (with GridMask,
    # whose holes are the only black: (0, 0, 0) after normalising with mean 0).
    resumed = first_batches(mosaic_pipeline(records, start_step=4, grid_mask=True)(), 3)
    for images, _ in resumed:
        for image in images:
            assert len(colours_shown(image)) == 1
            assert 0.1 < np.all(image == 0, -1).mean() < 0.4  # About a quarter in holes.
    # Closed for all epochs: exactly the pipeline without mosaic.
    closed = mosaic_pipeline(records, mosaic_close_epochs=3)
    plain = InputPipeline(mixing_config(), RecordsSource(records), is_training=True, seed=4)
    for a, b in zip(first_batches(closed(), 3), first_batches(plain(), 3)):
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1]["groundtruth_boxes"], b[1]["groundtruth_boxes"])


@pytest.mark.quick
def test_mosaic_close_epochs_needs_steps_per_epoch(tmp_path):
    records = solid_colour_records(tmp_path, [(64, 64)])
    with pytest.raises(ValueError, match="mosaic_close_epochs=2 needs steps_per_epoch"):
        InputPipeline(mixing_config(mosaic=0.5, mosaic_close_epochs=2), RecordsSource(records),
                      is_training=True)


@pytest.mark.quick
def test_mixup_blends_each_image_with_the_one_before(tmp_path):
    records = solid_colour_records(tmp_path, [(64, 64), (64, 64)])
    pipeline = InputPipeline(mixing_config(mixup=1.0), RecordsSource(records), is_training=True,
                             seed=2)
    batches = first_batches(pipeline(), 3)
    images = np.concatenate([images for images, _ in batches])
    classes = np.concatenate([labels["groundtruth_classes"] for _, labels in batches])
    assert (classes[0] > 0).sum() == 1  # The first image has none before it.
    for image, image_classes in zip(images[1:], classes[1:]):
        first, second = image_classes[:2] - 1
        assert (image_classes > 0).sum() == 2  # The boxes of both.
        # Red and green: the weight shows in the two channels; Beta(32, 32) is near 0.5.
        weight = image[64, 64, 0] if first == 0 else image[64, 64, 1]
        expected = weight * SOLID_COLOURS[first] / 255 + (1 - weight) * SOLID_COLOURS[second] / 255
        np.testing.assert_allclose(image[64, 64], expected, atol=1e-5)
        assert first == second or 0.3 < weight < 0.7


@pytest.mark.quick
def test_policy_keys_reach_autoaugment_and_randaugment(tmp_path):
    image = tf.constant(bright_box_image(48, 64, [8, 8, 40, 30]))
    boxes = tf.constant([[8 / 48, 8 / 64, 40 / 48, 30 / 64]])
    seed = tf.constant([5, 6], tf.int64)
    records = make_records(str(tmp_path), count=1)
    for policy, direct in [
            ("v1", lambda: autoaugment.distort_image_with_autoaugment(image, boxes, "v1", seed)),
            ("randaug", lambda: autoaugment.distort_image_with_randaugment(image, boxes, 3, 9.0,
                                                                          seed))]:
        pipeline = InputPipeline(config(autoaugment_policy=policy, randaugment_num_layers=3,
                                        randaugment_magnitude=9.0),
                                 RecordsSource(records), is_training=True)
        for ours, theirs in zip(pipeline.transforms.autoaugment(image, boxes, seed), direct()):
            np.testing.assert_array_equal(ours, theirs)


def test_every_option_on_is_repeatable_and_differs_between_pipelines(tmp_path, monkeypatch):
    source = _SameRecordsForEveryPipeline(make_records(str(tmp_path), count=4))
    policies = []  # The pipeline's graph calls AutoAugment with the config's policy.
    real_autoaugment = autoaugment.distort_image_with_autoaugment
    monkeypatch.setattr(autoaugment, "distort_image_with_autoaugment",
                        lambda image, boxes, policy, seed: policies.append(policy) or
                        real_autoaugment(image, boxes, policy, seed))
    every_option = config(autoaugment_policy="v0", grid_mask=True, mosaic=0.5, mixup=0.5,
                          mosaic_close_epochs=1, num_epochs=2, steps_per_epoch=10)

    def images_and_boxes(pipeline_id):
        context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=pipeline_id,
                                             num_replicas_in_sync=2)
        pipeline = InputPipeline(every_option, source, is_training=True, batch_size=4, seed=3)
        batches = first_batches(pipeline(context), 3)
        return (np.concatenate([images for images, _ in batches]),
                np.concatenate([labels["groundtruth_boxes"] for _, labels in batches]))

    images_0, boxes_0 = images_and_boxes(0)
    images_again, boxes_again = images_and_boxes(0)
    images_1, boxes_1 = images_and_boxes(1)
    np.testing.assert_array_equal(images_0, images_again)
    np.testing.assert_array_equal(boxes_0, boxes_again)
    assert all(not np.array_equal(a, b) for a, b in zip(images_0, images_1))
    assert not np.array_equal(boxes_0, boxes_1)
    assert set(policies) == {"v0"}


@pytest.mark.quick
@pytest.mark.parametrize("mean, stddev", [([123.7, 116.3, 103.5], [58.4, 57.1, 57.4]),
                                          ([0.0], [255.0]), (127.5, 128.0)])
def test_row_normaliser_gives_broadcasting_s_values_bit_for_bit(mean, stddev):
    from efficientdet_keras.data.example_transforms import RowNormalizer
    image = tf.constant(np.random.default_rng(0).uniform(0, 255, (37, 50, 3)), tf.float32)
    expected = (image - tf.constant(mean, tf.float32)) / tf.constant(stddev, tf.float32)
    normalised = RowNormalizer(mean, stddev, max_width=64)(image)
    np.testing.assert_array_equal(normalised.numpy(), expected.numpy())
