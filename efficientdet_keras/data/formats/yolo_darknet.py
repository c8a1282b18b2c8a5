"""YOLO labels without an Ultralytics data.yaml: Darknet's "YOLO 1.1" (CVAT's YOLO export) and
folders of images with their label files beside them and the class names in classes.txt
(labelImg's and YOLO-mark's).

  <root>/obj.data        classes = 2, train = data/train.txt, valid = data/valid.txt,
                         names = data/obj.names (paths as Darknet's data/ folder names them)
  <root>/obj.names       one class name per line, class id = line index
  <root>/train.txt       one image path per line
  <root>/obj_train_data/a.jpg, a.txt

or
  <root>/classes.txt     one class name per line
  <root>/[train/ valid/ test/] a.jpg, a.txt
"""

import os
from typing import Dict, List, Optional

from efficientdet_keras.data.formats.yolo_yaml import YoloDataset, images_in
from efficientdet_keras.data.split_names import SPLIT_FOLDER_NAMES

CLASS_FILES = ("classes.txt", "obj.names")


def read_darknet_data(path: str) -> YoloDataset:
    """Reads a Darknet obj.data with its names file and image lists.

    Raises:
      ValueError naming the file and line for a line that is not `key = value`, a missing
      names or train key, or a names file without names; FileNotFoundError naming a file it
      points to that does not exist.
    """
    root = os.path.dirname(os.path.abspath(path))
    settings = {}
    with open(path, encoding="utf-8-sig") as f:
        for number, line in enumerate(f, 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            if "=" not in line:
                raise ValueError("%s, line %d: not a `key = value` line: %r"
                                 % (path, number, line.strip()))
            key, value = line.split("=", 1)
            settings[key.strip().lower()] = value.strip()
    for key in ("names", "train"):
        if not settings.get(key):
            raise ValueError("%s: no %r key" % (path, key))
    names = read_names(_resolve(root, settings["names"], path, "names"))
    splits, keys = {}, {}
    # Darknet writes `valid`, datumaro's export `val`: any split name is a split key.
    for key in [k for k in settings if k in SPLIT_FOLDER_NAMES and settings[k]]:
        split = SPLIT_FOLDER_NAMES[key]
        if split in keys:
            raise ValueError("%s: %r and %r both name the %s split" % (path, keys[split], key,
                                                                        split))
        keys[split] = key
        listing = _resolve(root, settings[key], path, key)
        with open(listing, encoding="utf-8-sig") as f:
            # A missing image is the pipeline's to name, with the others it skips.
            splits[split] = [_resolve(root, line.strip(), listing, "image", must_exist=False)
                             for line in f if line.strip()]
    return YoloDataset(path, root, splits, names)


def classes_file(folder: str) -> Optional[str]:
    """The folder's classes.txt or obj.names, else None."""
    return next((os.path.join(folder, n) for n in CLASS_FILES
                 if os.path.isfile(os.path.join(folder, n))), None)


def read_labelled_folder(folder: str, names_file: str,
                         split_folders: Dict[str, str]) -> YoloDataset:
    """Images with their label files beside them: in split_folders ({split: folder}), else in
    `folder` itself as train; class names from names_file.

    Raises:
      ValueError naming the folder when it holds no images.
    """
    splits = {split: images_in(path) for split, path in split_folders.items()}
    if not splits:
        splits = {"train": images_in(folder)}
    empty = [split for split, images in splits.items() if not images]
    if empty:
        raise ValueError("%s: the %s split holds no images" % (folder, empty[0]))
    return YoloDataset(names_file, folder, splits, read_names(names_file))


def unnamed_labelled_folder(folder: str, split_folders: Dict[str, str]) -> Optional[YoloDataset]:
    """Images with YOLO label files (`label_path_for`: beside them, or in labels/ for images/)
    but no file that names the classes (globox's YOLO exports write none): the classes are
    named by their ids, 0 to the largest id the label files use. None when the folder holds
    no YOLO label file (a label line is `class cx cy w h` or a polygon, all numbers)."""
    from efficientdet_keras.data.formats.yolo import label_path_for
    splits = {split: images_in(path) for split, path in split_folders.items()} or \
        {"train": images_in(folder)}
    label_files = [label_path_for(image) for images in splits.values() for image in images]
    label_files = [f for f in label_files if os.path.isfile(f)]
    largest = -1
    for label_file in label_files:
        ids = _yolo_class_ids(label_file)
        if ids is None:
            return None
        largest = max([largest] + ids)
    if largest < 0:
        return None
    return YoloDataset(folder, folder, {split: images for split, images in splits.items()
                                        if images}, [str(i) for i in range(largest + 1)])


def _yolo_class_ids(label_file: str) -> Optional[List[int]]:
    """The class ids of a YOLO label file's lines; None when a line is not a YOLO label."""
    ids = []
    try:
        with open(label_file, encoding="utf-8-sig") as f:
            for line in f:
                fields = line.split()
                if not fields:
                    continue
                values = [float(v) for v in fields]
                if len(fields) < 5 or values[0] != int(values[0]) or values[0] < 0:
                    return None
                ids.append(int(values[0]))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return ids


def read_names(path: str) -> List[str]:
    """The class names of a classes.txt or obj.names, one a line.

    Raises:
      ValueError naming the file when it holds none.
    """
    with open(path, encoding="utf-8-sig") as f:
        names = [line.strip() for line in f if line.strip()]
    if not names:
        raise ValueError("%s holds no class names" % path)
    return names


def _resolve(root: str, value: str, named_in: str, key: str, must_exist: bool = True) -> str:
    """A path as Darknet writes it (relative to the folder the export unpacks into, often
    under `data/`), found from the root; FileNotFoundError naming where it was named (the last
    candidate when not must_exist)."""
    value = value.replace("\\", "/")
    candidates = [os.path.normpath(os.path.join(root, value))]
    if value.startswith("data/"):
        candidates.append(os.path.normpath(os.path.join(root, value[len("data/"):])))
    for candidate in candidates:
        if os.path.exists(candidate):
            return candidate
    if not must_exist:
        return candidates[-1]
    raise FileNotFoundError("%s: %s %s does not exist (looked for %s)"
                            % (named_in, key, value, ", ".join(candidates)))
