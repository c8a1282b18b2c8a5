"""KITTI object labels (the 2D boxes): one text file per image, a line per object,

    type truncated occluded alpha left top right bottom height width length x y z rotation_y [score]

with the class name first and the box in pixels; `DontCare` boxes mark regions left unlabelled,
not objects. KITTI's own layout keeps the labels in label_2/ and the images in image_2/;
datumaro writes that under each split's folder, labelformat and FiftyOne write the labels into
a folder of their own with the images elsewhere. A label file names its image only by its own
name, so the image is the dataset folder's image of that stem (`ImageIndex`).
"""

import os
from typing import List, Optional, Tuple

from absl import logging

from efficientdet_keras.data.formats.named_boxes import NamedBoxes, header_size

# The region type KITTI marks as not labelled; its boxes are left out.
DONT_CARE = "DontCare"
_FIELDS = (15, 16)  # Without and with the detection score.


def is_kitti_line(line: str) -> bool:
    """Whether a line is a KITTI object: a name and 14 or 15 numbers."""
    fields = line.split()
    if len(fields) not in _FIELDS or _is_number(fields[0]):
        return False
    return all(_is_number(f) for f in fields[1:])


def is_kitti_folder(folder: str, sample: int = 5) -> bool:
    """Whether a folder's .txt files are KITTI labels: the first line of each of the first
    `sample` non-empty ones is a KITTI object."""
    seen = 0
    for name in sorted(os.listdir(folder)):
        if not name.lower().endswith(".txt"):
            continue
        line = _first_line(os.path.join(folder, name))
        if line is None:
            continue
        if not is_kitti_line(line):
            return False
        seen += 1
        if seen == sample:
            break
    return seen > 0


def read_kitti_folder(folder: str, index) -> Tuple[List[NamedBoxes], int]:
    """The images of a folder of KITTI label files, and how many DontCare regions were left
    out. `index`: the dataset folder's `ImageIndex`, which finds each file's image by name.

    Skipped with a warning naming the file: a label file without an image of its name, an image
    whose size cannot be read, a line that is not a KITTI object (named with its number).
    """
    images, dont_care = [], 0
    for name in sorted(os.listdir(folder)):
        if not name.lower().endswith(".txt"):
            continue
        label_file = os.path.join(folder, name)
        stem = os.path.splitext(name)[0]
        image = index.image_for_stem(stem, folder)
        if image is None:
            logging.warning("%s: no image %s.* in %s, skipping it", label_file, stem, index.root)
            continue
        size = header_size(image, "its labels %s" % label_file)
        if size is None:
            continue
        objects, skipped_regions = _objects(label_file)
        dont_care += skipped_regions
        images.append(NamedBoxes(image, size[0], size[1], objects))
    return images, dont_care


def _objects(label_file: str) -> Tuple[List[Tuple[str, List[float]]], int]:
    objects, dont_care = [], 0
    with open(label_file, encoding="utf-8-sig") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            if not is_kitti_line(line):
                logging.warning("%s:%d: not a KITTI object (a name and 14 numbers), skipping "
                                "%r", label_file, number, line.strip()[:80])
                continue
            fields = line.split()
            if fields[0] == DONT_CARE:
                dont_care += 1
                continue
            left, top, right, bottom = (float(v) for v in fields[4:8])
            objects.append((fields[0], [top, left, bottom, right]))
    return objects, dont_care


def _first_line(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8-sig") as f:
            return next((line for line in f if line.strip()), None)
    except (OSError, UnicodeDecodeError):
        return None


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
