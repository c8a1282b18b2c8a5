"""Label Studio's own exports of rectangle labels: JSON (what its Export button gives: a list of
tasks, each with its `data` and `annotations`, each annotation a `result` list) and JSON-MIN (a
list of tasks flattened to the image and its labels).

A rectangle is `x`, `y`, `width`, `height` in percent of the image (`original_width`,
`original_height`), turned by `rotation` degrees clockwise about its top-left corner; a turned
one becomes the upright box around it. A task's image is named as Label Studio stored it
(`/data/upload/3/<8 hex digits>-cat.jpg`, `/data/local-files/?d=photos/cat.jpg`, a URL):
the image of that file name in the dataset folder (`ImageIndex`).
"""

import math
import os
import re
from typing import List, Optional, Tuple

from absl import logging

from efficientdet_keras.data.formats.named_boxes import NamedBoxes, header_size

_RECTANGLE = "rectanglelabels"
# What Label Studio puts before an uploaded file's name: 8 hex digits and a dash.
_UPLOAD_PREFIX = re.compile(r"[0-9a-f]{8}-")


def is_label_studio_export(data) -> bool:
    """Whether parsed JSON is a Label Studio JSON or JSON-MIN export: a list of tasks, the
    first with `data` and `annotations`, or (JSON-MIN) an `id` and a list of rectangles."""
    if not isinstance(data, list) or not data or not isinstance(data[0], dict):
        return False
    task = data[0]
    if isinstance(task.get("data"), dict) and isinstance(task.get("annotations"), list):
        return True
    return "id" in task and any(_is_rectangle_list(v) for v in task.values())


def read_label_studio_export(path: str, data: list, index) -> Tuple[List[NamedBoxes], int]:
    """The images of an export's tasks, and how many tasks were left out.

    A task's boxes are those of its first annotation that was not cancelled (its rectangles;
    other result types are not boxes). Left out with a warning naming the file and the task id:
    a task whose image the dataset folder does not hold, or whose size is not known.
    """
    images, left_out = [], 0
    for task in data:
        task_id = task.get("id") if isinstance(task, dict) else None
        named, rectangles = _image_and_rectangles(task) if isinstance(task, dict) else (None, [])
        image = _image_file(named, index, os.path.dirname(path)) if named else None
        if image is None:
            logging.warning("%s: task %s: no image %s in %s, leaving it out", path, task_id,
                            named, index.root)
            left_out += 1
            continue
        size = _size(rectangles) or header_size(image, "task %s of %s" % (task_id, path))
        if size is None:
            left_out += 1
            continue
        height, width = size
        objects = [(r[_RECTANGLE][0], _box(r, height, width)) for r in rectangles
                   if r.get(_RECTANGLE)]
        images.append(NamedBoxes(image, height, width, objects))
    return images, left_out


def _image_and_rectangles(task: dict) -> Tuple[Optional[str], List[dict]]:
    """The image a task names and its rectangles' values (original size included)."""
    if isinstance(task.get("data"), dict):  # JSON
        named = next((v for v in task["data"].values() if isinstance(v, str)), None)
        annotation = next((a for a in task.get("annotations") or []
                           if isinstance(a, dict) and not a.get("was_cancelled")), {})
        rectangles = [dict(r["value"], original_width=r.get("original_width"),
                           original_height=r.get("original_height"))
                      for r in annotation.get("result") or []
                      if isinstance(r, dict) and r.get("type") == _RECTANGLE
                      and isinstance(r.get("value"), dict)]
        return named, rectangles
    named = next((v for k, v in task.items() if isinstance(v, str) and k not in (
        "annotator", "created_at", "updated_at")), None)  # JSON-MIN
    rectangles = next((v for v in task.values() if _is_rectangle_list(v)), [])
    return named, rectangles


def _is_rectangle_list(value) -> bool:
    return isinstance(value, list) and bool(value) and all(
        isinstance(v, dict) and _RECTANGLE in v for v in value)


def _image_file(named: str, index, near: str) -> Optional[str]:
    """The dataset's image of the name Label Studio stored (query strings and upload
    prefixes aside: /data/local-files/?d=a/cat.jpg is cat.jpg)."""
    name = named.split("?d=")[-1].split("?")[0]
    found = index.resolve(name, near)
    upload = _UPLOAD_PREFIX.match(os.path.basename(name))
    if found is None and upload:
        found = index.resolve(os.path.basename(name)[upload.end():], near)
    return found


def _size(rectangles: List[dict]) -> Optional[Tuple[int, int]]:
    for r in rectangles:
        if r.get("original_width") and r.get("original_height"):
            return int(r["original_height"]), int(r["original_width"])
    return None


def _box(rectangle: dict, height: int, width: int) -> List[float]:
    """[ymin, xmin, ymax, xmax] in pixels of a rectangle in percent, turned about its corner."""
    x, y = rectangle["x"] * width / 100.0, rectangle["y"] * height / 100.0
    w, h = rectangle["width"] * width / 100.0, rectangle["height"] * height / 100.0
    turn = math.radians(rectangle.get("rotation") or 0.0)
    cos, sin = math.cos(turn), math.sin(turn)
    xs = [x + dx * cos - dy * sin for dx, dy in ((0, 0), (w, 0), (w, h), (0, h))]
    ys = [y + dx * sin + dy * cos for dx, dy in ((0, 0), (w, 0), (w, h), (0, h))]
    return [max(0.0, min(ys)), max(0.0, min(xs)), min(float(height), max(ys)),
            min(float(width), max(xs))]
