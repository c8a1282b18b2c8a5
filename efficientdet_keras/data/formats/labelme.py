"""LabelMe JSON: one file per image, written beside it by the LabelMe annotation tool.

    {"imagePath": "a.jpg", "imageHeight": 480, "imageWidth": 640,
     "shapes": [{"label": "cat", "shape_type": "rectangle", "points": [[x1, y1], [x2, y2]]},
                {"label": "dog", "shape_type": "polygon", "points": [[x, y], ...]}]}

A rectangle's two corners (in either order) are its box; a polygon's box is the one around
its points, and a circle's (centre and a point on it) the square around it. Points, lines and
line strips have no box: they are left out, counted in one warning per file.
"""

import json
import os
from typing import List, Optional

from absl import logging

from efficientdet_keras.data.formats.image_header import IMAGE_EXTENSIONS_EITHER_CASE
from efficientdet_keras.data.formats.named_boxes import NamedBoxes, corners_box

_BOX_SHAPES = ("rectangle", "polygon", "circle")
# LabelMe writes "version", "flags" and then "shapes" first.
_SNIFFED_CHARACTERS = 4096
_IMAGE_EXTENSIONS = IMAGE_EXTENSIONS_EITHER_CASE


def is_labelme_file(path: str) -> bool:
    """Whether a .json file is a LabelMe annotation (a mapping with a "shapes" list). Its first
    bytes are looked at first, so that a large COCO file is not parsed to say no."""
    try:
        with open(path, encoding="utf-8-sig") as f:
            head = f.read(_SNIFFED_CHARACTERS)
            if '"shapes"' not in head or '"annotations"' in head:
                return False
            data = json.loads(head + f.read())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and isinstance(data.get("shapes"), list)


def labelme_files(folder: str) -> List[str]:
    """The LabelMe JSON files of a folder, sorted; [] when its first .json is not one."""
    files = sorted(os.path.join(folder, n) for n in os.listdir(folder)
                   if n.lower().endswith(".json"))
    return files if files and is_labelme_file(files[0]) else []


def read_labelme_file(path: str) -> NamedBoxes:
    """One image's file, size and boxes.

    Raises:
      ValueError naming the file for malformed JSON, a missing image size, or a shape without
      a label or with points that are not numbers.
    """
    try:
        with open(path, encoding="utf-8-sig") as f:
            data = json.load(f)
        height, width = int(data["imageHeight"]), int(data["imageWidth"])
    except (OSError, ValueError) as e:
        raise ValueError("%s is not a LabelMe JSON file: %s" % (path, e)) from None
    except (KeyError, TypeError):
        raise ValueError("%s: a LabelMe file needs imageHeight and imageWidth" % path) from None
    image = NamedBoxes(_image_path(path, data.get("imagePath")), height, width)
    left_out = []
    for index, shape in enumerate(data.get("shapes") or []):
        kind = shape.get("shape_type") or "polygon"
        if kind not in _BOX_SHAPES:
            left_out.append(kind)
            continue
        label = str(shape.get("label") or "").strip()
        try:
            points = [(float(p[0]), float(p[1])) for p in shape["points"]]
            box = _circle_box(points) if kind == "circle" else corners_box(points)
        except (KeyError, TypeError, ValueError, IndexError):
            raise ValueError("%s: shape %d has no points of numbers" % (path, index)) from None
        if not label:
            raise ValueError("%s: shape %d has no label" % (path, index))
        image.objects.append((label, box))
    if left_out:
        logging.warning("%s: %d shapes without a box left out (%s)", path, len(left_out),
                        ", ".join(sorted(set(left_out))))
    return image


def _circle_box(points):
    (cx, cy), (px, py) = points[0], points[1]
    radius = ((px - cx) ** 2 + (py - cy) ** 2) ** 0.5
    return [cy - radius, cx - radius, cy + radius, cx + radius]


def _image_path(json_path: str, image_path: Optional[str]) -> str:
    """The image the file names (relative to it; Windows separators too), else the image of
    the same name beside it."""
    folder = os.path.dirname(json_path)
    if image_path:
        named = os.path.normpath(os.path.join(folder, str(image_path).replace("\\", "/")))
        if os.path.isfile(named):
            return named
    stem = os.path.splitext(json_path)[0]
    beside = next((stem + ext for ext in _IMAGE_EXTENSIONS if os.path.isfile(stem + ext)), None)
    return beside or os.path.join(folder, os.path.basename(str(image_path or "")))
