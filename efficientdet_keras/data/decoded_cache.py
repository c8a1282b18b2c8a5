"""The training pipeline's cache of decoded images (config key `cache`): each record is read,
decoded and checked once, in the first epoch, and later epochs take its pixels from memory
(`ram`) or from files (`disk`) before augmentation, which still draws anew every epoch.

Before the pipeline starts, `plan_cache` measures what the decoded images will take (the
pixels the records' sizes or image headers give, without decoding) and refuses a cache that
does not fit the memory or the disk free now, in one line.
"""

import dataclasses
import glob
import hashlib
import os
import shutil
from typing import Optional, Tuple

import tensorflow as tf
from absl import logging

from efficientdet_keras.data.image_decoding import header_pixels, image_format_graph
from efficientdet_keras.data.sources import describe_source
from efficientdet_keras.utils.memory import available_memory_bytes

CACHE_MODES = ("", "ram", "disk")
# What a cached element holds besides its pixels (boxes, ids, strings, tensor headers): a
# generous allowance per image.
_BYTES_PER_ELEMENT = 4096
# The share of the memory or disk free now that a cache may take: the rest stays for the
# model, the augmentation and everything else on the machine.
_USABLE_SHARE = 0.8
_GIB = 1024 ** 3


@dataclasses.dataclass
class CachePlan:
    """A cache the pipeline will fill: mode ('ram' or 'disk'), the bytes it will take, the
    images counted, and for disk the file prefix tf.data writes under."""
    mode: str
    bytes_needed: int
    images: int
    file_prefix: str = ""

    def describe(self) -> str:
        where = "memory" if self.mode == "ram" else "disk in %s" % os.path.dirname(
            self.file_prefix)
        return ("cache=%s: the %d decoded training images take %.2f GiB of %s"
                % (self.mode, self.images, self.bytes_needed / _GIB, where))


def source_pixels(source) -> Tuple[int, int]:
    """(images, pixels) of a source: the sizes its records state, else what each image's
    header claims (read without decoding). Eager: one pass over the records' bytes."""
    records = getattr(source, "records", None)
    if records is not None and all(r.height > 0 and r.width > 0 for r in records):
        return len(records), sum(int(r.height) * int(r.width) for r in records)

    def pixels(raw):
        stated = raw["height"] * raw["width"]
        data = raw["encoded"]
        if "path" in raw:
            data = tf.cond(tf.equal(data, ""), lambda: _read_or_empty(raw["path"]),
                           lambda: data)
        return tf.cond(stated > 0, lambda: stated,
                       lambda: header_pixels(data, image_format_graph(data)))

    sizes = source.raw_dataset(None, False, None).map(
        pixels, num_parallel_calls=tf.data.AUTOTUNE)
    images, total = sizes.reduce((tf.constant(0, tf.int64), tf.constant(0, tf.int64)),
                                 lambda state, n: (state[0] + 1, state[1] + n))
    return int(images), int(total)


def _read_or_empty(path: tf.Tensor) -> tf.Tensor:
    """The file's bytes, or "" (the decoder reports such records later)."""
    return tf.cond(tf.equal(path, ""), lambda: tf.constant(""), lambda: tf.io.read_file(path))


def _file_prefix(cache_dir: str, source, config, pipeline_id: int) -> str:
    """A prefix naming what the cache holds: the data (and the files' sizes), the checks that
    shaped the decoded examples, and the input pipeline; another dataset or setting gets a
    cache of its own instead of a stale one."""
    identity = repr((describe_source(source), getattr(source, "files", None),
                     getattr(source, "file_sizes", None),
                     len(getattr(source, "records", None) or ()), config.num_classes,
                     config.max_instances_per_image, bool(config.get("strict_data"))))
    digest = hashlib.sha256(identity.encode()).hexdigest()[:16]
    return os.path.join(cache_dir, "decoded-%s-pipeline%d" % (digest, pipeline_id))


def cache_mode(config) -> str:
    """The config's cache mode: 'ram', 'disk' or '' (none).

    Raises:
      ValueError for a mode that is none of them.
    """
    mode = config.get("cache") or ""
    if mode not in CACHE_MODES:
        raise ValueError("cache=%r: choose ram, disk or nothing" % mode)
    return mode


def plan_cache(config, source, source_size: Tuple[int, int], cache_dir: Optional[str],
               pipeline_id: int = 0, num_pipelines: int = 1) -> Optional[CachePlan]:
    """The cache the config's `cache` asks for, checked against what is free; None without
    one. `source_size` is (images, pixels) of the source (`source_pixels`).

    Raises:
      ValueError (one line) for an unknown mode, disk without a folder, or a cache larger
      than the memory or disk free now.
    """
    mode = cache_mode(config)
    if not mode:
        return None
    if mode == "disk" and not cache_dir:
        raise ValueError("cache=disk needs a folder for its files (InputPipeline's cache_dir; "
                         "a training run uses <model_dir>/cache)")
    images, pixels = source_size
    # Each input pipeline caches its own share of the records.
    images = -(-images // num_pipelines)
    needed = (pixels * 3) // num_pipelines + images * _BYTES_PER_ELEMENT
    prefix = ""
    if mode == "disk":
        os.makedirs(cache_dir, exist_ok=True)
        prefix = _file_prefix(cache_dir, source, config, pipeline_id)
        free = shutil.disk_usage(cache_dir).free
        complete = os.path.exists(prefix + ".index")
        if not complete and needed > _USABLE_SHARE * free:
            raise ValueError("cache=disk: the %d decoded training images need %.2f GiB, more "
                             "than %d%% of the %.2f GiB free in %s; free some space, point "
                             "cache_dir elsewhere or train without cache"
                             % (images, needed / _GIB, _USABLE_SHARE * 100, free / _GIB,
                                cache_dir))
        _remove_stale_lockfiles(prefix)
    else:
        available = available_memory_bytes()
        if available is not None and needed > _USABLE_SHARE * available:
            raise ValueError("cache=ram: the %d decoded training images need %.2f GiB, more "
                             "than %d%% of the %.2f GiB of memory available; use cache=disk "
                             "or train without cache"
                             % (images, needed / _GIB, _USABLE_SHARE * 100, available / _GIB))
    plan = CachePlan(mode, needed, images, prefix)
    logging.info("%s", plan.describe())
    return plan


def _remove_stale_lockfiles(prefix: str) -> None:
    """Removes the lock files a killed run left beside a cache it was writing: tf.data would
    take them for a writer still at work and refuse to start. The run's own lock
    (utils.run_lock) keeps two runs from sharing one folder."""
    for path in glob.glob(glob.escape(prefix) + "*.lockfile"):
        os.remove(path)


def cache_decoded(dataset: tf.data.Dataset, plan: Optional[CachePlan]) -> tf.data.Dataset:
    """The decoded, checked examples, cached as `plan` says (unchanged without a plan)."""
    if plan is None:
        return dataset
    return dataset.cache(plan.file_prefix if plan.mode == "disk" else "")
