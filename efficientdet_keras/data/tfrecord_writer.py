"""Writing ImageRecords into sharded TFRecord files (Object Detection API layout).

Shards are named <prefix>-00000-of-00004.tfrecord and filled round-robin; image
bytes are stored as they are on disk. Each shard is written under a hidden
temporary name and renamed only when all are complete, so an interrupted run
never leaves files that look finished.
"""

import dataclasses
import os
from typing import Dict, List, Optional, Sequence

import tensorflow as tf
import tf_keras
from absl import logging

from efficientdet_keras.data.records import record_to_tf_example


@dataclasses.dataclass
class WriteStats:
    """What `write_tfrecords` did."""
    shard_paths: List[str]
    images_written: int
    objects_written: int
    skipped_paths: List[str]
    written_records: list  # the ImageRecords whose examples were written, in order

    @property
    def images_skipped(self) -> int:
        return len(self.skipped_paths)


def shard_paths(output_prefix: str, num_shards: int) -> List[str]:
    return ["%s-%05d-of-%05d.tfrecord" % (output_prefix, i, num_shards) for i in range(num_shards)]


def image_format(encoded: bytes) -> Optional[str]:
    """The format of image file bytes from their signature, or None when not an image TF decodes."""
    signatures = {b"\xff\xd8\xff": "jpeg", b"\x89PNG\r\n\x1a\n": "png", b"GIF87a": "gif",
                  b"GIF89a": "gif", b"BM": "bmp"}
    for signature, name in signatures.items():
        if encoded.startswith(signature):
            return name
    return None


def write_tfrecords(records: Sequence, output_prefix: str, num_shards: int = 1,
                    label_map: Optional[Dict[int, str]] = None,
                    show_progress: bool = True) -> WriteStats:
    """Writes ImageRecords with their image bytes into `num_shards` TFRecord files.

    Example i goes to shard i % num_shards (skipped images take no slot). Images
    that are missing, unreadable, or not JPEG/PNG/GIF/BMP are skipped with a warning
    naming the file. Shards get their final names only after all are complete.

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
    progress = tf_keras.utils.Progbar(len(records), unit_name="image") if show_progress else None
    try:
        writers.extend(tf.io.TFRecordWriter(p) for p in temp_paths)
        for index, record in enumerate(records):
            encoded = _read_image(record.path)
            if encoded is not None:
                example = record_to_tf_example(record, encoded, label_map, image_format(encoded))
                writers[len(written) % num_shards].write(example.SerializeToString())
                written.append(record)
                objects += len(record.classes)
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
            os.replace(temp, final)
    finally:
        for writer in writers:
            writer.close()  # Closing twice is harmless; needed when an error stopped the loop.
        for temp in temp_paths:
            if os.path.exists(temp):
                os.remove(temp)
    return WriteStats(final_paths, len(written), objects, skipped, written)


def _read_image(path: str) -> Optional[bytes]:
    """The file's bytes, or None (with a warning naming it) when it cannot be used."""
    try:
        with open(path, "rb") as f:
            encoded = f.read()
    except OSError as e:
        logging.warning("Skipping image %s: %s", path, e.strerror or e)
        return None
    if image_format(encoded) is None:
        logging.warning("Skipping image %s: not a JPEG, PNG, GIF or BMP file (%d bytes)",
                        path, len(encoded))
        return None
    return encoded
