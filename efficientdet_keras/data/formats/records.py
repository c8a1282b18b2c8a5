"""The common annotated-image record, and the "raw example" every reader produces.

Every reader ends in the same place: COCO JSON (`data.formats.coco_records`) and Pascal VOC
(`data.formats.voc`) readers build `ImageRecord`s (image path plus annotations, boxes in
pixels) and TFRecord files hold tf.train.Examples in the Object Detection API layout
(`data.formats.tf_example`, boxes normalised to 0..1). `raw_dataset_from_records` here and
`data.formats.tf_example.parse_tf_example` turn either into the same "raw example" dict, which
`data.decode` then decodes. `attempt` is the graph-mode try both reading and decoding use.

Raw example (all tensors, one image):
  encoded: string, the image file bytes ("" when `path` is used)
  path: string, an image file to read ("" when `encoded` is used)
  source_id: string, the image id as text ("397133")
  filename: string
  boxes: float32 [N, 4] [ymin, xmin, ymax, xmax]
  boxes_normalized: bool scalar, true when boxes are in 0..1, false for pixels
  classes: int64 [L], class ids 1..num_classes (L != N is a bad record)
  is_crowd: bool [C], C = L, or 0 when not given
  area: float32 [A] (pixels^2; 0 when unknown), A = L, or 0 when not given
  coordinate_counts: int32 [4], how many ymin, xmin, ymax, xmax values the record
    holds (boxes keeps the first N = min of them)
  height, width: int64, the sizes the record states (-1 when it states none)
  origin: string, where a TFRecord example sits ("#3 of data/train.tfrecord"), or ""
  problem, problem_detail: string, a `data.health.SKIP_KINDS` kind found while reading
    ("unparseable_examples", "truncated_files") and what it was, or "" and ""
"""

import dataclasses
import os
from typing import Callable, Dict, Optional, Sequence

import numpy as np
import tensorflow as tf

from efficientdet_keras.data.formats.image_ids import ImageId


@dataclasses.dataclass
class ImageRecord:
    """One annotated image on disk. Boxes are [ymin, xmin, ymax, xmax] in pixels.

    image_id is the id as the dataset spells it (an int, or a string such as
    "000123" or "img_a.jpg"); it becomes the source_id text, and evaluation maps
    it to int64 with `data.formats.image_ids.image_id_to_int64`.
    """
    image_id: ImageId
    path: str
    height: int
    width: int
    boxes: np.ndarray  # float32 [N, 4]
    classes: np.ndarray  # int64 [N]
    is_crowd: np.ndarray  # bool [N]
    area: np.ndarray  # float32 [N]
    # Per-object fields only some sources have (None otherwise), kept for the tools that read
    # the TFRecords and COCO JSON written from records: VOC's difficult and truncated
    # (int64 [N]) and pose (str [N]); COCO's segmentation (a list of N polygon lists or RLE
    # dicts, None for an annotation without one).
    difficult: Optional[np.ndarray] = None
    truncated: Optional[np.ndarray] = None
    view: Optional[np.ndarray] = None
    segmentation: Optional[list] = None

    @property
    def filename(self) -> str:
        return os.path.basename(self.path)

    def optional_fields_of(self, indices: Sequence[int]) -> Dict[str, object]:
        """The optional per-object fields for the objects at `indices`, by field name
        (None stays None); for `dataclasses.replace` after objects were dropped."""
        indices = np.asarray(indices, np.int64).reshape(-1)
        fields = {}
        for name in OPTIONAL_OBJECT_FIELDS:
            values = getattr(self, name)
            if values is None:
                fields[name] = None
            elif isinstance(values, np.ndarray):
                fields[name] = values[indices]
            else:
                fields[name] = [values[i] for i in indices]
        return fields


OPTIONAL_OBJECT_FIELDS = ("difficult", "truncated", "view", "segmentation")


def with_class_ids(record: ImageRecord, new_ids: Dict[int, int]) -> ImageRecord:
    """The record with each class id c as new_ids[c] (ids not in new_ids stay as they are, for
    the pipeline's checks to name)."""
    if all(new_ids.get(int(c), c) == c for c in record.classes):
        return record
    classes = record.classes.copy()
    for i, c in enumerate(record.classes):
        classes[i] = new_ids.get(int(c), c)
    return dataclasses.replace(record, classes=classes)


def empty_annotations():
    """boxes, classes, is_crowd, area arrays for an image with no objects."""
    return (np.zeros([0, 4], np.float32), np.zeros([0], np.int64), np.zeros([0], bool),
            np.zeros([0], np.float32))


def raw_dataset_from_records(records: Sequence[ImageRecord]) -> tf.data.Dataset:
    """A dataset of raw examples (see the module doc) that read images from their paths."""
    lengths = [len(r.classes) for r in records]
    boxes = _ragged([r.boxes.reshape(-1, 4) for r in records], lengths, np.float32, [0, 4])
    classes = _ragged([r.classes for r in records], lengths, np.int64, [0])
    is_crowd = _ragged([r.is_crowd for r in records], lengths, bool, [0])
    area = _ragged([r.area for r in records], lengths, np.float32, [0])
    slices = {
        "path": tf.constant([r.path for r in records]),
        "source_id": tf.constant([str(r.image_id) for r in records]),
        "filename": tf.constant([r.filename for r in records]),
        "height": tf.constant([int(r.height) for r in records], tf.int64),
        "width": tf.constant([int(r.width) for r in records], tf.int64),
        "boxes": boxes, "classes": classes, "is_crowd": is_crowd, "area": area,
    }

    def to_raw(example):
        raw = {k: (v.to_tensor() if isinstance(v, tf.RaggedTensor) else v)
               for k, v in example.items()}
        raw["boxes"] = tf.reshape(raw["boxes"], [-1, 4])
        return dict(raw, encoded=tf.constant(""), boxes_normalized=tf.constant(False),
                    coordinate_counts=tf.fill([4], tf.shape(raw["boxes"])[0]),
                    **no_problem())

    return tf.data.Dataset.from_tensor_slices(slices).map(to_raw)


def no_problem(origin="") -> Dict[str, tf.Tensor]:
    """The origin, problem and problem_detail fields of a raw example read without a problem."""
    return {"origin": tf.constant(origin) if isinstance(origin, str) else origin,
            "problem": tf.constant(""), "problem_detail": tf.constant("")}


def _ragged(arrays, lengths, dtype, empty_shape) -> tf.RaggedTensor:
    values = np.concatenate([np.asarray(a, dtype) for a in arrays] + [np.zeros(empty_shape, dtype)])
    return tf.RaggedTensor.from_row_lengths(tf.constant(values), tf.constant(lengths, tf.int64))


def attempt(fn: Callable, value, fallback):
    """(fn(value), True), or (fallback, False) when fn fails at run time (a missing file,
    corrupt image bytes, bytes that are not a tf.Example): graph ops only.

    fn runs in a one-element nested tf.data pipeline whose errors ignore_errors()
    drops, a small cost per call; fallback must have fn's structure and dtypes.
    """
    def tried(x):
        return fn(x), tf.constant(True)

    results = tf.data.Dataset.from_tensors(value).map(tried).ignore_errors()
    fallback = tf.data.Dataset.from_tensors((fallback, tf.constant(False)))
    return results.concatenate(fallback).take(1).get_single_element()
