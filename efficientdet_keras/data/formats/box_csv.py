"""The TensorFlow Object Detection CSV: one row per box, images beside the file.

    filename,width,height,class,xmin,ymin,xmax,ymax
    a.jpg,640,480,cat,12,30,200,310

Roboflow exports it as `_annotations.csv` in each split's folder. Coordinates are pixels; a
row whose class and coordinates are empty is an image without boxes.
"""

import csv
import os
from typing import Dict, List

from efficientdet_keras.data.formats.named_boxes import NamedBoxes, first_csv_row

COLUMNS = ("filename", "width", "height", "class", "xmin", "ymin", "xmax", "ymax")


def is_box_csv(path: str) -> bool:
    """Whether a .csv file's header has the columns of this layout."""
    return set(COLUMNS) <= {column.strip().lower() for column in first_csv_row(path)}


def read_box_csv(path: str) -> List[NamedBoxes]:
    """The images of the file, in the order of their first row.

    Raises:
      ValueError naming the file and line for a missing column or a value that is not a
      number, and for one image given two sizes.
    """
    folder = os.path.dirname(os.path.abspath(path))
    images: Dict[str, NamedBoxes] = {}
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.DictReader(f)
        header = {name.strip().lower(): name for name in reader.fieldnames or []}
        missing = [c for c in COLUMNS if c not in header]
        if missing:
            raise ValueError("%s: no column %s (the header must name %s)"
                             % (path, ", ".join(missing), ",".join(COLUMNS)))
        for row in reader:
            line = reader.line_num
            value = {c: (row.get(header[c]) or "").strip() for c in COLUMNS}
            try:
                width, height = int(float(value["width"])), int(float(value["height"]))
                name = value["filename"].replace("\\", "/")
                image = images.setdefault(name, NamedBoxes(os.path.join(folder, name),
                                                           height, width))
                if (image.height, image.width) != (height, width):
                    raise ValueError("gives %s the size %dx%d, an earlier line %dx%d"
                                     % (name, width, height, image.width, image.height))
                if not value["class"] and not value["xmin"]:
                    continue
                xmin, ymin, xmax, ymax = (float(value[c]) for c in ("xmin", "ymin", "xmax", "ymax"))
            except ValueError as e:
                raise ValueError("%s, line %d: %s" % (path, line, e)) from None
            if not value["class"]:
                raise ValueError("%s, line %d: a box without a class" % (path, line))
            image.objects.append((value["class"], [ymin, xmin, ymax, xmax]))
    return list(images.values())
