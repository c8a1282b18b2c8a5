"""Roboflow's COCO export (and supervision's `as_coco`): train/, valid/, test/, each with
_annotations.coco.json beside its images."""

import glob
import os
from typing import Optional

from efficientdet_keras.data.layouts.row import Found, Layout, ReadOptions

ROBOFLOW_ANNOTATIONS = "_annotations.coco.json"


def find(path: str) -> Optional[Found]:
    """{split: its JSON file} of the split folders that hold one."""
    if not os.path.isdir(path):
        return None
    from efficientdet_keras.data.split_names import split_name
    files = {split_name(os.path.basename(os.path.dirname(f))): f for f in sorted(
        glob.glob(os.path.join(glob.escape(path), "*", ROBOFLOW_ANNOTATIONS)))}
    files.pop(None, None)
    return Found(path, files, tuple(files.values())) if files else None


def read(found: Found, options: ReadOptions):
    from efficientdet_keras.data.layouts.coco_dataset import coco_dataset
    return coco_dataset(found.path, {split: (f, os.path.dirname(f))
                                     for split, f in found.parts.items()},
                        LAYOUT.data_format, LAYOUT.title)


LAYOUT = Layout(
    name="roboflow", data_format="roboflow", title="COCO JSON (Roboflow layout)",
    writers="Roboflow COCO export (and supervision's `as_coco`)",
    recognised="`train/`, `valid/`, `test/`, each with `_annotations.coco.json` beside its "
               "images",
    splits="the folder names", sign="Roboflow's train/%s" % ROBOFLOW_ANNOTATIONS,
    find=find, read=read)
