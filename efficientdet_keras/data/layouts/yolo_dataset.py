"""A Dataset of YOLO labels: an Ultralytics data.yaml, or the YoloDataset another YOLO layout
was read into (Darknet's obj.data, label files beside their images)."""

import collections
import os
from typing import Sequence

from efficientdet_keras.data.dataset_object import Dataset, DataSplit
from efficientdet_keras.data.formats.classes import DataClasses, indexed_classes
from efficientdet_keras.data.sources import RecordsSource
from efficientdet_keras.data.split_names import split_name


def yolo_dataset(yaml_file: str, layout=None, notes: Sequence[str] = (),
                 title: str = "YOLO") -> Dataset:
    """An Ultralytics data.yaml with its images/ and labels/ (see `data.formats.yolo`), or the
    YoloDataset `layout` read from another file or folder (`data.formats.yolo_darknet`)."""
    from efficientdet_keras.data.formats.yolo import load_yolo_records
    from efficientdet_keras.data.formats.yolo_yaml import read_yolo_yaml
    layout = layout or read_yolo_yaml(yaml_file)
    classes = indexed_classes(layout.names)
    if layout.class_ids:  # The names' own ids (1..K, say), in the label files too.
        classes = DataClasses(classes.names, {k: layout.class_ids[k - 1] for k in classes.names})
    skipped = collections.Counter()

    def loader(image_paths):
        def load():
            records = load_yolo_records(image_paths, len(layout.names), skipped,
                                        keypoint_fields=layout.keypoint_fields,
                                        class_ids=layout.class_ids)
            return RecordsSource(records)
        return load

    splits = {}
    for name, image_paths in layout.splits.items():
        split = split_name(name) or name
        splits[split] = DataSplit(split, "%s: %s" % (os.path.basename(yaml_file), name),
                                  loader(image_paths))
    return Dataset(yaml_file, "yolo", classes, splits, skipped, layout.notes + list(notes),
                   title)
