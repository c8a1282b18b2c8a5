"""One way to name a dataset: a folder or a file whose layout, splits and classes are found
from what its files hold.

    dataset = open_dataset("datasets/pets")   # or "pets/data.yaml", "instances_val.json", ...
    print(dataset.describe())
    train_source = dataset.source("train")
    classes_into_config(config, dataset.classes)

The layouts and the order they are looked for in are the registry's
(`data.layouts.registry.LAYOUTS`; the data guide's table lists them). A file is read as what
its name says: .yaml / .yml (YOLO), .json (COCO), .tfrecord.

Split names are train, val and test (Roboflow's "valid", COCO's "val2017" and the like are
renamed). Classes come from the data (`data.formats.classes`); their ids are 1..K as the model
numbers them, and the records carry those ids whatever the data's own numbering.
"""

import os
from typing import Optional, Sequence

from efficientdet_keras.data.dataset_object import Dataset
from efficientdet_keras.data.layouts.coco_dataset import coco_dataset
from efficientdet_keras.data.layouts.registry import LAYOUTS, get_layout, refusal
from efficientdet_keras.data.layouts.row import Found, Layout, ReadOptions

__all__ = ["open_dataset", "coco_dataset"]


def open_dataset(path: str, voc_origin: Optional[int] = None,
                 layout: Optional[str] = None) -> Dataset:
    """The dataset at `path` (a folder or a file), its layout found as the module doc says.

    voc_origin: the pixel VOC boxes start from, 0 or 1, for an export whose origin the
      reader cannot tell (None: found from the files).
    layout: the name of the registry's layout to read it as (None: the first that fits).

    Raises:
      FileNotFoundError: the path does not exist (named).
      ValueError: it holds none of the layouts (named with the layouts looked for), not the
        layout asked for, or a malformed one (named with the file and key).
    """
    if not os.path.exists(path):
        raise FileNotFoundError("dataset %s does not exist" % path)
    options = ReadOptions(voc_origin=voc_origin)
    if layout:
        row = get_layout(layout)
        found = row.find(path)
        if found is None:
            raise ValueError("%s does not hold %s: looked for %s" % (path, row.title, row.sign))
        return row.read(found, options)
    for index, row in enumerate(LAYOUTS):
        found = row.find(path)
        if found is not None:
            _refuse_a_rival(path, row, found, LAYOUTS[index + 1:])
            return row.read(found, options)
    if os.path.isfile(path):
        raise ValueError("%s: a dataset file is a YOLO .yaml, a COCO .json or a .tfrecord" % path)
    raise ValueError(refusal(path))


def _refuse_a_rival(path: str, first: Layout, found: Found, later: Sequence[Layout]) -> None:
    """Raises ValueError naming both layouts and the way to pick one when a later layout,
    read as another format, claims annotation files the first does not: two datasets in one
    folder (a YOLO export beside a COCO one), where taking the first would be a guess."""
    if first.fallback or os.path.isfile(path):
        return
    for row in later:
        if row.fallback or row.data_format == first.data_format:
            continue
        try:
            other = row.find(path)
        except (OSError, ValueError):  # Not a clean fit: no rival.
            continue
        if other is not None and other.claims and not found.shares_files_with(other):
            raise ValueError(
                "%s holds two datasets: %s (%s) and %s (%s); name the one to read with "
                "--data_layout=%s or --data_layout=%s (open_dataset(path, layout=...))" % (
                    path, first.title, _shown(found), row.title, _shown(other), first.name,
                    row.name))


def _shown(found: Found) -> str:
    claims = [os.path.relpath(p, found.path if os.path.isdir(found.path) else
                              os.path.dirname(found.path)) for p in found.claims]
    return ", ".join(claims[:2]) + (", ..." if len(claims) > 2 else "")
