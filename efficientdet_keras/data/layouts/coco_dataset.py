"""A Dataset of COCO JSON files (COCO's own layout, any tool's COCO export, Roboflow's), and the
image folder and split of each file."""

import collections
import os
from typing import Dict, Optional, Sequence

from efficientdet_keras.data.dataset_object import Dataset, DataSplit
from efficientdet_keras.data.formats.classes import annotated_root, coco_classes
from efficientdet_keras.data.formats.coco_json import parse_coco_file
from efficientdet_keras.data.formats.records import with_class_ids
from efficientdet_keras.data.sources import RecordsSource
from efficientdet_keras.data.split_names import SPLITS, split_name

_IMAGE_DIR_NAMES = ("images", "JPEGImages", "img", "imgs")


def coco_dataset(path: str, splits: Dict[str, tuple], data_format: str = "coco",
                 title: str = "COCO JSON") -> Dataset:
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
    notes += _unmarked_root_note(first["categories"], first["annotations"], classes)

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
    return Dataset(path, data_format, classes, found, skipped, notes, title)


def _unmarked_root_note(categories, annotations, classes) -> list:
    """A note for a category 0 that looks like Roboflow's root (supercategory "none", no box)
    while the others do not name it as their supercategory (so it is kept as a class)."""
    root = next((c for c in categories if isinstance(c, dict) and c.get("id") == 0), None)
    if root is None or root.get("supercategory") != "none" or len(categories) < 2 or \
            0 not in classes.data_ids.values() or \
            any(isinstance(a, dict) and a.get("category_id") == 0 for a in annotations):
        return []
    return ["category %r (id 0, supercategory \"none\", no boxes) looks like Roboflow's root "
            "category, but the other categories do not name it as theirs: kept as a class the "
            "model never sees; drop it from the categories if it is the root" % root.get("name")]


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


# COCO's own downloads and datumaro's COCO export put these beside the instances files; they
# hold captions, keypoints, image lists, stuff or panoptic segments, not the detection boxes.
NOT_INSTANCES_PREFIXES = ("captions_", "person_keypoints_", "image_info_", "stuff_", "panoptic_")


def coco_splits(json_files: Sequence[str]) -> Dict[str, tuple]:
    """{split: (json file, image folder)}; one file without a split in its name is train.

    A split's file is its instances file: files of the other COCO tasks (captions, keypoints,
    image info, stuff, panoptic) are left out by name, and among several files of one split
    an `instances_*` one is taken.
    """
    candidates = [f for f in json_files
                  if not os.path.basename(f).lower().startswith(NOT_INSTANCES_PREFIXES)]
    if not candidates:
        raise ValueError("%s hold captions, keypoints, image lists, stuff or panoptic "
                         "annotations, no instances_*.json with the detection boxes"
                         % ", ".join(json_files))
    by_split: Dict[str, list] = {}
    for json_file in candidates:
        name = split_name(os.path.splitext(os.path.basename(json_file))[0])
        if name is None and len(candidates) == 1:
            name = "train"
        if name is not None:
            by_split.setdefault(name, []).append(json_file)
    if not by_split:
        raise ValueError("none of %s names a split (train, val or test) in its file name"
                         % ", ".join(candidates))
    return {name: (instances_first(files), None) for name, files in by_split.items()}


def instances_first(files: Sequence[str]) -> str:
    """COCO's instances_<split>.json among a split's files, else the first by name."""
    return next((f for f in files if os.path.basename(f).lower().startswith("instances_")),
                files[0])
