"""LabelMe JSON (LabelMe itself; supervision's and globox's `labelme`): a .json per image beside
it, in split folders or in the folder itself."""

import os
from typing import Optional

from efficientdet_keras.data.layouts.row import Found, Layout, ReadOptions


def find(path: str) -> Optional[Found]:
    """{split: its LabelMe files}."""
    if not os.path.isdir(path):
        return None
    from efficientdet_keras.data.formats.labelme import labelme_files
    from efficientdet_keras.data.split_names import split_folders
    folders = split_folders(path) or {"train": path}
    files = {split: labelme_files(folder) for split, folder in folders.items()}
    files = {split: (folders[split], found) for split, found in files.items() if found}
    return Found(path, files, tuple(f for _, found in files.values() for f in found)) \
        if files else None


def read(found: Found, options: ReadOptions):
    from efficientdet_keras.data.formats.labelme import read_labelme_file
    from efficientdet_keras.data.layouts.named_dataset import named_boxes_dataset
    return named_boxes_dataset(found.path, LAYOUT.data_format, {
        split: (folder, [read_labelme_file(f) for f in files])
        for split, (folder, files) in found.parts.items()}, title=LAYOUT.title)


LAYOUT = Layout(
    name="labelme", data_format="labelme", title="LabelMe JSON",
    writers="LabelMe JSON (LabelMe itself; supervision's and globox's `labelme`)",
    recognised="a `.json` per image beside it (`shapes`: rectangles, polygons and circles are "
               "boxes), in `train/`, `valid/`, `test/`, else in the folder itself",
    splits="the folder names (the folder itself is train)", sign="LabelMe JSON",
    find=find, read=read)
