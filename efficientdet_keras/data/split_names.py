"""The split a folder or file name stands for: train, val or test, whatever the tool that
wrote the dataset called it (Roboflow's "valid", COCO's "val2017", "trainval", ...)."""

import os
import re
from typing import Callable, Dict, List, Optional

SPLITS = ("train", "val", "test")
# The names tools give their splits' folders and files, and the split each one is.
_SPLIT_WORDS = {"train": "train", "training": "train", "trainval": "train", "val": "val",
                "valid": "val", "validation": "val", "test": "test", "testing": "test"}


# The subset CVAT and datumaro give data that was never split (read as train).
UNSPLIT_SUBSETS = ("", "default")

# The whole names exporters give split folders and YOLO keys: {name: split}.
SPLIT_FOLDER_NAMES = {"train": "train", "val": "val", "valid": "val", "validation": "val",
                      "test": "test"}


def split_name(word: str) -> Optional[str]:
    """train / val / test for a folder or file name that says which (valid, val2017,
    instances_train2017.json, voc-val-00000-of-00001.tfrecord), else None."""
    for token in re.split(r"[^a-z]+", word.lower()):
        if token in _SPLIT_WORDS:
            return _SPLIT_WORDS[token]
    return None


def split_folders(path: str) -> Dict[str, str]:
    """{split: folder} of a folder's split folders (train/, valid/, test/ ...)."""
    folders = {}
    for name in sorted(os.listdir(path)):
        split = SPLIT_FOLDER_NAMES.get(name.lower())
        if split and split not in folders and os.path.isdir(os.path.join(path, name)):
            folders[split] = os.path.join(path, name)
    return folders


def split_folders_below(path: str, holds: Callable[[str, List[str]], bool],
                        depth: int = 2) -> Dict[str, str]:
    """{split: folder} of the folders below `path` (itself included, `depth` levels down) for
    which holds(folder, its file names) is true: a layout's annotations in a folder of their
    own (Annotations/, labels/, train/label_2/). A folder's split is the last split word of its
    path below `path` (train/label_2 is train), else train.

    Raises:
      ValueError naming both folders when two hold one split.
    """
    found: Dict[str, str] = {}
    for folder, subfolders, files in os.walk(path):
        below = os.path.relpath(folder, path)
        level = 0 if below == os.curdir else below.count(os.sep) + 1
        subfolders[:] = sorted(d for d in subfolders if not d.startswith(".")) \
            if level < depth else []
        if not holds(folder, files):
            continue
        words = [] if below == os.curdir else below.split(os.sep)
        split = next(filter(None, map(split_name, reversed(words))), "train")
        if split in found:
            raise ValueError("%s and %s both hold %s annotations; open one of them"
                             % (found[split], folder, split))
        found[split] = folder
    return found
