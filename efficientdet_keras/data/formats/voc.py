"""Pascal VOC reader: a VOCdevkit year folder (VOC2007, VOC2012) into ImageRecords.

Layouts read:
  <voc_root>/ImageSets/Main/<split>.txt   one image id per line (the VOCdevkit's)
  <voc_root>/Annotations/<id>.xml         size and objects
  <voc_root>/JPEGImages/<id>.jpg          the image (only its path is recorded)
or a folder of images with an XML of the same name beside each (Roboflow's, supervision's,
labelImg's and globox's VOC exports), or a folder of XMLs whose images the dataset folder holds
elsewhere (Label Studio's Annotations/ and images/, FiftyOne's labels/ and data/):
`voc_folder_pairs`.
"""

import os
from typing import Dict, List, Optional, Sequence, Tuple
from xml.etree.ElementTree import ParseError

import numpy as np
from defusedxml import ElementTree

from efficientdet_keras.config.label_maps import VOC_LABEL_MAP
from efficientdet_keras.data.formats.image_header import IMAGE_EXTENSIONS_EITHER_CASE
from efficientdet_keras.data.formats.records import ImageRecord, empty_annotations

# The image files a VOC folder export puts beside its XMLs.
VOC_IMAGE_EXTENSIONS = IMAGE_EXTENSIONS_EITHER_CASE


def load_voc_records(voc_root: str, split: str = "train",
                     label_map: Optional[Dict[int, str]] = None,
                     start_id: int = 1) -> List[ImageRecord]:
    """Reads one split of a VOC year folder into ImageRecords.

    Args:
      voc_root: the folder holding Annotations/, ImageSets/ and JPEGImages/
        (e.g. VOCdevkit/VOC2012).
      split: the ImageSets/Main file name without .txt (train, val, trainval, test).
      label_map: {class id: class name}; defaults to VOC_LABEL_MAP.
      start_id: the image id of the first image; the others follow in split-file
        order, so ids are deterministic (and can be kept apart across years).

    VOC boxes are 1-based inclusive pixel indices; 1 is subtracted from xmin and
    ymin so that boxes are [ymin, xmin, ymax, xmax] in 0-based continuous pixel
    coordinates (a box over the whole image is [0, 0, height, width]), the same
    convention as COCO. Objects marked difficult are kept with is_crowd=True, so
    training ignores them and COCO evaluation treats them as ignore regions. Each
    object's <difficult> and <truncated> (0 when absent) and <pose> ("Unspecified" when
    absent, empty when empty, as the reference's converter writes it) are kept as the
    records' difficult, truncated and view.

    Raises:
      FileNotFoundError naming the missing split or annotation file.
      ValueError naming the XML file for malformed XML, or for a class name not
      in the label map (listing the known names).
    """
    return load_voc_pairs(voc_split_pairs(voc_root, split), label_map, start_id)


def load_voc_pairs(pairs: Sequence[Tuple[str, str]],
                   label_map: Optional[Dict[int, str]] = None,
                   start_id: int = 1, origin: int = 1) -> List[ImageRecord]:
    """ImageRecords of (annotation XML, image) pairs, ids from start_id in pair order; boxes,
    classes and errors as `load_voc_records` says.

    origin: the pixel index of the image's first column and row in the XMLs: 1 in the VOC
      devkit's files (the default), 0 in the VOC exports of datumaro, CVAT and globox.
    """
    class_ids = _names_to_ids(label_map or VOC_LABEL_MAP)
    return [_read_annotation(xml_path, image_path, start_id + index, class_ids, origin)
            for index, (xml_path, image_path) in enumerate(pairs)]


def voc_split_pairs(voc_root: str, split: str) -> List[Tuple[str, str]]:
    """(annotation XML, image) of each id of a VOCdevkit split file: JPEGImages/<id>.jpg, else
    the image of that id with another extension (PNGs in JPEGImages/ too). An id written with
    its image's extension (a.jpg) is the id without it."""
    images = os.path.join(voc_root, "JPEGImages")
    pairs = []
    for name in voc_split_ids(voc_root, split):
        stem, extension = os.path.splitext(name)
        if extension in VOC_IMAGE_EXTENSIONS:
            name = stem
        image = os.path.join(images, name + ".jpg")
        if not os.path.isfile(image):
            image = next((os.path.join(images, name + ext) for ext in VOC_IMAGE_EXTENSIONS
                          if os.path.isfile(os.path.join(images, name + ext))), image)
        pairs.append((os.path.join(voc_root, "Annotations", name + ".xml"), image))
    return pairs


def voc_folder_pairs(folder: str, index=None) -> List[Tuple[str, str]]:
    """(annotation XML, image) of each XML in a folder: the image of the same name beside it,
    else the XML's <filename> in the folder, else (with `index`, the dataset folder's
    `ImageIndex`) the image its <path> or <filename> names wherever the export put it
    (Label Studio's images/, FiftyOne's data/).

    Raises:
      FileNotFoundError naming the XML whose image is in none of these places.
    """
    pairs = []
    for name in sorted(os.listdir(folder)):
        if not name.lower().endswith(".xml"):
            continue
        xml_path = os.path.join(folder, name)
        stem = os.path.splitext(name)[0]
        image = next((os.path.join(folder, stem + ext) for ext in VOC_IMAGE_EXTENSIONS
                      if os.path.isfile(os.path.join(folder, stem + ext))), None)
        if image is None:
            image = os.path.join(folder, _filename_of(xml_path))
            if not os.path.isfile(image) and index is not None:
                image = next(filter(None, (index.resolve(named, folder)
                                           for named in _named_images(xml_path, stem))), image)
            if not os.path.isfile(image):
                raise FileNotFoundError("%s: no image beside it (%s.jpg, .png, ...) or named by "
                                        "its <filename>%s" % (xml_path, stem, "" if index is None
                                                             else " under " + index.root))
        pairs.append((xml_path, image))
    return pairs


def _named_images(xml_path: str, stem: str) -> List[str]:
    """What an XML says its image is: <path>, <filename>, then its own name as a JPEG."""
    try:
        root = ElementTree.parse(xml_path).getroot()
    except (OSError, ParseError, ValueError):
        return [stem + ".jpg"]
    named = [(root.findtext(tag) or "").strip() for tag in ("path", "filename")]
    return [n for n in named if n] + [stem + ".jpg"]


def is_voc_annotation(xml_path: str) -> bool:
    """Whether an XML file is a Pascal VOC annotation with boxes: an <annotation> root and a
    <bndbox> (LabelMe's XML shares the root, with <polygon>s instead); read from its start."""
    try:
        with open(xml_path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    start = head.lstrip()
    if start.startswith(b"<?xml"):
        start = start[start.find(b"?>") + 2:].lstrip()
    return start.startswith((b"<annotation>", b"<annotation ")) and b"<bndbox" in head


def _filename_of(xml_path: str) -> str:
    try:
        return os.path.basename((ElementTree.parse(xml_path).getroot().findtext("filename")
                                 or "").strip())
    except (OSError, ParseError, ValueError):
        return ""


def voc_split_ids(voc_root: str, split: str) -> List[str]:
    """The image ids of ImageSets/Main/<split>.txt, in file order.

    Raises:
      FileNotFoundError naming the split file.
    """
    split_file = os.path.join(voc_root, "ImageSets", "Main", split + ".txt")
    if not os.path.isfile(split_file):
        raise FileNotFoundError("VOC split file not found: %s" % split_file)
    with open(split_file) as f:
        # Main/<split>.txt holds one id per line; take the first token to be lenient
        # about trailing columns and blank lines.
        return [line.split()[0] for line in f if line.strip()]


def voc_annotation_survey(pairs: Sequence[Tuple[str, str]]) -> Tuple[List[str], Optional[str]]:
    """The object names the annotation XMLs of some pairs use, sorted, and the first XML with
    a box coordinate of 0 (None if none has one): the VOC devkit's pixels start at 1, so such
    a file was written 0-based, as datumaro, CVAT and globox write VOC.

    Unreadable annotation files are passed over here; reading the records names them.
    """
    names, zero_file = set(), None
    for xml_path, _ in pairs:
        try:
            root = ElementTree.parse(xml_path)
        except (OSError, ParseError, ValueError):
            continue
        for obj in root.getroot().findall("object"):
            names.add((obj.findtext("name") or "").strip())
            if zero_file is None and any(_is_zero(obj.findtext("bndbox/" + key))
                                         for key in ("xmin", "ymin")):
                zero_file = xml_path
    names.discard("")
    return sorted(names), zero_file


def _is_zero(text: Optional[str]) -> bool:
    try:
        return float(text) == 0.0
    except (TypeError, ValueError):
        return False


def _names_to_ids(label_map: Dict[int, str]) -> Dict[str, int]:
    class_ids = {}
    for class_id, name in label_map.items():
        if name in class_ids:
            raise ValueError("Label map names %r twice (ids %d and %d)"
                             % (name, class_ids[name], int(class_id)))
        class_ids[name] = int(class_id)
    return class_ids


def _read_annotation(xml_path: str, image_path: str, image_id: int,
                     class_ids: Dict[str, int], origin: int = 1) -> ImageRecord:
    if not os.path.isfile(xml_path):
        raise FileNotFoundError("VOC annotation file not found: %s" % xml_path)
    try:
        root = ElementTree.parse(xml_path).getroot()
        height = int(float(_text(root, "size/height")))
        width = int(float(_text(root, "size/width")))
        boxes, classes, difficult, truncated, views = [], [], [], [], []
        for obj in root.findall("object"):
            name = _text(obj, "name").strip()
            if name not in class_ids:
                raise _UnknownClass(name)
            # Coordinates are integers in VOC itself but floats in some exports.
            xmin, ymin, xmax, ymax = (float(_text(obj, "bndbox/" + key))
                                      for key in ("xmin", "ymin", "xmax", "ymax"))
            boxes.append([ymin - origin, xmin - origin, ymax, xmax])
            classes.append(class_ids[name])
            difficult.append(int(obj.findtext("difficult", "0").strip() or 0))
            truncated.append(int(obj.findtext("truncated", "0").strip() or 0))
            pose = obj.find("pose")  # Absent: the devkit's "Unspecified"; empty stays so.
            views.append("Unspecified" if pose is None else (pose.text or "").strip())
    except _UnknownClass as e:
        raise ValueError("%s: class name %r is not in the label map; known names: %s"
                         % (xml_path, e.name, ", ".join(sorted(class_ids)))) from None
    # defusedxml refuses entity and DTD tricks (a billion-laughs file, an external entity)
    # with a ValueError, whatever the expat version.
    except (ParseError, ValueError) as e:
        raise ValueError("%s is not a valid VOC annotation: %s" % (xml_path, e)) from None
    difficult = np.array(difficult, np.int64)
    if boxes:
        box_array = np.array(boxes, np.float32)
        area = ((box_array[:, 2] - box_array[:, 0]) * (box_array[:, 3] - box_array[:, 1]))
        annotations = (box_array, np.array(classes, np.int64), difficult == 1,
                       area.astype(np.float32))
    else:
        annotations = empty_annotations()
    return ImageRecord(image_id, image_path, height, width, *annotations, difficult=difficult,
                       truncated=np.array(truncated, np.int64), view=np.array(views, str))


class _UnknownClass(Exception):
    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


def _text(element, path: str) -> str:
    """The text of a required sub-element; ValueError naming it when absent or empty."""
    text = element.findtext(path)
    if text is None or not text.strip():
        raise ValueError("missing <%s>" % path)
    return text
