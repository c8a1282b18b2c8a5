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
  classes: int64 [L], class ids 1..num_classes (L != N is a bad record)
  is_crowd: bool [C], C = L, or 0 when not given
  area: float32 [A] (pixels^2; 0 when unknown), A = L, or 0 when not given
  coordinate_counts: int32 [4], how many ymin, xmin, ymax, xmax values the record
    holds (boxes keeps the first N = min of them)
  height, width: int64, the sizes the record states (-1 when it states none)
  origin: string, where a TFRecord example sits ("#3 of data/train.tfrecord"), or ""
  problem, problem_detail: string, a `data.decode.SKIP_KINDS` kind found while reading
    ("unparseable_examples", "truncated_files") and what it was, or "" and ""
"""

import collections
import dataclasses
import json
import os
from typing import Dict, List, Optional, Sequence, Set, Tuple

import numpy as np
import tensorflow as tf
from absl import logging

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
    data = _read_coco_dict(annotation_file)
    coco_image_ids(data, annotation_file)
    return data


def _read_coco_dict(annotation_file: str) -> dict:
    """The parsed JSON, with its "images" and "annotations" lists (not checked further)."""
    if not os.path.exists(annotation_file):
        raise FileNotFoundError("COCO annotation file not found: %s" % annotation_file)
    with open(annotation_file) as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError("%s is not valid JSON: %s" % (annotation_file, e)) from None
    if not isinstance(data, dict):
        raise ValueError("%s holds a %s, not a COCO instances object" % (annotation_file,
                                                                        type(data).__name__))
    for key in ("images", "annotations"):
        if not isinstance(data.get(key), list):
            raise ValueError("%s has no %r list; is it a COCO instances file?" % (annotation_file, key))
    return data


def coco_categories(annotation_file: str) -> Dict[int, str]:
    """{id: name} from a COCO JSON's categories list (empty when it has none)."""
    categories = _read_coco_dict(annotation_file).get("categories") or []
    return {int(c["id"]): str(c["name"]) for c in categories}


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


def load_coco_records(annotation_file: str, image_dir: str,
                      skipped: Optional[collections.Counter] = None) -> List[ImageRecord]:
    """Reads a COCO instances JSON into ImageRecords (images without annotations included).

    COCO boxes [x, y, w, h] become [ymin, xmin, ymax, xmax]. Category ids are
    kept as they are (COCO's 1..90); see `data.label_maps` to remap. Image ids are
    kept as the file spells them (int or string); numbers written as strings
    ("3", "12.5") in bbox and category_id are read as numbers.

    Bad entries are skipped, each with a warning naming the file and the image id
    or file name: an image entry without id, file_name or a positive height and
    width; an image id that appears twice (every entry with it: their annotations
    cannot be told apart); an image file missing from `image_dir`; an annotation
    without a valid bbox or category_id, or for an image id the file does not list.
    (The evaluator's ground truth stays strict: `read_coco_json`.)

    Args:
      skipped: a Counter that gains the number of skipped entries per kind.

    Raises:
      FileNotFoundError naming the file; ValueError for malformed JSON, or when the
      file lists images but none of them can be used (naming `image_dir` when their
      files are missing).
    """
    data = _read_coco_dict(annotation_file)
    problems = _SkippedEntries(annotation_file)
    images, listed = _usable_images(data["images"], image_dir, problems)
    annotations = _annotations_by_image(data["annotations"], images, listed, problems)
    problems.log_summary(len(data["images"]), len(data["annotations"]))
    if skipped is not None:
        skipped.update(problems.counts)
    if data["images"] and not images:
        missing = problems.counts[_MISSING_FILE]
        raise ValueError("None of the %d images of %s can be used%s" % (
            len(data["images"]), annotation_file,
            "; %d image files are not in the image directory %s" % (missing, image_dir)
            if missing else " (see the warnings above)"))
    return [_coco_record(image, annotations.get(number, []), image_dir)
            for number, image in images.items()]


_MISSING_FILE = "image file missing"
# Named warnings per kind of problem; the rest are counted in the summary line.
_WARNINGS_PER_KIND = 20


class _SkippedEntries:
    """Counts the entries of one COCO file that are skipped, warning about the first few."""

    def __init__(self, annotation_file: str):
        self.annotation_file = annotation_file
        self.counts: collections.Counter = collections.Counter()

    def skip(self, kind: str, entry: str) -> None:
        self.counts[kind] += 1
        if self.counts[kind] <= _WARNINGS_PER_KIND:
            logging.warning("%s: skipping %s: %s", self.annotation_file, entry, kind)

    def log_summary(self, num_images: int, num_annotations: int) -> None:
        if self.counts:
            counts = ", ".join("%d x %s" % (n, kind) for kind, n in sorted(self.counts.items()))
            logging.warning("%s: skipped %s (of %d images, %d annotations)",
                            self.annotation_file, counts, num_images, num_annotations)


def _usable_images(images: list, image_dir: str,
                   problems: _SkippedEntries) -> Tuple[Dict[int, dict], Set[int]]:
    """{int64 image id: image entry} of the entries that are complete and have their file,
    and the int64 ids of all entries with a valid id (skipped ones too)."""
    by_number: Dict[int, dict] = {}
    duplicated, listed = set(), set()
    for image in images:
        number = _image_number(image, problems)
        if number is None:
            continue
        listed.add(number)
        if number in by_number or number in duplicated:
            problems.skip("image id appears more than once", "image id %r" % (image["id"],))
            duplicated.add(number)
            continue
        by_number[number] = image
    for number in duplicated:
        first = by_number.pop(number, None)
        if first is not None:
            problems.skip("image id appears more than once", "image id %r" % (first["id"],))
    local = "://" not in image_dir  # Remote folders are not listed file by file.
    usable = {}
    for number, image in by_number.items():
        path = os.path.join(image_dir, image["file_name"])
        if local and not os.path.isfile(path):
            problems.skip(_MISSING_FILE, "image id %r (%s)" % (image["id"], path))
            continue
        usable[number] = image
    return usable, listed


def _image_number(image, problems: _SkippedEntries) -> Optional[int]:
    """The int64 id of a complete image entry; None (and a warning) for a bad one."""
    if not isinstance(image, dict):
        problems.skip("image entry is not an object", repr(image)[:80])
        return None
    name = "image id %r (%s)" % (image.get("id"), image.get("file_name"))
    absent = [key for key in ("id", "file_name", "height", "width") if key not in image]
    if absent:
        problems.skip("image entry lacks %s" % ", ".join(absent), name)
        return None
    if _number(image["height"]) is None or _number(image["width"]) is None or \
            min(_number(image["height"]), _number(image["width"])) <= 0:
        problems.skip("image height and width must be positive numbers", name)
        return None
    try:
        return image_id_to_int64(image["id"])
    except ValueError:
        problems.skip("image id is neither an int64 nor a string", name)
        return None


def _annotations_by_image(annotations: list, images: Dict[int, dict], listed: Set[int],
                          problems: _SkippedEntries) -> Dict[int, list]:
    """{int64 image id: [(bbox [x, y, w, h] floats, category id, annotation)]} of the valid
    annotations of usable images (those of skipped images are dropped quietly)."""
    by_image: Dict[int, list] = {}
    for ann in annotations:
        if not isinstance(ann, dict) or "image_id" not in ann:
            problems.skip("annotation without image_id", "annotation %r" % (ann,))
            continue
        name = "annotation %r of image id %r" % (ann.get("id"), ann["image_id"])
        try:
            number = image_id_to_int64(ann["image_id"])
        except ValueError:
            number = None
        if number not in images:
            if number not in listed:  # Those of skipped images go with them, unnamed.
                problems.skip("annotation for an image id the file does not list", name)
            continue
        bbox = ann.get("bbox")
        bbox = [_number(v) for v in bbox] if isinstance(bbox, (list, tuple)) else []
        if len(bbox) != 4 or None in bbox:
            problems.skip("annotation without a valid bbox [x, y, w, h]", name)
            continue
        category = _number(ann.get("category_id"))
        if category is None or category != int(category):
            problems.skip("annotation without a valid category_id", name)
            continue
        by_image.setdefault(number, []).append((bbox, int(category), ann))
    return by_image


def _number(value) -> Optional[float]:
    """A JSON number, or a string that holds one ("3"); None otherwise (NaN and inf too)."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if np.isfinite(number) else None


def _coco_record(image: dict, annotations: list, image_dir: str) -> ImageRecord:
    """The ImageRecord of a usable image entry and its valid annotations."""
    height, width = int(_number(image["height"])), int(_number(image["width"]))
    if annotations:
        xywh = np.array([bbox for bbox, _, _ in annotations], np.float32).reshape(-1, 4)
        boxes = np.stack([xywh[:, 1], xywh[:, 0], xywh[:, 1] + xywh[:, 3],
                          xywh[:, 0] + xywh[:, 2]], axis=1)
        classes = np.array([category for _, category, _ in annotations], np.int64)
        is_crowd = np.array([bool(a.get("iscrowd", 0)) for _, _, a in annotations], bool)
        area = np.array([_number(a.get("area")) or w * h
                         for (_, _, w, h), (_, _, a) in zip(xywh, annotations)], np.float32)
    else:
        boxes, classes, is_crowd, area = empty_annotations()
    return ImageRecord(_json_id(image["id"]), os.path.join(image_dir, image["file_name"]), height,
                       width, boxes, classes, is_crowd, area)


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
                    **_no_problem())

    return tf.data.Dataset.from_tensor_slices(slices).map(to_raw)


def _no_problem(origin="") -> Dict[str, tf.Tensor]:
    return {"origin": tf.constant(origin) if isinstance(origin, str) else origin,
            "problem": tf.constant(""), "problem_detail": tf.constant("")}


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
    from efficientdet_keras.data.decode import attempt
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
    raw.update(_no_problem(origin))
    raw["problem"] = tf.where(parsed, "", "unparseable_examples")
    raw["problem_detail"] = tf.where(
        parsed, "", "bytes that are not a tf.Example, or a feature of the wrong type")
    return raw


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
    raw.update(_no_problem(tf.strings.join(["TFRecord file ", path])))
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
