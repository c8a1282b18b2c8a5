"""YOLO label files into ImageRecords, with the images they belong to.

Layout read (the one Ultralytics and Roboflow's "YOLOv5/v8" exports write; the data.yaml
naming the images is read by `data.formats.yolo_yaml`):
  <root>/images/<split>/a.jpg the images (any folder depth)
  <root>/labels/<split>/a.txt one object per line: `class cx cy w h`, 0-based class, centre and
                              size normalised to 0..1 (or `class x1 y1 x2 y2 ...`, a polygon)

An image's label file is found by Ultralytics's rule (`label_path_for`). An image without a
label file, or with an empty one, is a background image. Bad label lines, unreadable images
and label files without their image are skipped with a warning naming the file (and line).
"""

import collections
import os
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np
from absl import logging

from efficientdet_keras.data.formats.image_header import (displayed_to_stored,
                                                          stored_size_and_orientation)
from efficientdet_keras.data.formats.records import ImageRecord, empty_annotations
from efficientdet_keras.data.formats.image_header import IMAGE_EXTENSIONS
from efficientdet_keras.data.formats.image_signatures import known_format, unreadable_formats_line

# Coordinates may overshoot 0..1 by this much (rounding in exporters, boxes drawn up to the
# border) and are clipped; beyond it the line is taken for a mistake (pixels written instead
# of fractions, a wrong image size) and skipped.
_COORDINATE_TOLERANCE = 0.01

# labelImg and YOLO-mark keep the class names in the labels folder: not a label file.
_NOT_LABEL_FILES = ("classes.txt",)

_WRONG_FIELDS = "label line with the wrong number of fields"
_NOT_A_NUMBER = "label line with a value that is not a number"
_CLASS_RANGE = "class id out of range"
_OUTSIDE = "coordinates outside the image"
_EMPTY_BOX = "box of zero or negative size"
_BAD_IMAGE = "image cannot be opened"
_BAD_LABEL_FILE = "label file cannot be read"
_ORPHAN = "label file without its image"
# Named warnings per kind of problem; the rest are counted in the summary line.
_WARNINGS_PER_KIND = 20


def label_path_for(image_path: str) -> str:
    """The label file of an image: the last `images` folder of its path becomes `labels` and
    the extension `.txt` (images/train/a.jpg -> labels/train/a.txt); an image with no `images`
    folder in its path has its label file beside it."""
    folder, name = os.path.split(image_path)
    parts = folder.split(os.sep)
    if "images" in parts:
        last = len(parts) - 1 - parts[::-1].index("images")
        parts[last] = "labels"
        folder = os.sep.join(parts)
    return os.path.join(folder, os.path.splitext(name)[0] + ".txt")


def orphan_label_files(image_paths: Sequence[str]) -> List[str]:
    """Label files with no image: the .txt files of the labels folders that belong to the
    images' folders, whose image is neither in `image_paths` nor on disk (any image extension).

    Only folders under an `images` folder are checked: label files that sit beside their images
    share the folder with other text files (split lists, notes). classes.txt is not a label file.
    """
    return [label for label, _ in _orphans(image_paths)]


def load_yolo_records(image_paths: Sequence[str], num_classes: int,
                      skipped: Optional[collections.Counter] = None,
                      start_id: int = 1, keypoint_fields: int = 0,
                      class_ids: Optional[Sequence[int]] = None) -> List[ImageRecord]:
    """Reads images and their YOLO label files into ImageRecords.

    Boxes become [ymin, xmin, ymax, xmax] in pixels, class c becomes c + 1 (ids 1..num_classes),
    is_crowd is False and area the box area. A polygon line (`class x1 y1 ... xn yn`, n >= 3:
    an odd field count of 7 or more, e.g. an oriented box's 4 corners) becomes the box enclosing
    its points. The image size comes from the file header (pixels are not decoded). Image ids are
    start_id + the image's index in `image_paths`, so they stay the same when others are skipped.

    EXIF orientation: Ultralytics labels an image as displayed (rotated by its EXIF orientation
    tag), while this package decodes the stored pixels, unrotated. Records keep the stored size
    and the boxes are mapped from the displayed image onto the stored one (all 8 orientations:
    rotations and mirrors keep boxes axis-aligned), read from the header alone.

    Skipped with a warning naming the label file and line, counted by kind in `skipped`: a line
    without 5 fields or a polygon's, a value that is not a finite number, a class id that is not
    a whole number in 0..num_classes-1, a coordinate more than 0.01 outside 0..1 (those
    within it are clipped), a box of zero or negative size. Skipped with a warning naming
    the file: an image PIL cannot open, a label file that cannot be read (its image too: reading
    it as background would teach that its objects are background), a label file without its
    image (`orphan_label_files`). A summary line follows when anything was skipped, and a
    warning when none of the images has a label file (labels kept somewhere else).

    Args:
      image_paths: the images, e.g. one split of `read_yolo_yaml`.
      num_classes: the number of YOLO class ids (len(names)).
      class_ids: the YOLO id of each class in order, when they are not 0..num_classes-1
        (a `names` mapping keyed 1..K, as labelformat writes): class class_ids[i] becomes
        i + 1, and a line with an id not listed is skipped.
      skipped: a Counter that gains the number of skipped entries per kind.
      start_id: the image id of the first image.
      keypoint_fields: for a pose dataset (data.yaml's kpt_shape [K, dims]), K * dims: each
        line is `class cx cy w h` and that many keypoint values, and its box is read.
    """
    positions = {int(c): i for i, c in enumerate(
        range(num_classes) if class_ids is None else class_ids)}
    problems = _Problems()
    records, lines, labelled = [], 0, 0
    for index, image_path in enumerate(image_paths):
        size = _stored_size_and_orientation(image_path, problems)
        if size is None:
            continue
        label_path = label_path_for(image_path)
        if not os.path.isfile(label_path):
            objects = []
        else:
            labelled += 1
            try:
                with open(label_path, encoding="utf-8-sig") as f:
                    text = f.read()
            except (OSError, UnicodeDecodeError) as e:
                problems.skip(_BAD_LABEL_FILE, label_path, "skipping it and its image %s (%s)"
                              % (image_path, e))
                continue
            objects = _objects(text, label_path, positions, problems, keypoint_fields)
            lines += len(text.splitlines())
        records.append(_record(start_id + index, image_path, size, objects))
    for label_path, image_folder in _orphans(image_paths):
        problems.skip(_ORPHAN, label_path, "skipping it: no image %s.* in %s" % (
            os.path.splitext(os.path.basename(label_path))[0], image_folder))
    if records and not labelled:
        logging.warning("None of the %d images has a label file (looked for %s, ...): all are "
                        "read as background images", len(records),
                        label_path_for(records[0].path))
    if problems.unreadable_formats:
        raise ValueError(unreadable_formats_line(problems.unreadable_formats, len(image_paths)))
    problems.log_summary(len(image_paths), lines)
    if skipped is not None:
        skipped.update(problems.counts)
    return records


class _Problems:
    """Counts what is skipped by kind, warning about the first few of each kind."""

    def __init__(self):
        self.counts: collections.Counter = collections.Counter()
        # (image, format name) of the images in a known format no reader here decodes.
        self.unreadable_formats: List[Tuple[str, str]] = []

    def skip(self, kind: str, where: str, detail: str) -> None:
        self.counts[kind] += 1
        if self.counts[kind] <= _WARNINGS_PER_KIND:
            logging.warning("%s: %s: %s", where, kind, detail)

    def log_summary(self, num_images: int, num_lines: int) -> None:
        if self.counts:
            counts = ", ".join("%d x %s" % (n, kind) for kind, n in sorted(self.counts.items()))
            logging.warning("YOLO labels: skipped %s (of %d images, %d label lines)",
                            counts, num_images, num_lines)


def _orphans(image_paths: Sequence[str]) -> List[Tuple[str, str]]:
    """(label file, the images folder it belongs to) of each label file without its image."""
    listed = {label_path_for(p) for p in image_paths}
    orphans = []
    for image_folder in sorted({os.path.dirname(p) for p in image_paths}):
        label_folder = os.path.dirname(label_path_for(os.path.join(image_folder, "x.jpg")))
        if label_folder == image_folder or not os.path.isdir(label_folder):
            continue
        image_stems = {os.path.splitext(name)[0] for name in _listdir(image_folder)
                       if name.lower().endswith(IMAGE_EXTENSIONS)}
        for name in sorted(_listdir(label_folder)):
            label = os.path.join(label_folder, name)
            if (name.lower().endswith(".txt") and name not in _NOT_LABEL_FILES
                    and label not in listed and os.path.splitext(name)[0] not in image_stems
                    and os.path.isfile(label)):
                orphans.append((label, image_folder))
    return orphans


def _listdir(folder: str) -> List[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


def _stored_size_and_orientation(image_path: str,
                                 problems: _Problems) -> Optional[Tuple[int, int, int]]:
    """(height, width, EXIF orientation 1..8) from the header; None (and a warning) when PIL
    cannot open the file."""
    from PIL import Image
    try:
        return stored_size_and_orientation(image_path)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
        image_format = _known_format_of(image_path)
        if image_format:
            problems.unreadable_formats.append((image_path, image_format))
        else:
            problems.skip(_BAD_IMAGE, image_path, "skipping it (%s)" % e)
        return None


def _known_format_of(image_path: str) -> Optional[str]:
    try:
        with open(image_path, "rb") as f:
            return known_format(f.read(16))
    except OSError:
        return None


def _id_range(positions: Dict[int, int]) -> str:
    ids = sorted(positions)
    if ids == list(range(ids[0], ids[-1] + 1)):
        return "%d..%d" % (ids[0], ids[-1])
    return ", ".join(map(str, ids))


def _objects(text: str, label_path: str, positions: Dict[int, int], problems: _Problems,
             keypoint_fields: int = 0) -> List[Tuple[int, np.ndarray]]:
    """(class position 0..K-1, [x1, y1, x2, y2] normalised) of each good line; a pose
    line's keypoint values (keypoint_fields of them) are left out."""
    objects = []
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if not fields:
            continue
        where = "%s:%d" % (label_path, number)

        def skip(kind, detail):
            problems.skip(kind, where, "skipping %r (%s)" % (line.strip()[:80], detail))

        if keypoint_fields:
            if len(fields) != 5 + keypoint_fields:
                skip(_WRONG_FIELDS, "%d fields; a pose label is `class cx cy w h` and %d "
                     "keypoint values (kpt_shape)" % (len(fields), keypoint_fields))
                continue
            fields = fields[:5]
        polygon = len(fields) >= 7 and len(fields) % 2 == 1
        if len(fields) != 5 and not polygon:
            skip(_WRONG_FIELDS, "%d fields; expected `class cx cy w h` or a polygon "
                 "`class x1 y1 x2 y2 x3 y3 ...`" % len(fields))
            continue
        try:
            values = np.array([float(v) for v in fields], np.float64)
        except ValueError:
            values = None
        if values is None or not np.all(np.isfinite(values)):
            skip(_NOT_A_NUMBER, "every field must be a number")
            continue
        class_id = values[0]
        if class_id != int(class_id) or int(class_id) not in positions:
            skip(_CLASS_RANGE, "class %s; the dataset's class ids are %s"
                 % (fields[0], _id_range(positions)))
            continue
        class_id = positions[int(class_id)]
        if polygon:
            points = values[1:].reshape(-1, 2)
        else:
            cx, cy, w, h = values[1:]
            points = np.array([[cx - w / 2, cy - h / 2], [cx + w / 2, cy + h / 2]])
        if np.any(points < -_COORDINATE_TOLERANCE) or np.any(points > 1 + _COORDINATE_TOLERANCE):
            skip(_OUTSIDE, "%s reaches %s; coordinates are fractions 0..1 of the image size"
                 % ("the polygon" if polygon else "the box", _extent(points)))
            continue
        points = np.clip(points, 0.0, 1.0)
        if polygon:
            box = np.concatenate([points.min(axis=0), points.max(axis=0)])
        else:
            box = points.reshape(4)
        if box[2] <= box[0] or box[3] <= box[1]:
            skip(_EMPTY_BOX, "width %.6g, height %.6g" % (box[2] - box[0], box[3] - box[1]))
            continue
        objects.append((int(class_id), box))
    return objects


def _extent(points: np.ndarray) -> str:
    low, high = points.min(axis=0), points.max(axis=0)
    return "x %.4g..%.4g, y %.4g..%.4g" % (low[0], high[0], low[1], high[1])


def _record(image_id: int, image_path: str, size: Tuple[int, int, int],
            objects: Iterable[Tuple[int, np.ndarray]]) -> ImageRecord:
    height, width, orientation = size
    objects = list(objects)
    if not objects:
        return ImageRecord(image_id, image_path, height, width, *empty_annotations())
    normalised = displayed_to_stored(np.stack([box for _, box in objects]), orientation)
    x1, y1, x2, y2 = normalised.T
    boxes = np.stack([y1 * height, x1 * width, y2 * height, x2 * width], axis=1)
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    classes = np.array([class_id + 1 for class_id, _ in objects], np.int64)
    return ImageRecord(image_id, image_path, height, width, boxes.astype(np.float32), classes,
                       np.zeros([len(objects)], bool), area.astype(np.float32))
