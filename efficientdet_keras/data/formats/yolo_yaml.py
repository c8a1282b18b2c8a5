"""Reading an Ultralytics / YOLO data.yaml: the dataset's root, its splits' images and its
class names (the label files are read by `data.formats.yolo`).

Layout read (the one Ultralytics and Roboflow's "YOLOv5/v8" exports write):
  <root>/data.yaml            path, train, val (or valid, validation), test, names, nc
  <root>/images/<split>/a.jpg the images (any folder depth); with no split keys in the yaml
                              (supervision's), the split folders <split>/images/ or
                              images/<split>/ beside it
"""

import dataclasses
import os
from typing import Dict, List, Optional, Tuple

from absl import logging

from efficientdet_keras.data.formats.image_header import IMAGE_EXTENSIONS
from efficientdet_keras.data.split_names import SPLIT_FOLDER_NAMES

_SPLIT_KEYS = ("train", "val", "test")


@dataclasses.dataclass
class YoloDataset:
    """What a data.yaml describes.

    splits: {"train": [image paths], "val": [...], "test": [...]}, the splits the file names.
    names: the class names in YOLO class id order; model class id = index + 1.
    class_ids: the YOLO class id of each name when they are not 0..K-1 (a `names` mapping
      keyed 1..K, as labelformat writes), else None.
    keypoint_fields: the values after a pose label's box (K * 2 or K * 3 of `kpt_shape`);
      0 for detection labels.
    """
    yaml_path: str
    root: str
    splits: Dict[str, List[str]]
    names: List[str]
    keypoint_fields: int = 0
    class_ids: Optional[List[int]] = None
    notes: List[str] = dataclasses.field(default_factory=list)


def read_yolo_yaml(path: str) -> YoloDataset:
    """Reads an Ultralytics data.yaml.

    `path` is the dataset root (relative to the yaml's folder; the yaml's folder when absent).
    Each of train (required), val and test is a folder of images (searched recursively), a .txt
    file listing image paths one per line (relative paths are relative to the root), or a list
    of these. As Ultralytics does for Roboflow's exports (`train: ../train/images` beside a
    data.yaml in the dataset folder), a "../" path that does not exist is tried without it.
    `names` is a list or a {id: name} dict (ids 0..K-1 as Ultralytics numbers them, or any
    other whole numbers the label files use); `nc`, when given, must equal its length. A file
    with only val or test images (an evaluation set) has no train split.

    A test split whose folder does not exist is left out with a warning.

    Raises:
      FileNotFoundError naming the yaml, or the key and the path that does not exist.
      ValueError naming the yaml and the key for missing or malformed keys, and for a folder
      without images.
    """
    import yaml  # Only this reader needs it; importing the data package stays light.
    if not os.path.isfile(path):
        raise FileNotFoundError("YOLO data.yaml not found: %s" % path)
    from efficientdet_keras.utils.yaml_files import load_yaml_file
    try:
        data = load_yaml_file(path)
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise ValueError("%s is not valid YAML: %s" % (path, e)) from None
    if not isinstance(data, dict):
        raise ValueError("%s: expected a mapping with train, val and names keys" % path)
    root = _root(path, data.get("path"))
    names, class_ids = _names(path, data)
    notes = ["%s: class %s's name %s is a YAML %s, not text (an anchor's alias pasted where a "
             "name was meant?); it is read as the text %r"
             % (path, i, value, type(value).__name__, str(value))
             for i, value in (data["names"].items() if isinstance(data["names"], dict)
                              else enumerate(data["names"]))
             if isinstance(value, (list, dict))]
    sources = _split_keys(path, data) or _split_folders(root)
    if not sources:
        raise ValueError("%s: no 'train', 'val' or 'test' key (a folder of images, a .txt list "
                         "of them, or a list of these), nor train/images/ or images/train/ "
                         "beside it" % path)
    splits = {}
    for split in _SPLIT_KEYS:
        if split not in sources:
            continue
        key, value = sources[split]
        try:
            splits[split] = _split_images(path, root, key, value)
        except FileNotFoundError as e:
            if split != "test":
                raise
            # Exports write a test line even when they hold no test images; it is not needed.
            logging.warning("%s; reading the dataset without its test split", e)
    return YoloDataset(path, root, splits, names, _keypoint_fields(path, data), class_ids,
                       notes)


def _keypoint_fields(yaml_path: str, data: dict) -> int:
    """K * dims of an Ultralytics pose dataset's `kpt_shape: [K, dims]` (dims 2: x y, 3: x y
    visibility); 0 without one.

    Raises:
      ValueError naming the file for a kpt_shape that is not [K, 2] or [K, 3].
    """
    shape = data.get("kpt_shape")
    if shape is None:
        return 0
    if not (isinstance(shape, (list, tuple)) and len(shape) == 2 and
            all(isinstance(v, int) and not isinstance(v, bool) for v in shape) and
            shape[0] > 0 and shape[1] in (2, 3)):
        raise ValueError("%s: kpt_shape is [keypoints, 2 or 3], not %r" % (yaml_path, shape))
    return shape[0] * shape[1]


def _split_keys(yaml_path: str, data: dict) -> Dict[str, tuple]:
    """{split: (key, value)} of the keys that name splits, in any of their spellings.

    Raises:
      ValueError naming both keys when two spellings of one split are given.
    """
    found: Dict[str, tuple] = {}
    for key, value in data.items():
        split = SPLIT_FOLDER_NAMES.get(str(key).lower())
        if split is None or not value:
            continue
        if split in found:
            raise ValueError("%s: '%s' and '%s' both name the %s split; keep one"
                             % (yaml_path, found[split][0], key, split))
        found[split] = (key, value)
    return found


def _split_folders(root: str) -> Dict[str, tuple]:
    """For a data.yaml without split keys (supervision writes only the names): {split:
    (folder, folder)} of the split folders beside it, <split>/images/ or images/<split>/."""
    found: Dict[str, tuple] = {}
    for parent, child in ((root, "images"), (os.path.join(root, "images"), "")):
        if not os.path.isdir(parent):
            continue
        for name in sorted(os.listdir(parent)):
            split = SPLIT_FOLDER_NAMES.get(name.lower())
            folder = os.path.join(parent, name, child)
            if split and split not in found and os.path.isdir(folder):
                found[split] = (os.path.relpath(folder, root), folder)
    return found


def _root(yaml_path: str, value) -> str:
    folder = os.path.dirname(os.path.abspath(yaml_path))
    if value is None or value == "":
        return folder
    if not isinstance(value, str):
        raise ValueError("%s: 'path' must be a folder, not %r" % (yaml_path, value))
    root = os.path.normpath(os.path.join(folder, os.path.expanduser(value)))
    if not os.path.isdir(root):
        raise FileNotFoundError("%s: 'path': dataset folder %s does not exist" % (yaml_path, root))
    return root


def _names(yaml_path: str, data: dict) -> Tuple[List[str], Optional[List[int]]]:
    """The class names in id order, and their ids when they are not 0..K-1."""
    names, class_ids = data.get("names"), None
    if isinstance(names, dict):
        try:
            by_id = {int(k): str(v) for k, v in names.items()
                     if not isinstance(k, bool) and int(k) == k and int(k) >= 0}
        except (TypeError, ValueError):
            by_id = {}
        if len(by_id) != len(names):
            raise ValueError("%s: 'names' keys must be class ids, whole numbers from 0, not %s"
                             % (yaml_path, ", ".join(repr(k) for k in names)))
        ids = sorted(by_id)
        names = [by_id[i] for i in ids]
        if ids != list(range(len(ids))):
            class_ids = ids
    elif isinstance(names, (list, tuple)):
        names = [str(name) for name in names]
    else:
        raise ValueError("%s: 'names' must be a list of class names or a {0: name, ...} mapping%s"
                         % (yaml_path, "" if names is None else ", not %r" % (names,)))
    if not names:
        raise ValueError("%s: 'names' lists no classes" % yaml_path)
    nc = data.get("nc")
    if nc is not None and (isinstance(nc, bool) or nc != len(names)):
        raise ValueError("%s: 'nc' is %r but 'names' has %d classes" % (yaml_path, nc, len(names)))
    return names, class_ids


def _split_images(yaml_path: str, root: str, key: str, value) -> List[str]:
    sources = value if isinstance(value, (list, tuple)) else [value]
    images = []
    for source in sources:
        if not isinstance(source, str) or not source:
            raise ValueError("%s: '%s' must be a folder, a .txt list of images or a list of "
                             "these, not %r" % (yaml_path, key, source))
        images.extend(_images_of(yaml_path, root, key, source))
    return images


def _images_of(yaml_path: str, root: str, key: str, source: str) -> List[str]:
    path = os.path.normpath(os.path.join(root, os.path.expanduser(source)))
    if not os.path.exists(path) and source.startswith("../"):
        path = os.path.normpath(os.path.join(root, source[3:]))
    if os.path.isdir(path):
        images = images_in(path)
        if not images:
            raise ValueError("%s: '%s': %s holds no images (%s)" % (
                yaml_path, key, path, ", ".join(e[1:] for e in IMAGE_EXTENSIONS)))
        return images
    if os.path.isfile(path):
        if not path.lower().endswith(".txt"):
            raise ValueError("%s: '%s': %s is neither a folder nor a .txt list of images"
                             % (yaml_path, key, path))
        with open(path, encoding="utf-8-sig") as f:
            return [os.path.normpath(os.path.join(root, line.strip()))
                    for line in f if line.strip()]
    raise FileNotFoundError("%s: '%s': %s does not exist" % (yaml_path, key, path))


def images_in(folder: str) -> List[str]:
    """The images below a folder, sorted; symlinked folders are followed (once each, so that a
    link to a folder above ends)."""
    found, seen = [], set()
    for parent, folders, files in os.walk(folder, followlinks=True):
        seen.add(os.path.realpath(parent))
        folders[:] = [f for f in folders
                      if os.path.realpath(os.path.join(parent, f)) not in seen]
        found.extend(os.path.join(parent, name) for name in files
                     if name.lower().endswith(IMAGE_EXTENSIONS))
    return sorted(found)
