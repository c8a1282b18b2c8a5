"""The TensorFlow Object Detection CSV (filename,width,height,class,xmin,ymin,xmax,ymax;
Roboflow's _annotations.csv), in split folders or in the folder, split by the file names."""

import os
from typing import Optional

from efficientdet_keras.data.layouts.row import Found, Layout, ReadOptions


def find(path: str) -> Optional[Found]:
    """{split: its CSV files}."""
    if not os.path.isdir(path):
        return None
    from efficientdet_keras.data.formats.box_csv import is_box_csv
    from efficientdet_keras.data.split_names import split_folders, split_name
    folders = split_folders(path) or {"train": path}
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
    tables = {split: files for split, files in tables.items() if files}
    return Found(path, tables, tuple(f for fs in tables.values() for f in fs)) \
        if tables else None


def read(found: Found, options: ReadOptions):
    from efficientdet_keras.data.formats.box_csv import read_box_csv
    from efficientdet_keras.data.layouts.named_dataset import named_boxes_dataset
    return named_boxes_dataset(found.path, LAYOUT.data_format, {
        split: (",".join(files), [image for f in files for image in read_box_csv(f)])
        for split, files in found.parts.items()}, title=LAYOUT.title)


LAYOUT = Layout(
    name="csv", data_format="csv", title="CSV (TensorFlow Object Detection)",
    writers="TensorFlow Object Detection CSV (Roboflow's `_annotations.csv`)",
    recognised="`.csv` files headed `filename,width,height,class,xmin,ymin,xmax,ymax`, images "
               "beside them, in split folders or in the folder",
    splits="the folder names, else `train`, `val`, `test` in the file names",
    sign="the Object Detection CSV", find=find, read=read)
