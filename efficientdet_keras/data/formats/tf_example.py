"""tf.train.Examples in the Object Detection API layout (boxes normalised to 0..1): written
from an ImageRecord, and parsed into a raw example (see `data.formats.records`)."""

import collections
from typing import Dict, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from efficientdet_keras.data.formats.records import ImageRecord, attempt, no_problem


def _bytes(values):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))


def _floats(values):
    return tf.train.Feature(float_list=tf.train.FloatList(value=values))


def _ints(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))


def record_to_tf_example(record: ImageRecord, encoded: bytes,
                         label_map: Optional[Dict[int, str]] = None,
                         image_format: str = "jpeg") -> tf.train.Example:
    """Encodes an ImageRecord and its image bytes in the Object Detection API layout.

    Records with difficult, truncated and view (Pascal VOC) also get
    image/object/difficult, image/object/truncated (int64) and image/object/view (bytes),
    as the Object Detection API's VOC records have them; the pipeline does not read them.
    """
    height, width = float(record.height), float(record.width)
    boxes = record.boxes.reshape(-1, 4).astype(np.float64)
    names = [(label_map or {}).get(int(c), str(int(c))).encode() for c in record.classes]
    feature = {
        "image/encoded": _bytes([encoded]),
        "image/format": _bytes([image_format.encode()]),
        "image/source_id": _bytes([str(record.image_id).encode()]),
        "image/filename": _bytes([record.filename.encode()]),
        "image/height": _ints([record.height]),
        "image/width": _ints([record.width]),
        "image/object/bbox/ymin": _floats((boxes[:, 0] / height).tolist()),
        "image/object/bbox/xmin": _floats((boxes[:, 1] / width).tolist()),
        "image/object/bbox/ymax": _floats((boxes[:, 2] / height).tolist()),
        "image/object/bbox/xmax": _floats((boxes[:, 3] / width).tolist()),
        "image/object/class/label": _ints([int(c) for c in record.classes]),
        "image/object/class/text": _bytes(names),
        "image/object/is_crowd": _ints([int(bool(c)) for c in record.is_crowd]),
        "image/object/area": _floats([float(a) for a in record.area]),
    }
    if record.difficult is not None:
        feature["image/object/difficult"] = _ints([int(v) for v in record.difficult])
    if record.truncated is not None:
        feature["image/object/truncated"] = _ints([int(v) for v in record.truncated])
    if record.view is not None:
        feature["image/object/view"] = _bytes([str(v).encode() for v in record.view])
    return tf.train.Example(features=tf.train.Features(feature=feature))


_TF_EXAMPLE_FEATURES = {
    "image/encoded": tf.io.FixedLenFeature((), tf.string, default_value=""),
    "image/source_id": tf.io.FixedLenFeature((), tf.string, default_value=""),
    "image/filename": tf.io.FixedLenFeature((), tf.string, default_value=""),
    "image/height": tf.io.FixedLenFeature((), tf.int64, default_value=-1),
    "image/width": tf.io.FixedLenFeature((), tf.int64, default_value=-1),
    "image/object/bbox/ymin": tf.io.VarLenFeature(tf.float32),
    "image/object/bbox/xmin": tf.io.VarLenFeature(tf.float32),
    "image/object/bbox/ymax": tf.io.VarLenFeature(tf.float32),
    "image/object/bbox/xmax": tf.io.VarLenFeature(tf.float32),
    "image/object/class/label": tf.io.VarLenFeature(tf.int64),
    "image/object/area": tf.io.VarLenFeature(tf.float32),
    "image/object/is_crowd": tf.io.VarLenFeature(tf.int64),
}
_COORDINATES = ("ymin", "xmin", "ymax", "xmax")


def _parse_features(serialized: tf.Tensor) -> Dict[str, tf.Tensor]:
    """The Object Detection API features of a serialized tf.Example, dense (fails at run
    time on bytes that are not a tf.Example or a feature of the wrong type)."""
    parsed = tf.io.parse_single_example(serialized, _TF_EXAMPLE_FEATURES)
    return {k: tf.sparse.to_dense(v) if isinstance(v, tf.SparseTensor) else v
            for k, v in parsed.items()}


def _empty_features() -> Dict[str, tf.Tensor]:
    """`_parse_features`' structure with no values: what an unparseable record becomes."""
    return {key: (tf.constant(feature.default_value, feature.dtype)
                  if isinstance(feature, tf.io.FixedLenFeature) else tf.zeros([0], feature.dtype))
            for key, feature in _TF_EXAMPLE_FEATURES.items()}


def parse_tf_example(serialized: tf.Tensor, origin="") -> Dict[str, tf.Tensor]:
    """Parses one serialized tf.Example (Object Detection API layout) into a raw example.

    Never fails: bytes that are not a tf.Example, or a feature of the wrong type, give
    problem "unparseable_examples"; lists of different lengths are left for
    `data.decode` to report. `origin` (string) says where the record sits.
    """
    dense, parsed = attempt(_parse_features, serialized, _empty_features())
    coordinates = [dense["image/object/bbox/%s" % name] for name in _COORDINATES]
    counts = tf.stack([tf.shape(c)[0] for c in coordinates])
    num_boxes = tf.reduce_min(counts)
    boxes = tf.stack([c[:num_boxes] for c in coordinates], axis=-1)
    source_id, filename = dense["image/source_id"], dense["image/filename"]
    raw = {
        "encoded": dense["image/encoded"], "path": tf.constant(""),
        "source_id": tf.where(tf.strings.length(source_id) > 0, source_id, filename),
        "filename": filename, "boxes": boxes, "boxes_normalized": tf.constant(True),
        "classes": dense["image/object/class/label"],
        "is_crowd": tf.cast(dense["image/object/is_crowd"], tf.bool),
        "area": dense["image/object/area"], "coordinate_counts": counts,
        "height": dense["image/height"], "width": dense["image/width"],
    }
    raw.update(no_problem(origin))
    raw["problem"] = tf.where(parsed, "", "unparseable_examples")
    raw["problem_detail"] = tf.where(
        parsed, "", "bytes that are not a tf.Example, or a feature of the wrong type")
    return raw


def scan_class_labels(files: Sequence[str], limit: int = 1000
                      ) -> Tuple[collections.Counter, Dict[int, str], int]:
    """What the first `limit` records of TFRecord files say of their classes: the boxes per
    class id, the class/text each id carries (where the writer put the names), and the number
    of records read. Records that do not parse are left to the input pipeline to report."""
    features = {"image/object/class/label": tf.io.VarLenFeature(tf.int64),
                "image/object/class/text": tf.io.VarLenFeature(tf.string)}
    counts, texts, seen = collections.Counter(), {}, 0
    records = tf.data.TFRecordDataset(list(files)).take(limit)
    for serialized in records.as_numpy_iterator():
        seen += 1
        try:
            parsed = tf.io.parse_single_example(serialized, features)
        except tf.errors.InvalidArgumentError:
            continue
        labels = parsed["image/object/class/label"].values.numpy().tolist()
        names = parsed["image/object/class/text"].values.numpy().tolist()
        counts.update(labels)
        if len(names) == len(labels):
            for label, name in zip(labels, names):
                texts.setdefault(int(label), name.decode("utf-8", "replace"))
    return counts, texts, seen
