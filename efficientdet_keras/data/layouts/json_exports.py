"""The JSON exports that hold a split per file (Label Studio's JSON and JSON-MIN, CreateML and
VIA), in split folders or in the folder, split by the file names (one file alone is train);
their images are found by name in the dataset folder. Shared by the three layouts."""

import glob
import json
import os
from typing import Dict, List, Optional, Tuple

from efficientdet_keras.data.layouts.row import Found


def find_exports(path: str, data_format: str) -> Optional[Found]:
    """{json file: (split or None, its content)} of the folder's exports when they are
    `data_format`'s; None when there are none, or they are another's.

    Raises:
      ValueError when the folder mixes two of these formats.
    """
    if not os.path.isdir(path):
        return None
    from efficientdet_keras.data.split_names import split_folders
    in_splits = [(split, f) for split, folder in split_folders(path).items()
                 for f in sorted(glob.glob(os.path.join(glob.escape(folder), "*.json")))]
    at_root = [(None, f) for f in sorted(glob.glob(os.path.join(glob.escape(path), "*.json")))]
    exports = {}  # {json file: (format, split or None, its content)}
    for split, json_file in in_splits + at_root:
        found = _json_export(json_file)
        if found:
            exports[json_file] = (found[0], split, found[1])
    formats = sorted({export_format for export_format, _, _ in exports.values()})
    if len(formats) > 1:
        raise ValueError("%s holds exports of %s; keep one format" % (path, " and ".join(formats)))
    if formats != [data_format]:
        return None
    return Found(path, {f: (split, data) for f, (_, split, data) in exports.items()},
                 tuple(exports))


def read_exports(found: Found, data_format: str, title: str):
    """The Dataset of the files find_exports found; tasks whose images are not in the dataset
    folder are left out (each warned about) and counted in one note."""
    from efficientdet_keras.data.image_index import ImageIndex
    from efficientdet_keras.data.layouts.named_dataset import named_boxes_dataset
    from efficientdet_keras.data.split_names import split_name
    index = ImageIndex(found.path)
    splits: Dict[str, Tuple[str, List]] = {}
    left_out = 0
    for json_file, (split, data) in found.parts.items():
        split = split or split_name(os.path.splitext(os.path.basename(json_file))[0]) or (
            "train" if len(found.parts) == 1 else None)
        if split is None:
            raise ValueError("%s: %s; name each file after its split (train, val, test) or "
                             "put it in a split folder" % (found.path, ", ".join(found.parts)))
        if split in splits:
            raise ValueError("%s and %s are both the %s split" % (splits[split][0], json_file,
                                                                 split))
        images, missing = _read_json_export(json_file, data_format, data, index)
        splits[split] = (json_file, images)
        left_out += missing
    notes = ["%d tasks left out: their images are not in the dataset folder (see the "
             "warnings)" % left_out] if left_out else []
    return named_boxes_dataset(found.path, data_format, splits, notes=notes, title=title)


def _json_export(json_file: str):
    """(format, parsed content) of a Label Studio, CreateML or VIA file, else None. A COCO
    file (which can be large) is told apart by its first bytes and not parsed here."""
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
