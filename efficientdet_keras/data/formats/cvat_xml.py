"""CVAT for images 1.1: one XML of every image and its shapes, as CVAT exports a task, a job or
a project (`annotations.xml`, images in `images/`) and as datumaro writes it (one `<subset>.xml`
per split, images in `images/<subset>/`).

    <annotations>
      <meta><task><labels><label><name>cat</name></label>...</labels></task></meta>
      <image id="0" name="a.jpg" width="640" height="480" subset="train">
        <box label="cat" xtl="12.5" ytl="30" xbr="200" ybr="310" rotation="0" occluded="0"/>
        <polygon label="dog" points="10,20;40,20;30,60"/>
      </image>
    </annotations>

Coordinates are pixels from 0. A box turned by `rotation` (degrees about its centre) becomes the
upright box around it; a polygon's, an ellipse's or a mask's box is the one around it.
Polylines, points, cuboids and skeletons are left out, counted in one warning per file. The labels of
`<meta>` are the classes, in their order; a label used but not declared is added after them.
CVAT for video (`<track>` elements) is refused: its boxes belong to frames, not to images.
"""

import math
import os
from typing import Dict, List, Optional, Tuple

from absl import logging
from defusedxml import ElementTree

from efficientdet_keras.data.formats.named_boxes import NamedBoxes, corners_box

_LEFT_OUT = ("polyline", "points", "cuboid", "skeleton", "tag")
_IMAGE_FOLDERS = ("images", "JPEGImages", "")


def is_cvat_file(path: str) -> bool:
    """Whether an .xml file is CVAT's: its root element is <annotations> (VOC's is
    <annotation>), read from the first bytes."""
    try:
        with open(path, "rb") as f:
            head = f.read(2048).decode("utf-8", "replace")
    except OSError:
        return False
    return "<annotations" in head


def read_cvat_file(path: str) -> Tuple[List[str], Dict[str, List[NamedBoxes]]]:
    """The file's class names (declared order) and its images by subset ("" for none).

    Raises:
      ValueError naming the file, and the image, for malformed XML, CVAT for video, an image
      without a name or size, or a shape without a label or with coordinates that are not
      numbers.
    """
    try:
        root = ElementTree.parse(path).getroot()
    except (OSError, ElementTree.ParseError) as e:
        raise ValueError("%s is not a CVAT XML file: %s" % (path, e)) from None
    if root.tag != "annotations":
        raise ValueError("%s: a CVAT XML file's root is <annotations>, not <%s>" % (path, root.tag))
    if root.find("track") is not None:
        raise ValueError("%s is CVAT for video 1.1 (<track> elements); export the task as "
                         "'CVAT for images 1.1' to train on it" % path)
    labels = [_text(label.find("name")) for label in root.iter("label")
              if _text(label.find("name"))]
    labels = list(dict.fromkeys(labels))
    subsets: Dict[str, List[NamedBoxes]] = {}
    left_out: Dict[str, int] = {}
    for image in root.iter("image"):
        name = image.get("name")
        where = "%s, image %s" % (path, name or image.get("id"))
        try:
            height, width = int(float(image.get("height"))), int(float(image.get("width")))
        except (TypeError, ValueError):
            raise ValueError("%s has no height and width" % where) from None
        if not name:
            raise ValueError("%s has no name" % where)
        boxes = NamedBoxes(_image_path(path, name, image.get("subset") or ""), height, width)
        for shape in image:
            if shape.tag in _LEFT_OUT:
                left_out[shape.tag] = left_out.get(shape.tag, 0) + 1
                continue
            box = _shape_box(shape, where)
            if box is None:
                continue
            label = (shape.get("label") or "").strip()
            if not label:
                raise ValueError("%s: a <%s> without a label" % (where, shape.tag))
            if label not in labels:
                labels.append(label)
            boxes.objects.append((label, box))
        subsets.setdefault(image.get("subset") or "", []).append(boxes)
    if left_out:
        logging.warning("%s: shapes without a box left out (%s)", path, ", ".join(
            "%d %s" % (count, kind) for kind, count in sorted(left_out.items())))
    return labels, subsets


def _shape_box(shape, where: str) -> Optional[List[float]]:
    """[ymin, xmin, ymax, xmax] of a box, polygon, ellipse or mask element; None for other
    tags."""
    try:
        if shape.tag == "box":
            x1, y1, x2, y2 = (float(shape.get(k)) for k in ("xtl", "ytl", "xbr", "ybr"))
            angle = float(shape.get("rotation") or 0)
            corners = [(x1, y1), (x2, y1), (x2, y2), (x1, y2)]
            return corners_box(_turned(corners, angle) if angle else corners)
        if shape.tag == "polygon":
            return corners_box([[float(v) for v in point.split(",")]
                                for point in shape.get("points").split(";") if point])
        if shape.tag == "ellipse":
            cx, cy, rx, ry = (float(shape.get(k)) for k in ("cx", "cy", "rx", "ry"))
            return [cy - ry, cx - rx, cy + ry, cx + rx]
        if shape.tag == "mask":
            left, top, width, height = (float(shape.get(k))
                                        for k in ("left", "top", "width", "height"))
            return [top, left, top + height, left + width]
    except (TypeError, ValueError, AttributeError):
        raise ValueError("%s: a <%s> whose coordinates are not numbers" % (where, shape.tag)) \
            from None
    return None


def _turned(corners, degrees: float):
    """The corners turned clockwise (CVAT's sense, y pointing down) about their centre."""
    cx = sum(x for x, _ in corners) / 4
    cy = sum(y for _, y in corners) / 4
    cos, sin = math.cos(math.radians(degrees)), math.sin(math.radians(degrees))
    return [(cx + (x - cx) * cos - (y - cy) * sin, cy + (x - cx) * sin + (y - cy) * cos)
            for x, y in corners]


def _image_path(xml_path: str, name: str, subset: str) -> str:
    """Where the named image is: beside the XML or in images/ (images/<subset>/ or
    images/<file name>/ for datumaro's and a project's export), from the XML's folder or, for
    an XML in annotations/, the dataset's; under the name's own folders or its base name."""
    folder = os.path.dirname(os.path.abspath(xml_path))
    roots = [folder] + ([os.path.dirname(folder)]
                        if os.path.basename(folder) == "annotations" else [])
    name = name.replace("\\", "/")
    stem = os.path.splitext(os.path.basename(xml_path))[0]
    candidates = []
    for root in roots:
        for images in _IMAGE_FOLDERS:
            for sub in dict.fromkeys((subset, stem, "")):
                base = os.path.join(root, images, sub)
                candidates += [os.path.join(base, name),
                               os.path.join(base, os.path.basename(name))]
    found = next((c for c in candidates if os.path.isfile(c)), None)
    return os.path.normpath(found or os.path.join(roots[-1], "images", name))


def _text(element) -> str:
    return (element.text or "").strip() if element is not None else ""
