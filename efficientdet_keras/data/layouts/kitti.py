"""KITTI label files (datumaro's `kitti` and `kitti_detection`, labelformat's and FiftyOne's
KITTI exports): a class name and 14 numbers a line, in label_2/ or labels/, the images found by
the files' names."""

import os
from typing import Dict, Optional, Tuple

from efficientdet_keras.data.layouts.row import Found, Layout, ReadOptions


def find(path: str) -> Optional[Found]:
    """{split: folder} of the folders of KITTI label files below the dataset folder, split by
    their paths (datumaro's train/label_2/)."""
    if not os.path.isdir(path):
        return None
    from efficientdet_keras.data.formats.kitti import is_kitti_folder
    from efficientdet_keras.data.split_names import split_folders_below
    folders = split_folders_below(path, lambda folder, files: any(
        f.lower().endswith(".txt") for f in files) and is_kitti_folder(folder), depth=3)
    return Found(path, folders, tuple(folders.values())) if folders else None


def read(found: Found, options: ReadOptions):
    """DontCare regions are left out, counted in one note."""
    from efficientdet_keras.data.formats.kitti import read_kitti_folder
    from efficientdet_keras.data.image_index import ImageIndex
    from efficientdet_keras.data.layouts.named_dataset import named_boxes_dataset
    index = ImageIndex(found.path)
    splits: Dict[str, Tuple[str, list]] = {}
    dont_care = 0
    for split, folder in found.parts.items():
        images, regions = read_kitti_folder(folder, index)
        splits[split] = (folder, images)
        dont_care += regions
    notes = ["%d DontCare regions left out: KITTI marks unlabelled areas with them, not "
             "objects" % dont_care] if dont_care else []
    return named_boxes_dataset(found.path, LAYOUT.data_format, splits, notes=notes,
                               title=LAYOUT.title)


LAYOUT = Layout(
    name="kitti", data_format="kitti", title="KITTI",
    writers="KITTI (datumaro's `kitti` and `kitti_detection`, labelformat's and FiftyOne's "
            "KITTI exports)",
    recognised="folders of `.txt` label files whose lines are a class name and 14 numbers "
               "(KITTI's `label_2/`, or `labels/`), up to three levels down; each file's image is "
               "the dataset folder's image of its name (`image_2/`, `data/`, `images/`). "
               "`DontCare` regions are left out, and the printout says how many",
    splits="the split word in the folder's path (`train/label_2/`), else train",
    sign="KITTI labels", find=find, read=read)
