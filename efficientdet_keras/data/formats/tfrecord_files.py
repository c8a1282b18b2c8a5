"""TFRecord files: expanding file patterns, and reading a file's raw examples while telling a
truncated or corrupt file from a complete one."""

from typing import Dict, List

import tensorflow as tf

from efficientdet_keras.data.formats.records import no_problem
from efficientdet_keras.data.formats.tf_example import parse_tf_example


# TFRecord framing around each record's data: length (8), its CRC (4), data CRC (4).
_TFRECORD_FRAMING_BYTES = 16


def raw_dataset_from_tfrecord_file(path: tf.Tensor, size: tf.Tensor) -> tf.data.Dataset:
    """The raw examples of one TFRecord file of `size` bytes (string and int64 scalars).

    A truncated file or a record with a bad CRC ends the file early: the records before
    it are kept, and one raw example with problem "truncated_files" names the file.
    """
    records = tf.data.TFRecordDataset(path).ignore_errors().map(lambda s: (s, False))
    end = tf.data.Dataset.from_tensors((tf.constant(b""), True))

    def count_bytes(state, element):
        serialized, is_end = element
        read, index = state
        read += tf.where(is_end, tf.constant(0, tf.int64),
                         tf.cast(tf.strings.length(serialized), tf.int64) + _TFRECORD_FRAMING_BYTES)
        return (read, index + 1), (serialized, is_end, read, index)

    def to_raw(serialized, is_end, read, index):
        origin = tf.strings.join(["#", tf.strings.as_string(index), " of ", path])
        return tf.cond(is_end, lambda: _truncated_file(serialized, path, index, read, size),
                       lambda: parse_tf_example(serialized, origin))

    counted = records.concatenate(end).scan((tf.constant(0, tf.int64), tf.constant(0, tf.int64)),
                                            count_bytes)
    # The end marker stays only when the records read do not fill the file.
    counted = counted.filter(lambda s, is_end, read, i: tf.logical_or(
        tf.logical_not(is_end), read < size))
    return counted.map(to_raw)


def _truncated_file(empty: tf.Tensor, path, index, read, size) -> Dict[str, tf.Tensor]:
    """The raw example that reports a TFRecord file whose rest cannot be read."""
    raw = parse_tf_example(empty)  # Empty bytes parse as an empty Example.
    raw.update(no_problem(tf.strings.join(["TFRecord file ", path])))
    raw["problem"] = tf.constant("truncated_files")
    raw["problem_detail"] = tf.strings.join(
        ["truncated or corrupt (bad CRC) after ", tf.strings.as_string(index), " records (",
         tf.strings.as_string(size - read), " of ", tf.strings.as_string(size),
         " bytes unreadable); skipping the rest of the file"])
    return raw


def list_files(file_patterns) -> List[str]:
    """Expands a pattern, a comma-separated string of patterns, or a list of them.

    Raises:
      FileNotFoundError naming every pattern that matches nothing.
    """
    if isinstance(file_patterns, str):
        file_patterns = [p for p in file_patterns.split(",") if p.strip()]
    files, empty = [], []
    for pattern in file_patterns:
        matched = sorted(tf.io.gfile.glob(pattern.strip()))
        if not matched:
            empty.append(pattern)
        files.extend(matched)
    if empty or not files:
        raise FileNotFoundError("No files match %s" % ", ".join(map(repr, empty or file_patterns)))
    return files
