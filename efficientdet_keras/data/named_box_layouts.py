"""Finding the layouts whose boxes carry class names in a folder, and their splits: CVAT XML,
LabelMe JSON, the TensorFlow Object Detection CSV, the AutoML Vision CSV, Open Images, Label
Studio's JSON, CreateML, VIA and KITTI.

Each finder returns (format, {split: (location, [NamedBoxes])}, class order or None, notes)
for `layouts.named_boxes_dataset`, or None when the folder does not hold its layout.
"""

import glob
import os
from typing import Dict, List, Optional, Tuple

from efficientdet_keras.data.formats.named_boxes import NamedBoxes
from efficientdet_keras.data.split_names import (split_folders, split_folders_below,
                                                  split_name)

Layout = Tuple[str, Dict[str, Tuple[str, List[NamedBoxes]]], Optional[List[str]], List[str]]

# The subset CVAT and datumaro give data that was never split.
_UNSPLIT = ("", "default")


def cvat_layout(path: str) -> Optional[Layout]:
    """CVAT for images XML files in the folder or its annotations/ folder: one file split by
    its images' `subset`, or one file per split named after it (datumaro's); or in split
    folders beside their images (globox's train/annotations.xml), split by the folder."""
    from efficientdet_keras.data.formats.cvat_xml import is_cvat_file, read_cvat_file
    in_splits = {f: split for split, folder in split_folders(path).items()
                 for f in sorted(glob.glob(os.path.join(glob.escape(folder), "*.xml")))
                 if is_cvat_file(f)}
    files = [f for where in (path, os.path.join(path, "annotations"))
             for f in sorted(glob.glob(os.path.join(glob.escape(where), "*.xml")))
             if is_cvat_file(f)] + list(in_splits)
    if not files:
        return None
    labels: List[str] = []
    splits: Dict[str, Tuple[str, List[NamedBoxes]]] = {}
    for xml_file in files:
        file_labels, subsets = read_cvat_file(xml_file)
        labels += [name for name in file_labels if name not in labels]
        stem = os.path.splitext(os.path.basename(xml_file))[0]
        for subset, images in subsets.items():
            # Data never split is train, unless a file of its own names the split.
            split = split_name(subset) if subset.lower() not in _UNSPLIT else \
                in_splits.get(xml_file) or split_name(stem) or "train"
            if split is None:
                raise ValueError("%s: subset %r is not a split (train, validation or test)"
                                 % (xml_file, subset))
            location, before = splits.get(split, ("", []))
            splits[split] = (",".join(filter(None, [location, xml_file])), before + images)
    return "cvat", splits, labels, []


def named_boxes_layout(path: str) -> Optional[Layout]:
    """LabelMe JSON or the TensorFlow Object Detection CSV in split folders or in the folder
    itself (as train; CSVs also split by file name), an AutoML Vision CSV, Open Images box
    files, Label Studio's, CreateML and VIA JSON, or folders of KITTI label files."""
    return _labelme_or_box_csv(path) or _automl(path) or _open_images(path) or \
        _json_exports(path) or _kitti(path)


def _labelme_or_box_csv(path: str) -> Optional[Layout]:
    from efficientdet_keras.data.formats.box_csv import is_box_csv, read_box_csv
    from efficientdet_keras.data.formats.labelme import labelme_files, read_labelme_file
    folders = split_folders(path) or {"train": path}
    labelme = {split: labelme_files(folder) for split, folder in folders.items()}
    if any(labelme.values()):
        return "labelme", {split: (folders[split], [read_labelme_file(f) for f in files])
                           for split, files in labelme.items() if files}, None, []
    tables = {split: sorted(os.path.join(folder, n) for n in os.listdir(folder)
                            if n.lower().endswith(".csv")
                            and is_box_csv(os.path.join(folder, n)))
              for split, folder in folders.items()}
    if folders == {"train": path} and len(tables["train"]) > 1:  # Split by the file names.
        tables = {}
        for table in sorted(f for f in os.listdir(path) if f.lower().endswith(".csv")):
            split = split_name(os.path.splitext(table)[0])
            if split and is_box_csv(os.path.join(path, table)):
                tables.setdefault(split, []).append(os.path.join(path, table))
    if any(tables.values()):
        return "csv", {split: (",".join(files), [image for f in files for image in read_box_csv(f)])
                       for split, files in tables.items() if files}, None, []
    return None


def _automl(path: str) -> Optional[Layout]:
    """The folder's AutoML Vision CSV (the first by name, when there are several)."""
    from efficientdet_keras.data.formats.automl_csv import is_automl_csv, read_automl_csv
    tables = [f for f in sorted(glob.glob(os.path.join(glob.escape(path), "*.csv")))
              if is_automl_csv(f)]
    if not tables:
        return None
    splits, unassigned = read_automl_csv(tables[0])
    notes = ["%d UNASSIGNED images read into train" % unassigned] if unassigned else []
    return "automl_csv", {split: (tables[0], images) for split, images in splits.items()}, \
        None, notes


def _open_images(path: str) -> Optional[Layout]:
    from efficientdet_keras.data.formats.open_images import (box_files, class_descriptions,
                                                            read_box_file)
    files = box_files(path)
    if not files:
        return None
    names = class_descriptions(path)
    splits: Dict[str, Tuple[str, List[NamedBoxes]]] = {}
    for word, box_file in files.items():
        split = split_name(word) or ("train" if word.lower() in _UNSPLIT else None)
        if split is None:
            raise ValueError("%s: %r is not a split (train, validation or test)"
                             % (box_file, word))
        splits[split] = (box_file, read_box_file(box_file, word, names))
    label_ids = names is None and any(name.startswith("/m/") for _, images in splits.values()
                                      for image in images for name, _ in image.objects)
    notes = ["no class descriptions CSV: the classes are named by their Open Images label "
             "ids"] if label_ids else []
    return "open_images", splits, None, notes


def _kitti(path: str) -> Optional[Layout]:
    """Folders of KITTI label files below the dataset folder, split by their paths
    (datumaro's train/label_2/), their images found by name in the dataset folder."""
    from efficientdet_keras.data.formats.kitti import is_kitti_folder, read_kitti_folder
    from efficientdet_keras.data.image_index import ImageIndex
    folders = split_folders_below(path, lambda folder, files: any(
        f.lower().endswith(".txt") for f in files) and is_kitti_folder(folder), depth=3)
    if not folders:
        return None
    index = ImageIndex(path)
    splits: Dict[str, Tuple[str, List[NamedBoxes]]] = {}
    dont_care = 0
    for split, folder in folders.items():
        images, regions = read_kitti_folder(folder, index)
        splits[split] = (folder, images)
        dont_care += regions
    notes = ["%d DontCare regions left out: KITTI marks unlabelled areas with them, not "
             "objects" % dont_care] if dont_care else []
    return "kitti", splits, None, notes


def _json_exports(path: str) -> Optional[Layout]:
    """A split per JSON file, in split folders or in the folder (split by the file names; one
    file alone is train): Label Studio's JSON and JSON-MIN, CreateML and VIA. Images are found
    by name, beside the file or in the dataset folder."""
    from efficientdet_keras.data.image_index import ImageIndex
    folders = split_folders(path)
    files = {split: sorted(glob.glob(os.path.join(glob.escape(folder), "*.json")))
             for split, folder in folders.items()}
    at_root = sorted(glob.glob(os.path.join(glob.escape(path), "*.json")))
    exports = {}  # {json file: (format, split or None, its content)}
    for split, json_file in [(s, f) for s, fs in files.items() for f in fs] + \
            [(None, f) for f in at_root]:
        found = _json_export(json_file)
        if found:
            exports[json_file] = (found[0], split, found[1])
    if not exports:
        return None
    formats = sorted({data_format for data_format, _, _ in exports.values()})
    if len(formats) > 1:
        raise ValueError("%s holds exports of %s; keep one format" % (path, " and ".join(formats)))
    index = ImageIndex(path)
    splits: Dict[str, Tuple[str, List[NamedBoxes]]] = {}
    left_out = 0
    for json_file, (data_format, split, data) in exports.items():
        split = split or split_name(os.path.splitext(os.path.basename(json_file))[0]) or (
            "train" if len(exports) == 1 else None)
        if split is None:
            raise ValueError("%s: %s; name each file after its split (train, val, test) or "
                             "put it in a split folder" % (path, ", ".join(exports)))
        if split in splits:
            raise ValueError("%s and %s are both the %s split" % (splits[split][0], json_file,
                                                                 split))
        images, missing = _read_json_export(json_file, data_format, data, index)
        splits[split] = (json_file, images)
        left_out += missing
    notes = ["%d tasks left out: their images are not in the dataset folder (see the "
             "warnings)" % left_out] if left_out else []
    return formats[0], splits, None, notes


def _json_export(json_file: str):
    """(format, parsed content) of a Label Studio, CreateML or VIA file, else None. A COCO
    file (which can be large) is told apart by its first bytes and not parsed here."""
    import json
    from efficientdet_keras.data.formats.createml_via import is_createml, via_images
    from efficientdet_keras.data.formats.label_studio import is_label_studio_export
    try:
        with open(json_file, "rb") as f:
            head = f.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
        if not head.startswith(b"[") and b'"regions"' not in head and b"_via_" not in head:
            return None
        with open(json_file, encoding="utf-8-sig") as f:
            data = json.load(f)
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if is_label_studio_export(data):
        return "label_studio", data
    if is_createml(data):
        return "createml", data
    entries = via_images(data)
    return ("via", entries) if entries else None


def _read_json_export(json_file: str, data_format: str, data, index):
    """([NamedBoxes], how many tasks were left out) of one file."""
    from efficientdet_keras.data.formats.createml_via import read_createml, read_via
    from efficientdet_keras.data.formats.label_studio import read_label_studio_export
    if data_format == "label_studio":
        return read_label_studio_export(json_file, data, index)
    reader = read_createml if data_format == "createml" else read_via
    return reader(json_file, data, index), 0
