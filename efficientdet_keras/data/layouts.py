"""Each dataset layout `open_dataset` finds, read into a Dataset: COCO JSON (Roboflow's
included), YOLO, Pascal VOC, the layouts whose boxes carry class names (LabelMe, CVAT XML, the
CSVs) and TFRecord files with a label map.

Each split's records are read when its source is first asked for; the classes are read at once.
"""

import collections
import glob
import os
from typing import Dict, List, Optional, Sequence

from efficientdet_keras.data.dataset_object import Dataset, DataSplit
from efficientdet_keras.data.formats.classes import (DataClasses, annotated_root, coco_classes,
                                                     indexed_classes, named_classes)
from efficientdet_keras.data.formats.coco_json import parse_coco_file
from efficientdet_keras.data.formats.label_map import (read_datumaro_labelmap,
                                                       read_label_map_file)
from efficientdet_keras.data.formats.records import with_class_ids
from efficientdet_keras.data.sources import RecordsSource, TFRecordSource
from efficientdet_keras.data.split_names import SPLITS, split_name

_IMAGE_DIR_NAMES = ("images", "JPEGImages", "img", "imgs")
_LABEL_MAP_FILES = ("label_map.json", "label_map.yaml", "label_map.yml", "label_map.pbtxt")


# --- COCO JSON ------------------------------------------------------------------------------

def coco_dataset(path: str, splits: Dict[str, tuple], data_format: str = "coco") -> Dataset:
    """COCO JSON files, {split: (json file, image folder or None to find it)}.

    The classes are the categories of the first split's file (train's when there is one);
    a split whose categories differ is an error naming both files.
    """
    from efficientdet_keras.data.formats.coco_records import load_coco_records
    ordered = sorted(splits, key=lambda s: SPLITS.index(s) if s in SPLITS else len(SPLITS))
    first_file = splits[ordered[0]][0]
    first = parse_coco_file(first_file)
    if not first.get("categories") or not isinstance(first["categories"], list):
        raise ValueError("%s has no 'categories' list, which names the classes of a COCO "
                         "instances file (captions and image-list files have none)" % first_file)
    try:
        classes = coco_classes(first["categories"], first["annotations"])
    except ValueError as e:
        raise ValueError("%s: %s" % (first_file, e)) from None
    skipped = collections.Counter()
    shift = {data_id: model_id for model_id, data_id in classes.data_ids.items()}
    root = annotated_root(first["categories"], first["annotations"])
    notes = ["category %r is the others' supercategory (Roboflow's root category), yet %d "
             "boxes use it: kept as a class; relabel those boxes or drop the category" % root
             ] if root else []

    def loader(json_file, image_dir):
        def load():
            data = parse_coco_file(json_file)
            if json_file != first_file:
                _check_same_categories(json_file, data, first_file, first)
            folder = image_dir or find_image_dir(json_file, data, path)
            records = load_coco_records(json_file, folder, skipped,
                                        set(classes.data_ids.values()))
            return RecordsSource([with_class_ids(r, shift) for r in records])
        return load

    found = {}
    for name in ordered:
        json_file, image_dir = splits[name]
        found[name] = DataSplit(name, json_file, loader(json_file, image_dir))
    return Dataset(path, data_format, classes, found, skipped, notes)


def _check_same_categories(json_file: str, data: dict, first_file: str, first: dict) -> None:
    def categories(d):
        return {(c.get("id"), c.get("name")) for c in d.get("categories") or []
                if isinstance(c, dict)}
    if categories(data) != categories(first):
        raise ValueError("%s and %s list different categories; the splits of a dataset share "
                         "their classes" % (json_file, first_file))


def find_image_dir(json_file: str, data: dict, dataset: Optional[str] = None) -> str:
    """The folder the images of a COCO JSON are in: beside it, in images/, or in a folder
    named after the file (annotations/instances_val2017.json -> val2017/): the one that holds
    most of the first images' files; else the folder under the dataset's that holds most of
    them by file name (FiftyOne's data/, a copy of images whose paths are gone).

    dataset: the dataset's folder (or its JSON file), outside which no image is looked for.
      A JSON given as the dataset is looked around as in COCO's own layout: its folder and
      that folder's parent (annotations/.. holds val2017/).

    Raises:
      ValueError naming the file and the folders looked in.
    """
    from efficientdet_keras.data.formats.coco_records import image_path
    from efficientdet_keras.data.image_index import ImageIndex
    here = os.path.dirname(os.path.abspath(json_file))
    parent = os.path.dirname(here)
    if dataset is None or os.path.isfile(dataset):
        root = parent
    else:
        root = os.path.abspath(dataset)
    stem = os.path.splitext(os.path.basename(json_file))[0]
    split_folder = stem.split("_", 1)[1] if "_" in stem else stem
    candidates = [here] + [os.path.join(here, d) for d in _IMAGE_DIR_NAMES]
    candidates += [os.path.join(parent, split_folder), os.path.join(parent, "images", split_folder)]
    candidates += [os.path.join(parent, d) for d in _IMAGE_DIR_NAMES]
    candidates = [c for c in candidates if _within(c, root)]
    names = [im["file_name"] for im in data["images"][:20]
             if isinstance(im, dict) and isinstance(im.get("file_name"), str)]
    if not names:
        return here
    found = [sum(os.path.isfile(image_path(folder, name)) for name in names)
             for folder in candidates]
    if found and max(found):  # The folder that holds most of them (the first of equals).
        return candidates[found.index(max(found))]
    by_name = ImageIndex(root).folder_holding(names)
    if by_name:
        return by_name
    raise ValueError("%s: cannot find its images (such as %s) in %s, or by their file names "
                     "under %s" % (json_file, names[0], ", ".join(sorted(set(candidates))), root))


def _within(path: str, folder: str) -> bool:
    return os.path.commonpath([os.path.abspath(path), folder]) == folder


# --- YOLO -----------------------------------------------------------------------------------

def yolo_dataset(yaml_file: str, layout=None, notes: Sequence[str] = ()) -> Dataset:
    """An Ultralytics data.yaml with its images/ and labels/ (see `data.formats.yolo`), or the
    YoloDataset `layout` read from another file or folder (`data.formats.yolo_darknet`)."""
    from efficientdet_keras.data.formats.yolo import load_yolo_records
    from efficientdet_keras.data.formats.yolo_yaml import read_yolo_yaml
    layout = layout or read_yolo_yaml(yaml_file)
    classes = indexed_classes(layout.names)
    if layout.class_ids:  # The names' own ids (1..K, say), in the label files too.
        classes = DataClasses(classes.names, {k: layout.class_ids[k - 1] for k in classes.names})
    skipped = collections.Counter()

    def loader(image_paths):
        def load():
            records = load_yolo_records(image_paths, len(layout.names), skipped,
                                        keypoint_fields=layout.keypoint_fields,
                                        class_ids=layout.class_ids)
            return RecordsSource(records)
        return load

    splits = {}
    for name, image_paths in layout.splits.items():
        split = split_name(name) or name
        splits[split] = DataSplit(split, "%s: %s" % (os.path.basename(yaml_file), name),
                                  loader(image_paths))
    return Dataset(yaml_file, "yolo", classes, splits, skipped, layout.notes + list(notes))


# --- Pascal VOC -----------------------------------------------------------------------------

def voc_dataset(voc_root: str, origin: Optional[int] = None) -> Dataset:
    """A VOC year folder: train and val (else trainval as train) and test from
    ImageSets/Main; the classes are the object names of its annotations. Its pixels start at
    1 as in the VOC devkit, or at 0 when datumaro's labelmap.txt (CVAT's VOC export is
    datumaro's) sits beside them; `origin` (0 or 1) says it instead."""
    from efficientdet_keras.data.formats.voc import voc_split_pairs
    main = os.path.join(voc_root, "ImageSets", "Main")
    present = [s for s in ("train", "val", "trainval", "test")
               if os.path.isfile(os.path.join(main, s + ".txt"))]
    files = {"val": "val", "test": "test"}
    files["train"] = "train" if "train" in present else "trainval"
    files = {split: name for split, name in files.items() if name in present}
    if not files:
        raise ValueError("%s has no train.txt, val.txt, trainval.txt or test.txt" % main)
    datumaro_map = os.path.join(voc_root, "labelmap.txt")
    zero_based = datumaro_map if os.path.isfile(datumaro_map) else None
    return _voc_pairs_dataset(voc_root, {
        split: (os.path.join(main, name + ".txt"), voc_split_pairs(voc_root, name))
        for split, name in files.items()}, zero_based,
        read_datumaro_labelmap(datumaro_map) if zero_based else None, origin)


def voc_folder_dataset(path: str, folders: Dict[str, str],
                       origin: Optional[int] = None) -> Dataset:
    """VOC XMLs beside their images or with their images elsewhere in the dataset folder `path`
    (found by file name), {split: folder}; the classes are the XMLs' object names
    (as for a VOC year folder). The tools that export this layout write pixels from 0, seen
    in a box coordinate of 0 (else they are taken to start at 1, as in the VOC devkit);
    `origin` (0 or 1) says it instead."""
    from efficientdet_keras.data.formats.voc import voc_folder_pairs
    from efficientdet_keras.data.image_index import ImageIndex
    index = ImageIndex(path)
    return _voc_pairs_dataset(path, {split: (folder, voc_folder_pairs(folder, index))
                                     for split, folder in folders.items()}, None, None, origin)


def _voc_pairs_dataset(path: str, splits: Dict[str, tuple], zero_based,
                       label_order: Optional[List[str]] = None,
                       given_origin: Optional[int] = None) -> Dataset:
    """{split: (location, [(xml, image)])}; zero_based: the file that shows the pixels start
    at 0, or None to look for a coordinate of 0 in the XMLs (folder layouts only);
    label_order: the class names in the order the export's labelmap.txt gives them, which
    number the classes when it holds every name the XMLs use; given_origin: 0 or 1 as the
    user gave it, which wins."""
    from efficientdet_keras.data.formats.voc import load_voc_pairs, voc_annotation_survey
    names, zero_file = voc_annotation_survey([p for _, ps in splits.values() for p in ps])
    if label_order and set(names) <= set(label_order):
        classes = indexed_classes(label_order)
        classes = DataClasses(classes.names, dict(classes.names))
    else:
        classes = named_classes(names)
    if zero_based is None and not os.path.isdir(os.path.join(path, "ImageSets")):
        zero_based = zero_file
    origin = 0 if zero_based else 1
    if given_origin is not None:
        if given_origin not in (0, 1):
            raise ValueError("the VOC pixel origin is 0 or 1, not %r" % (given_origin,))
        origin = given_origin

    def loader(pairs):
        return lambda: RecordsSource(load_voc_pairs(pairs, classes.names, origin=origin))

    found = {split: DataSplit(split, location, loader(pairs)) for split, (location, pairs)
             in sorted(splits.items(), key=lambda kv: SPLITS.index(kv[0]))}
    if given_origin is not None:
        notes = ["boxes %d-based, as given" % given_origin]
    elif zero_based:
        notes = ["boxes 0-based, as %s shows (the VOC devkit's start at 1)" % zero_based]
    else:
        notes = []
    return Dataset(path, "voc", classes, found, notes=notes)


# --- Boxes with class names: LabelMe JSON, CVAT XML, the TF Object Detection, AutoML Vision and
# Open Images CSVs

def named_boxes_dataset(path: str, data_format: str, splits: Dict[str, tuple],
                        class_order: Optional[Sequence[str]] = None,
                        notes: Sequence[str] = ()) -> Dataset:
    """{split: (location, [NamedBoxes])}; the classes are class_order (CVAT's declared
    labels) with any other name the boxes use after it, else the names of the boxes, sorted
    (the 20 VOC ids when every name is a VOC class, as for VOC)."""
    from efficientdet_keras.data.formats.named_boxes import named_records, object_names
    used = object_names([image for _, images in splits.values() for image in images])
    if class_order:
        classes = indexed_classes(list(class_order) + [n for n in used if n not in class_order])
        classes = DataClasses(classes.names, dict(classes.names))
    else:
        classes = named_classes(used)

    def loader(images):
        return lambda: RecordsSource(named_records(images, classes.names))

    found = {split: DataSplit(split, location, loader(images))
             for split, (location, images) in sorted(splits.items(),
                                                    key=lambda kv: SPLITS.index(kv[0]))}
    return Dataset(path, data_format, classes, found, notes=list(notes))


# --- TFRecord -------------------------------------------------------------------------------

def tfrecord_dataset(path: str, files: Sequence[str]) -> Dataset:
    """TFRecord files split by their names, classes from a label map file beside them, else
    from the records' class/text (FiftyOne's exports carry no label map; records numbered from
    0 are read one up, 0 being the background). Boxes whose class id the names leave out are
    said in one note with the fix: training drops them."""
    from efficientdet_keras.data.formats.tf_example import scan_class_labels
    by_split: Dict[str, List[str]] = {}
    for f in files:
        name = split_name(os.path.basename(f)) or ("train" if len(files) == 1 else None)
        if name:
            by_split.setdefault(name, []).append(f)
    if not by_split:
        raise ValueError("%s: no TFRecord file names its split (train, val or test)" % path)
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    label_map_file = next((os.path.join(folder, n) for n in _LABEL_MAP_FILES
                           if os.path.isfile(os.path.join(folder, n))), None)
    counts, texts, scanned = scan_class_labels(sorted(files))
    offset, notes = 0, []
    if label_map_file is not None:
        names = read_label_map_file(label_map_file)
    elif texts:
        offset = 1 if min(texts) == 0 else 0
        names = {class_id + offset: text for class_id, text in sorted(texts.items())}
        notes.append("class names from the records' class/text%s" % (
            "; their ids 0..%d are read as 1..%d (0 is the background)"
            % (max(texts), max(texts) + 1) if offset else ""))
    else:
        raise ValueError("%s: TFRecords carry no class names; put a label map beside them (%s)"
                         % (path, ", ".join(_LABEL_MAP_FILES)))
    unnamed = {i: n for i, n in sorted(counts.items()) if i + offset not in names}
    if unnamed:
        notes.append("%d boxes in the first %d records have class ids %s that %s does not name: "
                     "training drops them%s" % (
                         sum(unnamed.values()), scanned, ", ".join(map(str, unnamed)),
                         os.path.basename(label_map_file) if label_map_file else "class/text",
                         "; records numbered from 0 (FiftyOne's, the Object Detection API's "
                         "class ids less one) read right without the label map when they carry "
                         "class/text, else give the label map their ids"
                         if 0 in unnamed and label_map_file else ""))
    classes = DataClasses(names, dict((k, k - offset) for k in names))
    jsons = {split_name(os.path.basename(f)): f
             for f in sorted(glob.glob(os.path.join(glob.escape(folder), "*.json")))}
    splits = {name: DataSplit(name, ",".join(fs), lambda fs=fs: TFRecordSource(fs, offset),
                              jsons.get(name))
              for name, fs in sorted(by_split.items(), key=lambda kv: SPLITS.index(kv[0]))}
    return Dataset(path, "tfrecord", classes, splits, notes=notes)
