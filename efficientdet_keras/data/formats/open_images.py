"""Open Images boxes: a `<split>-annotations-bbox.csv` per split, class names in a class
descriptions CSV, images named by their ImageID.

    ImageID,Source,LabelName,Confidence,XMin,XMax,YMin,YMax,IsOccluded,IsTruncated,IsGroupOf,...
    000002b66c9c498e,xclick,/m/01g317,1,0.0125,0.195312,0.148438,0.587500,0,1,0,0,0

Coordinates are fractions of the image size (the image's header gives it). Classes are the
descriptions' display names for the label ids (`/m/01g317,Person`; the descriptions file may
have a `LabelName,DisplayName` header or none), or the ids themselves when no descriptions file
is there. IsGroupOf boxes are crowd boxes, as COCO's iscrowd. Only boxes are read: image-level
labels, segmentations and relationships are not. Images are looked for as
`<ImageID>.jpg` (any image extension) in `<split>/`, `images/<split>/` or `images/`; an image
the split's `*images*rotation*.csv` lists without boxes is read as an image without objects.
"""

import csv
import glob
import os
from typing import Dict, List, Optional

from efficientdet_keras.data.formats.image_header import IMAGE_EXTENSIONS_EITHER_CASE
from efficientdet_keras.data.formats.named_boxes import NamedBoxes, header_size

BOX_FILE_SUFFIX = "-annotations-bbox.csv"
_COLUMNS = ("ImageID", "LabelName", "XMin", "XMax", "YMin", "YMax")
_EXTENSIONS = IMAGE_EXTENSIONS_EITHER_CASE


def box_files(folder: str) -> Dict[str, str]:
    """{split word as the file names it (train, validation, test, ...): box file} of a folder
    or its annotations/ folder."""
    found = {}
    for where in (folder, os.path.join(folder, "annotations")):
        for path in sorted(glob.glob(os.path.join(glob.escape(where), "*" + BOX_FILE_SUFFIX))):
            found.setdefault(os.path.basename(path)[:-len(BOX_FILE_SUFFIX)], path)
    return found


def class_descriptions(folder: str) -> Optional[Dict[str, str]]:
    """{label id: display name} from the folder's (or annotations/') class descriptions CSV,
    or None when there is none.

    Raises:
      ValueError naming the file and line of a row without two columns.
    """
    files = []
    for where in (folder, os.path.join(folder, "annotations")):
        files += sorted(glob.glob(os.path.join(glob.escape(where), "*class-descriptions*.csv")))
    if not files:
        return None
    names = {}
    with open(files[0], encoding="utf-8-sig", newline="") as f:
        for line, row in enumerate(csv.reader(f), start=1):
            if not row or (line == 1 and row[0].strip() == "LabelName"):
                continue
            if len(row) < 2:
                raise ValueError("%s, line %d: a row is `label id,display name`" % (files[0], line))
            names[row[0].strip()] = row[1].strip()
    return names


def read_box_file(path: str, split_word: str, names: Optional[Dict[str, str]]
                  ) -> List[NamedBoxes]:
    """The images of one split's box file (and of its image list, when there is one), in
    the order of their first row. An image whose size cannot be read is skipped with a warning.

    Raises:
      ValueError naming the file and line for a missing column, a coordinate that is not a
      fraction 0..1, or a label id the class descriptions lack.
    """
    root = _dataset_root(path)
    images: Dict[str, Optional[NamedBoxes]] = {}

    def image_of(image_id):
        if image_id not in images:
            image_path = _image_path(root, split_word, image_id)
            size = header_size(image_path, "its boxes in %s" % path)
            images[image_id] = NamedBoxes(image_path, *size) if size else None
        return images[image_id]

    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in _COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError("%s: no column %s (an Open Images box file names %s)"
                             % (path, ", ".join(missing), ",".join(_COLUMNS)))
        for row in reader:
            where = "%s, line %d" % (path, reader.line_num)
            image = image_of(row["ImageID"].strip())
            if image is None:
                continue
            label = row["LabelName"].strip()
            if names is not None and label not in names:
                raise ValueError("%s: label %s is not in the class descriptions" % (where, label))
            try:
                x_min, x_max, y_min, y_max = (float(row[c]) for c in ("XMin", "XMax", "YMin", "YMax"))
            except (TypeError, ValueError):
                raise ValueError("%s: a coordinate that is not a number" % where) from None
            if not all(0 <= v <= 1 for v in (x_min, x_max, y_min, y_max)):
                raise ValueError("%s: coordinates are fractions 0..1 of the image size" % where)
            if (row.get("IsGroupOf") or "0").strip() == "1":
                image.crowd.append(len(image.objects))
            image.objects.append((names[label] if names is not None else label,
                                  [y_min * image.height, x_min * image.width,
                                   y_max * image.height, x_max * image.width]))
    for image_id in _listed_images(root, split_word):
        image_of(image_id)
    return [image for image in images.values() if image is not None]


def _dataset_root(box_file: str) -> str:
    folder = os.path.dirname(os.path.abspath(box_file))
    return os.path.dirname(folder) if os.path.basename(folder) == "annotations" else folder


def _listed_images(root: str, split_word: str) -> List[str]:
    """The ImageIDs of the split's image list (`<split>-images*rotation*.csv`), if any."""
    lists = []
    for where in (root, os.path.join(root, "annotations")):
        lists += sorted(glob.glob(os.path.join(glob.escape(where),
                                               "%s-images*rotation*.csv" % glob.escape(split_word))))
    if not lists:
        return []
    with open(lists[0], encoding="utf-8-sig", newline="") as f:
        return [row["ImageID"].strip() for row in csv.DictReader(f) if row.get("ImageID")]


def _image_path(root: str, split_word: str, image_id: str) -> str:
    folders = [os.path.join(root, split_word), os.path.join(root, "images", split_word),
               os.path.join(root, "images"), root]
    for folder in folders:
        for extension in ("",) + _EXTENSIONS:
            candidate = os.path.join(folder, image_id + extension)
            if os.path.isfile(candidate):
                return candidate
    return os.path.join(folders[0], image_id + ".jpg")
