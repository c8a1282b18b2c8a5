"""The common annotated-image record, COCO JSON loading, and the TFRecord layout.

Every reader ends in the same place: COCO JSON and Pascal VOC readers build
`ImageRecord`s (image path plus annotations, boxes in pixels) and TFRecord
files hold tf.train.Examples in the Object Detection API layout (boxes
normalised to 0..1). `raw_dataset_from_records` and `parse_tf_example` turn
either into the same "raw example" dict, which `data.decode` then decodes.

Raw example (all tensors, one image):
  encoded: string, the image file bytes ("" when `path` is used)
  path: string, an image file to read ("" when `encoded` is used)
  source_id: string, the image id as text ("397133")
  filename: string
  boxes: float32 [N, 4] [ymin, xmin, ymax, xmax]
  boxes_normalized: bool scalar, true when boxes are in 0..1, false for pixels
  classes: int64 [N], class ids 1..num_classes
  is_crowd: bool [N]
  area: float32 [N] (pixels^2; 0 when unknown)
"""

import dataclasses
import json
import os
from typing import Dict, List, Optional, Sequence

import numpy as np
import tensorflow as tf

from efficientdet_keras.data.image_ids import ImageId, image_id_to_int64


@dataclasses.dataclass
class ImageRecord:
    """One annotated image on disk. Boxes are [ymin, xmin, ymax, xmax] in pixels.

    image_id is the id as the dataset spells it (an int, or a string such as
    "000123" or "img_a.jpg"); it becomes the source_id text, and evaluation maps
    it to int64 with `data.image_ids.image_id_to_int64`.
    """
    image_id: ImageId
    path: str
    height: int
    width: int
    boxes: np.ndarray  # float32 [N, 4]
    classes: np.ndarray  # int64 [N]
    is_crowd: np.ndarray  # bool [N]
    area: np.ndarray  # float32 [N]

    @property
    def filename(self) -> str:
        return os.path.basename(self.path)


def empty_annotations():
    """boxes, classes, is_crowd, area arrays for an image with no objects."""
    return (np.zeros([0, 4], np.float32), np.zeros([0], np.int64), np.zeros([0], bool),
            np.zeros([0], np.float32))


def read_coco_json(annotation_file: str) -> dict:
    """Loads a COCO instances JSON and checks what every reader relies on.

    Raises:
      FileNotFoundError naming the file; ValueError naming the file and the key or
      image id for malformed JSON, an image without "id", or an image id that
      appears twice (or two ids that map to one int64, like "0123" and 123).
    """
    if not os.path.exists(annotation_file):
        raise FileNotFoundError("COCO annotation file not found: %s" % annotation_file)
    with open(annotation_file) as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError("%s is not valid JSON: %s" % (annotation_file, e)) from None
    for key in ("images", "annotations"):
        if key not in data:
            raise ValueError("%s has no %r list; is it a COCO instances file?" % (annotation_file, key))
    coco_image_ids(data, annotation_file)
    return data


def coco_image_ids(data: dict, annotation_file: str) -> Dict[int, ImageId]:
    """{int64 image id: the id as the JSON spells it} for the images of a COCO dict.

    Raises:
      ValueError naming the file and the id for an image without "id" or a duplicate id.
    """
    ids: Dict[int, ImageId] = {}
    for image in data["images"]:
        if "id" not in image:
            raise ValueError("%s: image entry %r lacks key 'id'" % (annotation_file, image))
        try:
            number = image_id_to_int64(image["id"])
        except ValueError as e:
            raise ValueError("%s: %s" % (annotation_file, e)) from None
        if number in ids:
            same = ("" if ids[number] == image["id"] else
                    " (as %r, which maps to the same int64 %d)" % (ids[number], number))
            raise ValueError("%s: image id %r appears twice%s; image ids must be unique"
                             % (annotation_file, image["id"], same))
        ids[number] = image["id"]
    return ids


def load_coco_records(annotation_file: str, image_dir: str) -> List[ImageRecord]:
    """Reads a COCO instances JSON into ImageRecords (images without annotations included).

    COCO boxes [x, y, w, h] become [ymin, xmin, ymax, xmax]. Category ids are
    kept as they are (COCO's 1..90); see `data.label_maps` to remap. Image ids are
    kept as the file spells them (int or string).

    Raises:
      FileNotFoundError naming the file; ValueError naming the key or image id
      for malformed JSON or duplicate image ids.
    """
    data = read_coco_json(annotation_file)
    by_image: Dict[int, list] = {}
    for ann in data["annotations"]:
        by_image.setdefault(image_id_to_int64(ann["image_id"]), []).append(ann)
    records = []
    for image in data["images"]:
        try:
            image_id, file_name = image["id"], image["file_name"]
            height, width = int(image["height"]), int(image["width"])
        except KeyError as e:
            raise ValueError("%s: image entry %r lacks key %s" % (annotation_file, image, e)) from None
        anns = by_image.get(image_id_to_int64(image_id), [])
        if anns:
            xywh = np.array([a["bbox"] for a in anns], np.float32).reshape(-1, 4)
            boxes = np.stack([xywh[:, 1], xywh[:, 0], xywh[:, 1] + xywh[:, 3],
                              xywh[:, 0] + xywh[:, 2]], axis=1)
            classes = np.array([a["category_id"] for a in anns], np.int64)
            is_crowd = np.array([bool(a.get("iscrowd", 0)) for a in anns], bool)
            area = np.array([a.get("area", w * h) for a, (_, _, w, h) in zip(anns, xywh)],
                            np.float32)
        else:
            boxes, classes, is_crowd, area = empty_annotations()
        records.append(ImageRecord(_json_id(image_id), os.path.join(image_dir, file_name), height,
                                   width, boxes, classes, is_crowd, area))
    return records


def _json_id(image_id: ImageId) -> ImageId:
    """An id as JSON can hold it: a Python int, or the string unchanged."""
    return image_id if isinstance(image_id, str) else int(image_id)


def records_to_coco(records: Sequence[ImageRecord], label_map: Dict[int, str]) -> dict:
    """The COCO ground-truth dict (images, annotations, categories) of some records.

    Evaluation needs this for data that did not come as COCO JSON (VOC, synthetic).
    """
    images, annotations = [], []
    next_ann_id = 1
    for record in records:
        images.append({"id": _json_id(record.image_id), "file_name": record.filename,
                       "height": int(record.height), "width": int(record.width)})
        for box, cls, crowd, area in zip(record.boxes, record.classes, record.is_crowd, record.area):
            ymin, xmin, ymax, xmax = (float(v) for v in box)
            annotations.append({"id": next_ann_id, "image_id": _json_id(record.image_id),
                                "category_id": int(cls), "iscrowd": int(bool(crowd)),
                                "bbox": [xmin, ymin, xmax - xmin, ymax - ymin],
                                "area": float(area) if area > 0 else (xmax - xmin) * (ymax - ymin)})
            next_ann_id += 1
    categories = [{"id": int(k), "name": str(v)} for k, v in sorted(label_map.items())]
    return {"images": images, "annotations": annotations, "categories": categories}


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
        "boxes": boxes, "classes": classes, "is_crowd": is_crowd, "area": area,
    }

    def to_raw(example):
        return dict(encoded=tf.constant(""), boxes_normalized=tf.constant(False),
                    **{k: (v.to_tensor() if isinstance(v, tf.RaggedTensor) else v)
                       for k, v in example.items()})

    return tf.data.Dataset.from_tensor_slices(slices).map(to_raw)


def _ragged(arrays, lengths, dtype, empty_shape) -> tf.RaggedTensor:
    values = np.concatenate([np.asarray(a, dtype) for a in arrays] + [np.zeros(empty_shape, dtype)])
    return tf.RaggedTensor.from_row_lengths(tf.constant(values), tf.constant(lengths, tf.int64))


# --- TFRecord (Object Detection API layout) ---------------------------------

def _bytes(values):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))


def _floats(values):
    return tf.train.Feature(float_list=tf.train.FloatList(value=values))


def _ints(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))


def record_to_tf_example(record: ImageRecord, encoded: bytes,
                         label_map: Optional[Dict[int, str]] = None,
                         image_format: str = "jpeg") -> tf.train.Example:
    """Encodes an ImageRecord and its image bytes in the Object Detection API layout."""
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
    return tf.train.Example(features=tf.train.Features(feature=feature))


_TF_EXAMPLE_FEATURES = {
    "image/encoded": tf.io.FixedLenFeature((), tf.string),
    "image/source_id": tf.io.FixedLenFeature((), tf.string, default_value=""),
    "image/filename": tf.io.FixedLenFeature((), tf.string, default_value=""),
    "image/height": tf.io.FixedLenFeature((), tf.int64, default_value=-1),
    "image/width": tf.io.FixedLenFeature((), tf.int64, default_value=-1),
    "image/object/bbox/xmin": tf.io.VarLenFeature(tf.float32),
    "image/object/bbox/ymin": tf.io.VarLenFeature(tf.float32),
    "image/object/bbox/xmax": tf.io.VarLenFeature(tf.float32),
    "image/object/bbox/ymax": tf.io.VarLenFeature(tf.float32),
    "image/object/class/label": tf.io.VarLenFeature(tf.int64),
    "image/object/area": tf.io.VarLenFeature(tf.float32),
    "image/object/is_crowd": tf.io.VarLenFeature(tf.int64),
}


def parse_tf_example(serialized: tf.Tensor) -> Dict[str, tf.Tensor]:
    """Parses one serialized tf.Example (Object Detection API layout) into a raw example.

    Missing is_crowd means not crowd; missing area means 0 (computed later).
    """
    parsed = tf.io.parse_single_example(serialized, _TF_EXAMPLE_FEATURES)
    dense = {k: tf.sparse.to_dense(v) if isinstance(v, tf.SparseTensor) else v
             for k, v in parsed.items()}
    boxes = tf.stack([dense["image/object/bbox/ymin"], dense["image/object/bbox/xmin"],
                      dense["image/object/bbox/ymax"], dense["image/object/bbox/xmax"]], axis=-1)
    classes = dense["image/object/class/label"]
    num = tf.shape(classes)[0]
    boxes = boxes[:num]
    is_crowd = tf.cast(dense["image/object/is_crowd"], tf.bool)
    is_crowd = tf.cond(tf.shape(is_crowd)[0] == num, lambda: is_crowd,
                       lambda: tf.zeros([num], tf.bool))
    area = dense["image/object/area"]
    area = tf.cond(tf.shape(area)[0] == num, lambda: area, lambda: tf.zeros([num], tf.float32))
    source_id = dense["image/source_id"]
    filename = dense["image/filename"]
    return {
        "encoded": dense["image/encoded"], "path": tf.constant(""),
        "source_id": tf.where(tf.strings.length(source_id) > 0, source_id, filename),
        "filename": filename, "boxes": boxes, "boxes_normalized": tf.constant(True),
        "classes": classes, "is_crowd": is_crowd, "area": area,
    }


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
