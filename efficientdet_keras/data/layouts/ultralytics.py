"""YOLO with an Ultralytics data.yaml (Roboflow's, supervision's, datumaro's
`yolo_ultralytics`, globox's `yolo_v5`, labelformat's and FiftyOne's YOLOv5 exports)."""

import glob
import os
from typing import Optional

from efficientdet_keras.data.layouts.row import Found, Layout, ReadOptions


def find(path: str) -> Optional[Found]:
    """The .yaml given, else the folder's data.yaml, else the one .yaml in it with `names`."""
    if os.path.isfile(path):
        return Found(path, claims=(path,)) if path.lower().endswith((".yaml", ".yml")) else None
    if os.path.isfile(os.path.join(path, "data.yaml")):
        return Found(os.path.join(path, "data.yaml"), claims=(os.path.join(path, "data.yaml"),))
    import yaml
    from efficientdet_keras.utils.yaml_files import load_yaml_file
    for candidate in sorted(glob.glob(os.path.join(glob.escape(path), "*.y*ml"))):
        try:
            content = load_yaml_file(candidate)
        except (OSError, yaml.YAMLError, UnicodeDecodeError):
            continue
        if isinstance(content, dict) and "names" in content:
            return Found(candidate, claims=(candidate,))
    return None


def read(found: Found, options: ReadOptions):
    from efficientdet_keras.data.layouts.yolo_dataset import yolo_dataset
    return yolo_dataset(found.path, title=LAYOUT.title)


LAYOUT = Layout(
    name="yolo", data_format="yolo", title="YOLO",
    writers="YOLO (Ultralytics; Roboflow's, supervision's, datumaro's `yolo_ultralytics`, "
            "globox's `yolo_v5`, labelformat's, FiftyOne's and pylabel's exports)",
    recognised="`data.yaml` (or one `.yaml` with `names`: a list, or ids and names, "
               "`{0: cat, ...}` or labelformat's `{1: cat, ...}`)",
    splits="its `train`, `val` (or `valid`, `validation`), `test` keys, any of them (a "
           "`val`-only file is an evaluation set); without any, the folders "
           "`<split>/images/` or `images/<split>/`",
    sign="a YOLO data.yaml", find=find, read=read)
