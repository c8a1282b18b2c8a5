"""COCO instances JSON read leniently into ImageRecords, skipping bad entries with warnings."""

import collections
import os
from typing import Dict, List, Optional, Set, Tuple

import numpy as np
from absl import logging

from efficientdet_keras.data.formats.coco_json import json_image_id, parse_coco_file
from efficientdet_keras.data.formats.image_header import (QUARTER_TURNS, displayed_to_stored,
                                                          stored_size_and_orientation)
from efficientdet_keras.data.formats.image_ids import image_id_to_int64
from efficientdet_keras.data.formats.records import ImageRecord, empty_annotations


def load_coco_records(annotation_file: str, image_dir: str,
                      skipped: Optional[collections.Counter] = None,
                      category_ids: Optional[Set[int]] = None) -> List[ImageRecord]:
    """Reads a COCO instances JSON into ImageRecords (images without annotations included).

    COCO boxes [x, y, w, h] become [ymin, xmin, ymax, xmax]. Category ids are
    kept as they are (COCO's 1..90); see `data.label_maps` to remap. Image ids are
    kept as the file spells them (int or string); numbers written as strings
    ("3", "12.5") in bbox and category_id are read as numbers. Each annotation's
    segmentation (None when it has none) is kept as it is, for the COCO JSON written
    from the records.

    Bad entries are skipped, each with a warning naming the file and the image id
    or file name: an image entry without id, file_name or a positive height and
    width; an image id that appears twice (every entry with it: their annotations
    cannot be told apart); an image file missing from `image_dir`; an annotation
    without a valid bbox or category_id, with a category_id `category_ids` lacks, or for an
    image id the file does not list. A file_name with Windows separators (sub\\a.jpg) is read
    as a path. (The evaluator's ground truth stays strict:
    `data.formats.coco_json.read_coco_json`.)

    Args:
      skipped: a Counter that gains the number of skipped entries per kind.
      category_ids: the ids the file's categories list (None: any id is taken).

    Raises:
      FileNotFoundError naming the file; ValueError for malformed JSON, when the file lists
      images but none of them can be used (naming `image_dir` when their files are missing),
      or when its boxes are corners [x1, y1, x2, y2] rather than COCO's [x, y, w, h].
    """
    data = parse_coco_file(annotation_file)
    problems = _SkippedEntries(annotation_file)
    images, listed = _usable_images(data["images"], image_dir, problems)
    annotations = _annotations_by_image(data["annotations"], images, listed, problems,
                                        category_ids)
    _refuse_corner_boxes(annotation_file, images, annotations)
    if data["images"] and not data["annotations"]:
        logging.warning("%s lists %d images and no annotations: each is read as an image "
                        "without objects", annotation_file, len(data["images"]))
    problems.log_summary(len(data["images"]), len(data["annotations"]))
    if skipped is not None:
        skipped.update(problems.counts)
    if data["images"] and not images:
        missing = problems.counts[_MISSING_FILE]
        raise ValueError("None of the %d images of %s can be used%s" % (
            len(data["images"]), annotation_file,
            "; %d image files are not in the image directory %s" % (missing, image_dir)
            if missing else " (see the warnings above)"))
    turns = _exif_turns(images, image_dir) if "://" not in image_dir else {}
    records = [_coco_record(image, annotations.get(number, []), image_dir, turns.get(number))
               for number, image in images.items()]
    _say_exif_turns(annotation_file, turns)
    return records


def _exif_turns(images: Dict[int, dict], image_dir: str) -> Dict[int, Tuple[int, int, int]]:
    """{image number: (stored height, stored width, EXIF orientation)} of the images whose
    header carries an orientation other than 1 (a file PIL cannot open is the pipeline's to
    name)."""
    from PIL import Image
    turned = {}
    for number, image in images.items():
        try:
            header = stored_size_and_orientation(image_path(image_dir, image["file_name"]))
        except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):
            continue
        if header[2] != 1:
            turned[number] = header
    return turned


def _labelled_as_displayed(image: dict, header: Optional[Tuple[int, int, int]]) -> bool:
    """Whether an entry's height and width are those of its image turned by its EXIF
    orientation (a quarter turn swaps them): its boxes were drawn on the image as displayed."""
    if header is None or header[2] not in QUARTER_TURNS or header[0] == header[1]:
        return False
    return (int(_number(image["height"])), int(_number(image["width"]))) == (header[1], header[0])


def _say_exif_turns(annotation_file: str, turns: Dict[int, Tuple[int, int, int]]) -> None:
    quarter = sum(1 for h in turns.values() if h[2] in QUARTER_TURNS)
    other = len(turns) - quarter
    if quarter:
        logging.info("%s: %d images carry an EXIF quarter turn; where the file gives their size "
                     "as displayed, their boxes are mapped onto the stored pixels",
                     annotation_file, quarter)
    if other:
        logging.warning("%s: %d images carry an EXIF mirror or half turn, which leaves their "
                        "size as it is: their boxes are read in the stored pixels, as the file "
                        "cannot say whether the labelling tool showed them turned",
                        annotation_file, other)


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
        path = image_path(image_dir, image["file_name"])
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


def image_path(image_dir: str, file_name) -> str:
    """An image entry's file, its name's Windows separators read as separators; a path that is
    gone (absolute on the labelling machine, or reaching out of the export) is the image of
    its file name in `image_dir`, where the export put its copy, when that is there."""
    name = str(file_name).replace("\\", "/")
    path = os.path.join(image_dir, name)
    if "://" not in image_dir and not os.path.isfile(path):
        copy = os.path.join(image_dir, os.path.basename(name))
        if os.path.isfile(copy):
            return copy
    return path


# Corner boxes are said to be what a file holds when at least this share of its boxes reach
# past their image as [x, y, w, h] and every one of those fits as [x1, y1, x2, y2].
_CORNER_SHARE = 0.5
_PIXEL_SLACK = 1.0


def _refuse_corner_boxes(annotation_file: str, images: Dict[int, dict],
                         annotations: Dict[int, list]) -> None:
    """Raises ValueError when the file's boxes are [x1, y1, x2, y2] corners: clipping each to
    its image, one warning per box, would train on wrong boxes."""
    overflowing = fit_as_corners = total = 0
    for number, entries in annotations.items():
        height, width = _number(images[number]["height"]), _number(images[number]["width"])
        for (x, y, w, h), _, _ in entries:
            total += 1
            if x + w <= width + _PIXEL_SLACK and y + h <= height + _PIXEL_SLACK:
                continue
            overflowing += 1
            if x < w <= width + _PIXEL_SLACK and y < h <= height + _PIXEL_SLACK:
                fit_as_corners += 1
    if total and overflowing >= _CORNER_SHARE * total and fit_as_corners == overflowing:
        raise ValueError("%s: %d of its %d boxes reach past their image as COCO's [x, y, width, "
                         "height] and every one of them fits as corners [x1, y1, x2, y2]: the "
                         "file holds corner boxes; write bbox as [x1, y1, x2 - x1, y2 - y1]"
                         % (annotation_file, overflowing, total))


def _annotations_by_image(annotations: list, images: Dict[int, dict], listed: Set[int],
                          problems: _SkippedEntries,
                          category_ids: Optional[Set[int]] = None) -> Dict[int, list]:
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
        if category_ids is not None and int(category) not in category_ids:
            problems.skip("category_id %d is not among the file's categories" % category, name)
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


def _coco_record(image: dict, annotations: list, image_dir: str,
                 header: Optional[Tuple[int, int, int]] = None) -> ImageRecord:
    """The ImageRecord of a usable image entry and its valid annotations; header: the stored
    height, width and EXIF orientation of an image that has one."""
    height, width = int(_number(image["height"])), int(_number(image["width"]))
    as_displayed = _labelled_as_displayed(image, header)
    if annotations:
        xywh = np.array([bbox for bbox, _, _ in annotations], np.float32).reshape(-1, 4)
        boxes = np.stack([xywh[:, 1], xywh[:, 0], xywh[:, 1] + xywh[:, 3],
                          xywh[:, 0] + xywh[:, 2]], axis=1)
        if as_displayed:
            corners = boxes[:, [1, 0, 3, 2]] / np.array([width, height, width, height],
                                                        np.float32)
            x1, y1, x2, y2 = displayed_to_stored(corners, header[2]).T
            boxes = np.stack([y1 * header[0], x1 * header[1], y2 * header[0], x2 * header[1]],
                             axis=1).astype(np.float32)
        classes = np.array([category for _, category, _ in annotations], np.int64)
        is_crowd = np.array([bool(a.get("iscrowd", 0)) for _, _, a in annotations], bool)
        area = np.array([_number(a.get("area")) or w * h
                         for (_, _, w, h), (_, _, a) in zip(xywh, annotations)], np.float32)
    else:
        boxes, classes, is_crowd, area = empty_annotations()
    if as_displayed:
        height, width = header[0], header[1]
    return ImageRecord(json_image_id(image["id"]), image_path(image_dir, image["file_name"]),
                       height, width, boxes, classes, is_crowd, area,
                       segmentation=[a.get("segmentation") for _, _, a in annotations])
