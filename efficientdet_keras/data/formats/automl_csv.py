"""Google Cloud AutoML Vision's object detection CSV, which TFLite Model Maker also reads: no
header, one row per box, the split first and coordinates as fractions of the image size.

    TRAIN,gs://bucket/salads/a.jpg,Tomato,0.1,0.2,,,0.4,0.6,,
    VALIDATION,images/b.jpg,Salad,0.1,0.2,0.4,0.2,0.4,0.6,0.1,0.6
    TEST,images/c.jpg,,,,,,,,,

A box is two corners (x_min,y_min,,,x_max,y_max,,) or four vertices; a row without a label
is an image without boxes. TRAIN, VALIDATION and TEST are the splits; UNASSIGNED rows (which
AutoML splits at random) are read into train. An image named by a `gs://` address is looked
for by its path below the bucket, then by its file name, beside the CSV and in images/.
"""

import csv
import os
from typing import Dict, List, Optional, Tuple

from efficientdet_keras.data.formats.named_boxes import (NamedBoxes, corners_box,
                                                         first_csv_row, header_size)

SPLIT_COLUMN = {"TRAIN": "train", "VALIDATION": "val", "TEST": "test", "UNASSIGNED": "train"}
_IMAGE_FOLDERS = ("", "images")


def is_automl_csv(path: str) -> bool:
    """Whether a .csv file's first row starts with an AutoML split name."""
    first = first_csv_row(path)
    return len(first) >= 3 and first[0].strip().upper() in SPLIT_COLUMN


def read_automl_csv(path: str) -> Tuple[Dict[str, List[NamedBoxes]], int]:
    """The images of each split, in the order of their first row, and how many images were
    UNASSIGNED (read into train). An image whose size cannot be read is skipped with a warning.

    Raises:
      ValueError naming the file and line for an unknown split, a coordinate that is not a
      fraction 0..1, a box with neither two corners nor four vertices, or one image in two
      splits.
    """
    folder = os.path.dirname(os.path.abspath(path))
    images: Dict[str, Tuple[str, Optional[NamedBoxes]]] = {}
    unassigned = set()
    with open(path, encoding="utf-8-sig", newline="") as f:
        for line, row in enumerate(csv.reader(f), start=1):
            if not any(cell.strip() for cell in row):
                continue
            where = "%s, line %d" % (path, line)
            row = [cell.strip() for cell in row] + [""] * (11 - len(row))
            split = SPLIT_COLUMN.get(row[0].upper())
            if split is None:
                raise ValueError("%s: %r is not a split (TRAIN, VALIDATION, TEST or UNASSIGNED)"
                                 % (where, row[0]))
            name = row[1]
            if name not in images:
                image_path = _image_path(folder, name)
                size = header_size(image_path, "its rows of %s" % path)
                images[name] = (split, NamedBoxes(image_path, *size) if size else None)
                if row[0].upper() == "UNASSIGNED":
                    unassigned.add(name)
            elif images[name][0] != split:
                raise ValueError("%s: %s is in %s here and in %s on an earlier line"
                                 % (where, name, split, images[name][0]))
            image = images[name][1]
            if image is None or not row[2]:
                continue
            image.objects.append((row[2], _box(row[3:11], image, where)))
    splits: Dict[str, List[NamedBoxes]] = {}
    for split, image in images.values():
        if image is not None:
            splits.setdefault(split, []).append(image)
    return splits, len(unassigned)


def _box(cells: List[str], image: NamedBoxes, where: str) -> List[float]:
    """[ymin, xmin, ymax, xmax] in pixels of the corners or vertices of a row."""
    try:
        values = [float(c) if c else None for c in cells]
    except ValueError:
        raise ValueError("%s: a coordinate that is not a number" % where) from None
    if all(v is not None for v in values):
        points = list(zip(values[0::2], values[1::2]))
    elif None not in (values[0], values[1], values[4], values[5]) and \
            values[2:4] == [None, None] and values[6:8] == [None, None]:
        points = [(values[0], values[1]), (values[4], values[5])]
    else:
        raise ValueError("%s: a box is x_min,y_min,,,x_max,y_max,, or four vertices x,y" % where)
    if any(not 0 <= v <= 1 for point in points for v in point):
        raise ValueError("%s: coordinates are fractions 0..1 of the image size" % where)
    return corners_box([(x * image.width, y * image.height) for x, y in points])


def _image_path(folder: str, name: str) -> str:
    """The image a row names: a local path (relative to the CSV), or a gs:// address's path
    below its bucket, then its file name, beside the CSV or in images/."""
    name = name.replace("\\", "/")
    if name.startswith("gs://"):
        below_bucket = name[len("gs://"):].split("/", 1)[-1]
        tails = [below_bucket, os.path.basename(below_bucket)]
    else:
        tails = [name, os.path.basename(name)]
    candidates = [os.path.join(folder, sub, tail) for tail in tails for sub in _IMAGE_FOLDERS]
    return next((c for c in candidates if os.path.isfile(c)), candidates[0])
