"""The training pipeline's cache of decoded images (config key `cache`)."""

import glob
import os

import numpy as np
import pytest

from helpers import make_records, tiny_config, write_tfrecord
from efficientdet_keras.data import decoded_cache
from efficientdet_keras.data.health import DataHealth
from efficientdet_keras.data.pipeline import InputPipeline
from efficientdet_keras.data.sources import RecordsSource, TFRecordSource

IMAGES = 6  # make_records' 120 x 160 images.


def config(**overrides):
    return tiny_config(**dict(dict(num_classes=3, batch_size=2, image_size=64), **overrides))


@pytest.fixture
def source(tmp_path):
    return TFRecordSource(write_tfrecord(str(tmp_path / "data.tfrecord"),
                                         make_records(str(tmp_path), count=IMAGES)))


def read_images(pipeline, batches):
    iterator = iter(pipeline())
    return [next(iterator)[0].numpy() for _ in range(batches)]


def test_size_comes_from_the_records_or_the_image_headers(tmp_path, source):
    assert decoded_cache.source_pixels(source) == (IMAGES, IMAGES * 120 * 160)
    (tmp_path / "records").mkdir()
    records = make_records(str(tmp_path / "records"), count=2)
    records[1].height = records[1].width = 0  # Unknown: the JPEG header tells.
    assert decoded_cache.source_pixels(RecordsSource(records)) == (2, 2 * 120 * 160)


@pytest.mark.parametrize("mode", ["ram", "disk"])
def test_each_record_is_decoded_once_over_several_epochs(tmp_path, source, mode):
    batches = 3 * IMAGES // 2  # Three epochs.
    counted = {}
    for cache in ("", mode):
        health = DataHealth()
        read_images(InputPipeline(config(cache=cache), source, is_training=True, seed=0,
                                  health=health, cache_dir=str(tmp_path / "cache")), batches)
        counted[cache] = int(health.good_records())
    assert counted[mode] == IMAGES
    assert counted[""] >= 2 * IMAGES


def test_a_disk_cache_is_reused_by_the_next_run_and_a_killed_writer_left_no_block(
        tmp_path, source):
    cache_dir = str(tmp_path / "cache")
    first = read_images(InputPipeline(config(cache="disk"), source, is_training=True, seed=0,
                                      cache_dir=cache_dir), IMAGES)
    assert glob.glob(os.path.join(cache_dir, "decoded-*-pipeline0.index"))
    # A run killed while writing another cache leaves a lock file tf.data would refuse.
    prefix = decoded_cache._file_prefix(cache_dir, source, config(num_classes=4), 0)
    open(prefix + "_0.lockfile", "w").close()
    health = DataHealth()
    again = read_images(InputPipeline(config(cache="disk"), source, is_training=True, seed=0,
                                      health=health, cache_dir=cache_dir), IMAGES)
    assert int(health.good_records()) == 0  # Nothing decoded: every image came from the files.
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    # Another class count is another cache, written beside the first, the lock file gone.
    health = DataHealth()
    read_images(InputPipeline(config(cache="disk", num_classes=4), source, is_training=True,
                              seed=0, health=health, cache_dir=cache_dir), IMAGES)
    assert int(health.good_records()) == IMAGES
    assert not glob.glob(os.path.join(cache_dir, "*.lockfile"))


def test_a_cache_that_does_not_fit_is_refused_in_one_line(tmp_path, source, monkeypatch):
    monkeypatch.setattr(decoded_cache, "available_memory_bytes", lambda: 100_000)
    with pytest.raises(ValueError, match=r"^cache=ram: the 6 decoded training images need "
                                         r"0\.00 GiB, more than 80% of the 0\.00 GiB of memory"):
        InputPipeline(config(cache="ram"), source, is_training=True)
    monkeypatch.setattr(decoded_cache.shutil, "disk_usage",
                        lambda path: type("Usage", (), {"free": 100_000})())
    with pytest.raises(ValueError, match="^cache=disk: .* free in %s" % (tmp_path / "c")):
        InputPipeline(config(cache="disk"), source, is_training=True, cache_dir=str(tmp_path / "c"))
    with pytest.raises(ValueError, match="^cache=disk needs a folder"):
        InputPipeline(config(cache="disk"), source, is_training=True)
    # Evaluation pipelines never cache.
    InputPipeline(config(cache="ram"), source, is_training=False)
