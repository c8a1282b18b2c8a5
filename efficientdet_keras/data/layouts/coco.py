"""COCO JSON: COCO's own download (annotations/instances_<split>.json with the images in a
folder per split) and the COCO exports of datumaro, CVAT, globox, labelformat, Label Studio and
FiftyOne, or one .json file given as the dataset."""

import glob
import os
from typing import Optional

from efficientdet_keras.data.layouts.row import Found, Layout, ReadOptions


def find(path: str) -> Optional[Found]:
    """The .json given, else annotations/*.json, else *.json in the folder. It claims the
    files that look like COCO (an "images" key near their start); files of which none does
    are still read as COCO, to be refused by name, but claim nothing."""
    if os.path.isfile(path):
        return Found(path, [path], (path,)) if path.lower().endswith(".json") else None
    jsons = sorted(glob.glob(os.path.join(glob.escape(path), "annotations", "*.json"))) or \
        sorted(glob.glob(os.path.join(glob.escape(path), "*.json")))
    return Found(path, jsons, tuple(filter(_looks_like_coco, jsons))) if jsons else None


def _looks_like_coco(json_file: str) -> bool:
    """An "images" key in the first 64 KiB: after COCO's info and licenses, before its
    annotations; a label map, a Label Studio notes.json or a class hierarchy has none."""
    try:
        with open(json_file, "rb") as f:
            return b'"images"' in f.read(1 << 16)
    except OSError:
        return False


def read(found: Found, options: ReadOptions):
    """A split per instances file; the other COCO tasks' files (captions_*, ...) passed over."""
    from efficientdet_keras.data.layouts.coco_dataset import coco_dataset, coco_splits
    return coco_dataset(found.path, coco_splits(found.parts), LAYOUT.data_format, LAYOUT.title)


LAYOUT = Layout(
    name="coco", data_format="coco", title="COCO JSON",
    writers="COCO JSON (COCO's own download; datumaro's, CVAT's, globox's, labelformat's, Label "
            "Studio's, FiftyOne's and pylabel's COCO exports)",
    recognised="`annotations/*.json`, else `*.json` in the folder; of a split's files the "
               "`instances_*` one",
    splits="`train`, `val`, `test` in the file names (one file alone is train)",
    sign="COCO JSON (annotations/*.json or *.json)", find=find, read=read)
