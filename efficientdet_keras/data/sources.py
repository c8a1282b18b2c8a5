"""Data sources of the input pipelines: where raw examples (see `data.formats.records`) come from.

A source is any object with `raw_dataset(input_context, shuffle, seed)`, which returns a
dataset of raw examples sharded for the input pipeline `input_context` names (if any).
`make_source` picks one from the flags users give.
"""

import collections
from typing import Optional, Sequence

import tensorflow as tf

from efficientdet_keras.data.formats.coco_records import load_coco_records
from efficientdet_keras.data.formats.records import ImageRecord, raw_dataset_from_records
from efficientdet_keras.data.formats.tfrecord_files import list_files, raw_dataset_from_tfrecord_file


class TFRecordSource:
    """TFRecord files in the Object Detection API layout (patterns or lists of patterns)."""

    def __init__(self, file_patterns, class_offset: int = 0):
        """class_offset: added to every class id (1 for records numbered from 0)."""
        self.files = list_files(file_patterns)
        self.class_offset = class_offset
        # Sizes tell a truncated file from a complete one (see raw_dataset_from_tfrecord_file).
        self.file_sizes = [tf.io.gfile.stat(path).length for path in self.files]

    def raw_dataset(self, input_context: Optional[tf.distribute.InputContext], shuffle: bool,
                    seed: Optional[int]) -> tf.data.Dataset:
        files = tf.data.Dataset.from_tensor_slices(
            (self.files, tf.constant(self.file_sizes, tf.int64)))
        sharded_by_file = input_context is not None and \
            len(self.files) >= input_context.num_input_pipelines
        if sharded_by_file:
            files = files.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        if shuffle:
            files = files.shuffle(len(self.files), seed=seed)
        records = files.interleave(raw_dataset_from_tfrecord_file,
                                   cycle_length=min(len(self.files), 8),
                                   num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        if input_context is not None and not sharded_by_file:
            records = records.shard(input_context.num_input_pipelines,
                                    input_context.input_pipeline_id)
        if self.class_offset:
            offset = tf.constant(self.class_offset, tf.int64)
            records = records.map(lambda raw: dict(raw, classes=raw["classes"] + offset),
                                  num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        return records


class RecordsSource:
    """Images on disk described by ImageRecords (COCO JSON, Pascal VOC, synthetic)."""

    def __init__(self, records: Sequence[ImageRecord]):
        if not records:
            raise ValueError("The data source holds no images")
        from efficientdet_keras.data.readable_images import tensorflow_readable
        self.records = tensorflow_readable(records)

    def raw_dataset(self, input_context: Optional[tf.distribute.InputContext], shuffle: bool,
                    seed: Optional[int]) -> tf.data.Dataset:
        dataset = raw_dataset_from_records(self.records)
        if input_context is not None:
            dataset = dataset.shard(input_context.num_input_pipelines,
                                    input_context.input_pipeline_id)
        return dataset


class CocoSource(RecordsSource):
    """A COCO instances JSON plus its image folder, read directly (no conversion step)."""

    def __init__(self, annotation_file: str, image_dir: str):
        self.skipped = collections.Counter()  # Entries left out, by kind (for the data report).
        super().__init__(load_coco_records(annotation_file, image_dir, self.skipped))
        self.annotation_file = annotation_file


def make_source(file_pattern: str = None, coco_json: str = None, image_dir: str = None):
    """The source for the flags users give: TFRecord patterns, or COCO JSON + images."""
    if file_pattern:
        return TFRecordSource(file_pattern)
    if coco_json:
        if not image_dir:
            raise ValueError("COCO JSON input %s needs an image directory" % coco_json)
        return CocoSource(coco_json, image_dir)
    raise ValueError("No input data: give a TFRecord file pattern or a COCO JSON with images")


def describe_source(source) -> str:
    """Names a data source in messages: its files, COCO JSON or first image."""
    if hasattr(source, "files"):
        shown = source.files[:3] + (["..."] if len(source.files) > 3 else [])
        return "TFRecord files %s" % ", ".join(shown)
    if hasattr(source, "annotation_file"):
        return "COCO JSON %s" % source.annotation_file
    if getattr(source, "records", None):
        return "%d images such as %s" % (len(source.records), source.records[0].path)
    return type(source).__name__
