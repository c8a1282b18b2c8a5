"""YOLO label files beside their images with nothing that names the classes (globox's YOLO
exports write no names file): the classes are named by their ids."""

import os
from typing import Optional

from efficientdet_keras.data.layouts.row import Found, Layout, ReadOptions


def find(path: str) -> Optional[Found]:
    if not os.path.isdir(path):
        return None
    from efficientdet_keras.data.formats.yolo_darknet import unnamed_labelled_folder
    from efficientdet_keras.data.split_names import split_folders
    layout = unnamed_labelled_folder(path, split_folders(path))
    return Found(path, layout, (path,)) if layout else None


def read(found: Found, options: ReadOptions):
    """With one note that says where the names would go."""
    from efficientdet_keras.data.formats.yolo_darknet import CLASS_FILES
    from efficientdet_keras.data.layouts.yolo_dataset import yolo_dataset
    note = ("no %s or data.yaml names the classes: they are named by their ids 0..%d; put %s "
            "(a name a line, in id order) in %s to name them"
            % (" or ".join(CLASS_FILES), len(found.parts.names) - 1, CLASS_FILES[0], found.path))
    return yolo_dataset(found.path, found.parts, [note], title=LAYOUT.title)


LAYOUT = Layout(
    name="unnamed_yolo", data_format="yolo", title="YOLO labels without class names",
    writers="YOLO label files with no names file (globox's YOLO exports)",
    recognised="label files of YOLO lines beside the images, in split folders or in the folder, "
               "and no `classes.txt`, `obj.names` or `data.yaml`: read last, the classes named "
               "by their ids, and the printout says where `classes.txt` would name them",
    splits="the folder names (the folder itself is train)",
    sign="YOLO label files", find=find, read=read, fallback=True)
