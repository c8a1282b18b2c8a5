"""Writing ImageRecords into sharded TFRecord files (Object Detection API layout).

Shards are named <prefix>-00000-of-00004.tfrecord and filled round-robin; image
bytes are stored as they are on disk. Every record first goes through the training
pipeline's checks (`data.decode.decode_and_clean`): records it would skip are left
out with the same warning, and boxes it would drop or clip are dropped or clipped. Each shard is written under a hidden
temporary name and renamed only when all are complete, so an interrupted run
never leaves files that look finished.
"""

import dataclasses
import os
from typing import Dict, List, Optional, Sequence

import numpy as np
import tensorflow as tf

from efficientdet_keras.data.decode import decode_and_clean
from efficientdet_keras.data.formats.records import raw_dataset_from_records
from efficientdet_keras.data.formats.tf_example import record_to_tf_example
from efficientdet_keras.data.health import DataHealth
from efficientdet_keras.data.formats.image_signatures import signature_format, tensorflow_reads
from efficientdet_keras.utils.fileio import publish_file
from efficientdet_keras.utils.progress import ProgressBar


@dataclasses.dataclass
class WriteStats:
    """What `write_tfrecords` did."""
    shard_paths: List[str]
    images_written: int
    objects_written: int
    skipped_paths: List[str]
    written_records: list  # the ImageRecords whose examples were written, in order
    data_report: Dict[str, int] = dataclasses.field(default_factory=dict)  # problems found

    @property
    def images_skipped(self) -> int:
        return len(self.skipped_paths)


def shard_paths(output_prefix: str, num_shards: int) -> List[str]:
    return ["%s-%05d-of-%05d.tfrecord" % (output_prefix, i, num_shards) for i in range(num_shards)]


def image_format(encoded: bytes) -> Optional[str]:
    """The format of image file bytes from their signature, or None when not an image TF decodes."""
    return signature_format(encoded[:12]) if tensorflow_reads(encoded[:12]) else None


def write_tfrecords(records: Sequence, output_prefix: str, num_shards: int = 1,
                    label_map: Optional[Dict[int, str]] = None,
                    show_progress: bool = True) -> WriteStats:
    """Writes ImageRecords with their image bytes into `num_shards` TFRecord files.

    Example i goes to shard i % num_shards (skipped images take no slot). Records the
    training pipeline would skip (missing or undecodable images, mismatched lists, ...)
    are skipped with its warning naming the record; class ids outside the label map's
    1..max id are dropped. Shards get their final names only after all are complete.

    Raises:
      ValueError when no image at all could be written (no output is left behind).
    """
    final_paths = shard_paths(output_prefix, num_shards)
    # Hidden names that no "<prefix>-*" or "*.tfrecord" glob matches.
    temp_paths = [os.path.join(os.path.dirname(p),
                               ".%s.%d.tmp" % (os.path.basename(p), os.getpid()))
                  for p in final_paths]
    writers, skipped, written = [], [], []
    objects = 0
    progress = ProgressBar(len(records), unit_name="image") if show_progress else None
    try:
        writers.extend(tf.io.TFRecordWriter(p) for p in temp_paths)
        num_classes = max(label_map) if label_map else _NO_LIMIT
        health = DataHealth()
        for index, (record, good) in enumerate(zip(records, checked_records(records, num_classes,
                                                                            health))):
            if good is not None:
                with tf.io.gfile.GFile(record.path, "rb") as f:
                    encoded = f.read()
                example = record_to_tf_example(good, encoded, label_map, image_format(encoded))
                writers[len(written) % num_shards].write(example.SerializeToString())
                written.append(good)
                objects += len(good.classes)
            else:
                skipped.append(record.path)
            if progress:
                progress.update(index + 1)
        for writer in writers:
            writer.close()
        if not written:
            raise ValueError("none of the %d images could be read (first: %s)"
                             % (len(records), skipped[0] if skipped else "no records"))
        for temp, final in zip(temp_paths, final_paths):
            publish_file(temp, final)
    finally:
        for writer in writers:
            writer.close()  # Closing twice is harmless; needed when an error stopped the loop.
        for temp in temp_paths:
            if os.path.exists(temp):
                os.remove(temp)
    report = {kind: count for kind, count in health.summary().items() if count}
    return WriteStats(final_paths, len(written), objects, skipped, written, report)


# No class id is too large without a label map to check against; no image has too many objects.
_NO_LIMIT = 2 ** 31 - 1


def checked_records(records: Sequence, num_classes: int, health: DataHealth):
    """For each ImageRecord, the record as the training pipeline would use it (boxes
    finite, upright, clipped, non-empty, classes in 1..num_classes; height and width of
    the decoded image), or None when the pipeline would skip it. Warnings name the record.
    The optional per-object fields (difficult, segmentation, ...) follow the objects kept.
    """
    dataset = raw_dataset_from_records(records).map(
        lambda raw: decode_and_clean(raw, num_classes, _NO_LIMIT, health))
    for record, example in zip(records, dataset.as_numpy_iterator()):
        if not example["ok"]:
            yield None
            continue
        height, width = example["image"].shape[:2]
        yield dataclasses.replace(
            record, height=height, width=width,
            boxes=example["boxes"] * np.array([height, width, height, width], np.float32),
            classes=example["classes"].astype(np.int64), is_crowd=example["is_crowd"],
            area=example["area"], **record.optional_fields_of(example["object_index"]))
