"""COCO instances JSON: reading and checking a file, its image ids and categories, and the
COCO ground-truth dict of some ImageRecords.

`read_coco_json` is strict (the evaluator's ground truth); `data.formats.coco_records` reads the
same files leniently into ImageRecords for training.
"""

import json
import os
from typing import Dict, Sequence

from efficientdet_keras.data.formats.image_ids import ImageId, image_id_to_int64
from efficientdet_keras.data.formats.records import ImageRecord
from efficientdet_keras.utils.memory import available_memory_bytes

# Bytes of memory Python's json takes per byte of a COCO file: 3.7 measured on a COCO-style
# file with polygons (135 MB of text, 495 MB peak); files of short numbers take more.
JSON_MEMORY_FACTOR = 5


def read_coco_json(annotation_file: str) -> dict:
    """Loads a COCO instances JSON and checks what every reader relies on.

    Raises:
      FileNotFoundError naming the file; ValueError naming the file and the key or
      image id for malformed JSON, an image without "id", or an image id that
      appears twice (or two ids that map to one int64, like "0123" and 123).
    """
    data = parse_coco_file(annotation_file)
    coco_image_ids(data, annotation_file)
    return data


def parse_coco_file(annotation_file: str) -> dict:
    """The parsed JSON, with its "images" and "annotations" lists (not checked further:
    `read_coco_json` also checks the image ids, `load_coco_records` skips bad entries).

    Raises:
      FileNotFoundError naming the file; ValueError naming the file for malformed JSON or a
      missing "images" or "annotations" list.
    """
    if not os.path.exists(annotation_file):
        raise FileNotFoundError("COCO annotation file not found: %s" % annotation_file)
    check_fits_in_memory(annotation_file)
    # JSON is UTF-8 whatever the locale; Windows tools often start it with a byte-order mark.
    with open(annotation_file, encoding="utf-8-sig") as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError("%s is not valid JSON: %s" % (annotation_file, e)) from None
        except UnicodeDecodeError as e:
            raise ValueError("%s is not UTF-8 text, which JSON must be (byte %d is 0x%02x); "
                             "save it as UTF-8" % (annotation_file, e.start,
                                                   e.object[e.start])) from None
    if not isinstance(data, dict):
        raise ValueError("%s holds a %s, not a COCO instances object" % (annotation_file,
                                                                        type(data).__name__))
    if "dm_format_version" in data:
        raise ValueError("%s is datumaro's own format, which this package does not read; "
                         "export the dataset as COCO instead (datum project export -f "
                         "coco_instances, or datum convert -if datumaro -f coco_instances)"
                         % annotation_file)
    for key in ("images", "annotations"):
        if not isinstance(data.get(key), list):
            raise ValueError("%s has no %r list; is it a COCO instances file?" % (annotation_file, key))
    return data


def check_fits_in_memory(annotation_file: str) -> None:
    """Raises ValueError naming the file when parsing it would need more memory than the
    machine has available (JSON_MEMORY_FACTOR times its size), before reading a byte."""
    size = os.path.getsize(annotation_file)
    available = available_memory_bytes()
    if available is not None and size * JSON_MEMORY_FACTOR > available:
        raise ValueError("%s is %.1f GB; parsing a COCO JSON takes about %d times its size in "
                         "memory, and this machine has %.1f GB available"
                         % (annotation_file, size / 1e9, JSON_MEMORY_FACTOR, available / 1e9))


def coco_categories(annotation_file: str) -> Dict[int, str]:
    """{id: name} from a COCO JSON's categories list (empty when it has none)."""
    categories = parse_coco_file(annotation_file).get("categories") or []
    return {int(c["id"]): str(c["name"]) for c in categories}


def coco_image_ids(data: dict, annotation_file: str) -> Dict[int, ImageId]:
    """{int64 image id: the id as the JSON spells it} for the images of a COCO dict.

    Raises:
      ValueError naming the file and the id for an image without "id" or a duplicate id.
    """
    ids: Dict[int, ImageId] = {}
    for image in data["images"]:
        if "id" not in image:
            raise ValueError("%s: image entry %r lacks key 'id'" % (annotation_file, image))
        try:
            number = image_id_to_int64(image["id"])
        except ValueError as e:
            raise ValueError("%s: %s" % (annotation_file, e)) from None
        if number in ids:
            same = ("" if ids[number] == image["id"] else
                    " (as %r, which maps to the same int64 %d)" % (ids[number], number))
            raise ValueError("%s: image id %r appears twice%s; image ids must be unique"
                             % (annotation_file, image["id"], same))
        ids[number] = image["id"]
    return ids


def json_image_id(image_id: ImageId) -> ImageId:
    """An id as JSON can hold it: a Python int, or the string unchanged."""
    return image_id if isinstance(image_id, str) else int(image_id)


def records_to_coco(records: Sequence[ImageRecord], label_map: Dict[int, str]) -> dict:
    """The COCO ground-truth dict (images, annotations, categories) of some records.

    Evaluation needs this for data that did not come as COCO JSON (VOC, synthetic).
    Every annotation has "iscrowd" and "segmentation": the record's own (COCO), else []
    (which bbox evaluation never reads); records with difficult (VOC) also get "ignore",
    1 for difficult objects.
    """
    images, annotations = [], []
    next_ann_id = 1
    for record in records:
        images.append({"id": json_image_id(record.image_id), "file_name": record.filename,
                       "height": int(record.height), "width": int(record.width)})
        objects = zip(record.boxes, record.classes, record.is_crowd, record.area)
        for index, (box, cls, crowd, area) in enumerate(objects):
            ymin, xmin, ymax, xmax = (float(v) for v in box)
            segmentation = record.segmentation[index] if record.segmentation else None
            annotation = {"id": next_ann_id, "image_id": json_image_id(record.image_id),
                          "category_id": int(cls), "iscrowd": int(bool(crowd)),
                          "bbox": [xmin, ymin, xmax - xmin, ymax - ymin],
                          "area": float(area) if area > 0 else (xmax - xmin) * (ymax - ymin),
                          "segmentation": [] if segmentation is None else segmentation}
            if record.difficult is not None:
                annotation["ignore"] = int(record.difficult[index] == 1)
            annotations.append(annotation)
            next_ann_id += 1
    categories = [{"id": int(k), "name": str(v)} for k, v in sorted(label_map.items())]
    return {"images": images, "annotations": annotations, "categories": categories}
