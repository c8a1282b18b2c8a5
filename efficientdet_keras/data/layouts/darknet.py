"""YOLO without a data.yaml: Darknet's obj.data ("YOLO 1.1", CVAT's and datumaro's `yolo`
export), or label files beside their images with classes.txt or obj.names (labelImg's,
globox's `yolo_darknet`, Label Studio's YOLO)."""

import os
from typing import Optional

from efficientdet_keras.data.layouts.row import Found, Layout, ReadOptions


def find(path: str) -> Optional[Found]:
    """The YoloDataset of obj.data, or of the labelled folders a names file sits in (the folder
    or its split folders)."""
    if not os.path.isdir(path):
        return None
    from efficientdet_keras.data.formats.yolo_darknet import (classes_file, read_darknet_data,
                                                               read_labelled_folder)
    from efficientdet_keras.data.split_names import split_folders
    if os.path.isfile(os.path.join(path, "obj.data")):
        return Found(path, read_darknet_data(os.path.join(path, "obj.data")),
                     claims=(os.path.join(path, "obj.data"),))
    folders = split_folders(path)
    names_file = classes_file(path) or next(
        (f for f in map(classes_file, folders.values()) if f), None)
    if names_file is None:
        return None
    layout = read_labelled_folder(path, names_file, folders)
    return Found(path, layout, (names_file,)) if layout else None


def read(found: Found, options: ReadOptions):
    from efficientdet_keras.data.layouts.yolo_dataset import yolo_dataset
    return yolo_dataset(found.parts.yaml_path, found.parts, title=LAYOUT.title)


LAYOUT = Layout(
    name="darknet", data_format="yolo", title="YOLO (Darknet)",
    writers="YOLO without a data.yaml: Darknet's \"YOLO 1.1\" (CVAT's and datumaro's `yolo` "
            "export), labelImg's YOLO folders, globox's `yolo_darknet` and Label Studio's YOLO",
    recognised="`obj.data` with `obj.names` and its image lists; else `classes.txt` or "
               "`obj.names` with label files beside the images, in `train/`, `valid/`, `test/` "
               "or in the folder",
    splits="the lists `obj.data` names; else the folder names (the folder itself is train)",
    sign="Darknet's obj.data or classes.txt with label files", find=find, read=read)
