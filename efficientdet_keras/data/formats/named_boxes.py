"""Images whose boxes carry class names, as labelling tools export them (LabelMe JSON, CVAT
XML, the TensorFlow Object Detection, AutoML Vision and Open Images CSVs): read into
`NamedBoxes`, then numbered into ImageRecords once the dataset's classes are known."""

import dataclasses
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from absl import logging

from efficientdet_keras.data.formats.records import ImageRecord, empty_annotations


@dataclasses.dataclass
class NamedBoxes:
    """One image: its file, its size as the annotation states it, and its objects as
    (class name, [ymin, xmin, ymax, xmax] in pixels); crowd: the indices of the objects that
    box a group (Open Images' IsGroupOf, COCO's iscrowd)."""
    path: str
    height: int
    width: int
    objects: List[Tuple[str, List[float]]] = dataclasses.field(default_factory=list)
    crowd: List[int] = dataclasses.field(default_factory=list)


def object_names(images: Sequence[NamedBoxes]) -> List[str]:
    """The class names the images' objects use, sorted."""
    return sorted({name for image in images for name, _ in image.objects})


def named_records(images: Sequence[NamedBoxes], label_map: Dict[int, str],
                  start_id: int = 1) -> List[ImageRecord]:
    """ImageRecords of the images, ids from start_id in order, classes by name from
    label_map ({model id: name}; every name of the images must be in it)."""
    ids = {name: class_id for class_id, name in label_map.items()}
    records = []
    for index, image in enumerate(images):
        if image.objects:
            boxes = np.array([box for _, box in image.objects], np.float32).reshape(-1, 4)
            classes = np.array([ids[name] for name, _ in image.objects], np.int64)
            area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
            crowd = np.zeros(len(classes), bool)
            crowd[image.crowd] = True
            annotations = (boxes, classes, crowd, area.astype(np.float32))
        else:
            annotations = empty_annotations()
        records.append(ImageRecord(start_id + index, image.path, int(image.height),
                                   int(image.width), *annotations))
    return records


def corners_box(points: Sequence[Sequence[float]]) -> List[float]:
    """[ymin, xmin, ymax, xmax] around some (x, y) points."""
    xs = [float(p[0]) for p in points]
    ys = [float(p[1]) for p in points]
    return [min(ys), min(xs), max(ys), max(xs)]


def first_csv_row(path: str) -> List[str]:
    """The first row of a CSV file ([] when it cannot be read as UTF-8 text): what tells the
    CSV layouts apart."""
    import csv
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            return next(csv.reader(f), [])
    except (OSError, UnicodeDecodeError):
        return []


def header_size(path: str, skipped_what: str) -> Optional[Tuple[int, int]]:
    """(height, width) of an image file as stored, read from its header, for the layouts
    whose coordinates are fractions of a size they do not state; None, with a warning naming
    the file and `skipped_what`, when it is missing or not an image."""
    from PIL import Image
    try:
        with Image.open(path) as image:
            width, height = image.size
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
        logging.warning("%s: cannot read the image's size, skipping %s (%s)", path,
                        skipped_what, e)
        return None
    return height, width
