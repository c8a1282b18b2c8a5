"""A Dataset of Pascal VOC XMLs: a VOC year folder (ImageSets/Main lists the splits), or XMLs
in folders of their own with their images found by file name; and the pixel their boxes start
from."""

import os
from typing import Dict, List, Optional

from efficientdet_keras.data.dataset_object import Dataset, DataSplit
from efficientdet_keras.data.formats.classes import DataClasses, indexed_classes, named_classes
from efficientdet_keras.data.sources import RecordsSource
from efficientdet_keras.data.split_names import SPLITS


def voc_pairs_dataset(path: str, splits: Dict[str, tuple], zero_based,
                       label_order: Optional[List[str]] = None,
                      given_origin: Optional[int] = None, title: str = "Pascal VOC") -> Dataset:
    """{split: (location, [(xml, image)])}; zero_based: the file that shows the pixels start
    at 0, or None to look for a coordinate of 0 in the XMLs (folder layouts only);
    label_order: the class names in the order the export's labelmap.txt gives them, which
    number the classes when it holds every name the XMLs use; given_origin: 0 or 1 as the
    user gave it, which wins."""
    from efficientdet_keras.data.formats.voc import load_voc_pairs, voc_annotation_survey
    names, zero_file = voc_annotation_survey([p for _, ps in splits.values() for p in ps])
    if label_order and set(names) <= set(label_order):
        classes = indexed_classes(label_order)
        classes = DataClasses(classes.names, dict(classes.names))
    else:
        classes = named_classes(names)
    if zero_based is None and not os.path.isdir(os.path.join(path, "ImageSets")):
        zero_based = zero_file
    origin = 0 if zero_based else 1
    if given_origin is not None:
        if given_origin not in (0, 1):
            raise ValueError("the VOC pixel origin is 0 or 1, not %r" % (given_origin,))
        origin = given_origin

    def loader(pairs):
        return lambda: RecordsSource(load_voc_pairs(pairs, classes.names, origin=origin))

    found = {split: DataSplit(split, location, loader(pairs)) for split, (location, pairs)
             in sorted(splits.items(), key=lambda kv: SPLITS.index(kv[0]))}
    if given_origin is not None:
        notes = ["boxes %d-based, as given" % given_origin]
    elif zero_based:
        notes = ["boxes 0-based, as %s shows (the VOC devkit's start at 1)" % zero_based]
    else:
        notes = []
    return Dataset(path, "voc", classes, found, notes=notes, title=title)
