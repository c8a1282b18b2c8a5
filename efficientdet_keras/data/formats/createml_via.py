"""Two JSON layouts that hold a whole split in one file, with class names on their boxes:

CreateML (Apple's Create ML; Roboflow's and supervision's `createml` export): a list of
    {"image": "a.jpg", "annotations": [{"label": "cat", "coordinates":
     {"x": centre x, "y": centre y, "width": w, "height": h}}]}   (pixels)
VIA (the VGG Image Annotator; globox's `via_json`): {key: {"filename": "a.jpg", "regions":
    [{"shape_attributes": {"name": "rect", "x", "y", "width", "height"} (or a polygon, circle,
    ellipse), "region_attributes": {"label": "cat"}}]}}, or a VIA project holding that under
    "_via_img_metadata". A region's class is its one attribute, or the one named label, class,
    name, category, type or label_id.

Images are found by their file names: beside the file, else in the dataset folder (`ImageIndex`).
"""

import os
from typing import List, Optional, Tuple

from absl import logging

from efficientdet_keras.data.formats.named_boxes import NamedBoxes, corners_box, header_size

_CLASS_KEYS = ("label", "class", "name", "category", "type", "label_id")


def is_createml(data) -> bool:
    return isinstance(data, list) and bool(data) and all(
        isinstance(item, dict) and isinstance(item.get("image"), str)
        and isinstance(item.get("annotations"), list) for item in data[:20])


def via_images(data) -> Optional[dict]:
    """The {key: image entry} of a VIA export or project, else None."""
    if isinstance(data, dict) and isinstance(data.get("_via_img_metadata"), dict):
        data = data["_via_img_metadata"]
    if not isinstance(data, dict) or not data:
        return None
    entries = list(data.values())[:20]
    if all(isinstance(e, dict) and "filename" in e and "regions" in e for e in entries):
        return data
    return None


def read_createml(path: str, data: list, index) -> List[NamedBoxes]:
    images = []
    for item in data:
        image = _image(path, item["image"], index)
        size = image and header_size(image, "its boxes in %s" % path)
        if not size:
            continue
        objects = []
        for box in item["annotations"]:
            c = box.get("coordinates") if isinstance(box, dict) else None
            if not isinstance(c, dict) or not isinstance(box.get("label"), str):
                logging.warning("%s: %s: a box without a label and coordinates, skipping it",
                                path, item["image"])
                continue
            x, y, w, h = (float(c[k]) for k in ("x", "y", "width", "height"))
            objects.append((box["label"], [y - h / 2, x - w / 2, y + h / 2, x + w / 2]))
        images.append(NamedBoxes(image, size[0], size[1], objects))
    return images


def read_via(path: str, entries: dict, index) -> List[NamedBoxes]:
    images = []
    for entry in entries.values():
        image = _image(path, entry["filename"], index)
        size = image and header_size(image, "its regions in %s" % path)
        if not size:
            continue
        regions = entry["regions"]
        regions = list(regions.values()) if isinstance(regions, dict) else regions
        objects = []
        for region in regions:
            named = _region_box(path, entry["filename"], region)
            if named:
                objects.append(named)
        images.append(NamedBoxes(image, size[0], size[1], objects))
    return images


def _region_box(path: str, file_name: str, region) -> Optional[Tuple[str, List[float]]]:
    shape = region.get("shape_attributes") if isinstance(region, dict) else None
    attributes = region.get("region_attributes") if isinstance(region, dict) else None
    name = _class_name(attributes or {})
    box = _shape_box(shape or {})
    if name is None or box is None:
        logging.warning("%s: %s: a region without a %s, skipping it (%s)", path, file_name,
                        "class attribute" if name is None else "box shape", region)
        return None
    return name, box


def _class_name(attributes: dict) -> Optional[str]:
    texts = {k: v for k, v in attributes.items() if isinstance(v, str) and v}
    if len(texts) == 1:
        return next(iter(texts.values()))
    return next((texts[k] for k in _CLASS_KEYS if k in texts), None)


def _shape_box(shape: dict) -> Optional[List[float]]:
    kind = shape.get("name")
    try:
        if kind == "rect":
            x, y, w, h = (float(shape[k]) for k in ("x", "y", "width", "height"))
            return [y, x, y + h, x + w]
        if kind in ("polygon", "polyline"):
            return corners_box(list(zip(shape["all_points_x"], shape["all_points_y"])))
        if kind == "circle":
            cx, cy, r = float(shape["cx"]), float(shape["cy"]), float(shape["r"])
            return [cy - r, cx - r, cy + r, cx + r]
        if kind == "ellipse":
            cx, cy = float(shape["cx"]), float(shape["cy"])
            rx, ry = float(shape["rx"]), float(shape["ry"])
            return [cy - ry, cx - rx, cy + ry, cx + rx]
    except (KeyError, TypeError, ValueError):
        return None
    return None


def _image(path: str, file_name: str, index) -> Optional[str]:
    image = index.resolve(file_name, os.path.dirname(path))
    if image is None:
        logging.warning("%s: no image %s beside it or in %s, skipping its boxes", path,
                        file_name, index.root)
    return image
