"""TFRecord files (this package's, the Object Detection API's *.record-*, FiftyOne's tf.records),
split by their names, the class names from a label map beside them or the records' class/text,
and a COCO JSON per split beside them (pets-val.json) as evaluation's ground truth."""

import glob
import os
from typing import Dict, List, Optional

from efficientdet_keras.data.layouts.row import Found, Layout, ReadOptions

# The names TFRecord files are given: this package's, the Object Detection API's
# (train.record-00000-of-00010) and FiftyOne's (tf.records).
TFRECORD_NAMES = ("*.tfrecord*", "*.record", "*.record-*", "*.records")
_LABEL_MAP_FILES = ("label_map.json", "label_map.yaml", "label_map.yml", "label_map.pbtxt")


def is_tfrecord_name(file_name: str) -> bool:
    lower = os.path.basename(file_name).lower()
    return ".tfrecord" in lower or lower.endswith((".record", ".records")) or ".record-" in lower


def find(path: str) -> Optional[Found]:
    """The TFRecord file given, else the folder's TFRecord files."""
    if os.path.isfile(path):
        return Found(path, [path], (path,)) if is_tfrecord_name(path) else None
    records = sorted({f for pattern in TFRECORD_NAMES
                      for f in glob.glob(os.path.join(glob.escape(path), pattern))})
    # The label map and the ground truth JSON written beside them are theirs too.
    beside = glob.glob(os.path.join(glob.escape(path), "*.json"))
    return Found(path, records, tuple(records + beside)) if records else None


def read(found: Found, options: ReadOptions):
    """The files split by their names, classes from a label map file beside them, else
    from the records' class/text (FiftyOne's exports carry no label map; records numbered from
    0 are read one up, 0 being the background). Boxes whose class id the names leave out are
    said in one note with the fix: training drops them."""
    from efficientdet_keras.data.dataset_object import Dataset, DataSplit
    from efficientdet_keras.data.formats.classes import DataClasses
    from efficientdet_keras.data.formats.label_map import read_label_map_file
    from efficientdet_keras.data.formats.tf_example import scan_class_labels
    from efficientdet_keras.data.sources import TFRecordSource
    from efficientdet_keras.data.split_names import SPLITS, split_name
    path, files = found.path, found.parts
    by_split: Dict[str, List[str]] = {}
    for f in files:
        name = split_name(os.path.basename(f)) or ("train" if len(files) == 1 else None)
        if name:
            by_split.setdefault(name, []).append(f)
    if not by_split:
        raise ValueError("%s: no TFRecord file names its split (train, val or test)" % path)
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    label_map_file = next((os.path.join(folder, n) for n in _LABEL_MAP_FILES
                           if os.path.isfile(os.path.join(folder, n))), None)
    counts, texts, scanned = scan_class_labels(sorted(files))
    offset, notes = 0, []
    if label_map_file is not None:
        names = read_label_map_file(label_map_file)
    elif texts:
        offset = 1 if min(texts) == 0 else 0
        names = {class_id + offset: text for class_id, text in sorted(texts.items())}
        notes.append("class names from the records' class/text%s" % (
            "; their ids 0..%d are read as 1..%d (0 is the background)"
            % (max(texts), max(texts) + 1) if offset else ""))
    else:
        raise ValueError("%s: TFRecords carry no class names; put a label map beside them (%s)"
                         % (path, ", ".join(_LABEL_MAP_FILES)))
    unnamed = {i: n for i, n in sorted(counts.items()) if i + offset not in names}
    if unnamed:
        notes.append("%d boxes in the first %d records have class ids %s that %s does not name: "
                     "training drops them%s" % (
                         sum(unnamed.values()), scanned, ", ".join(map(str, unnamed)),
                         os.path.basename(label_map_file) if label_map_file else "class/text",
                         "; records numbered from 0 (FiftyOne's, the Object Detection API's "
                         "class ids less one) read right without the label map when they carry "
                         "class/text, else give the label map their ids"
                         if 0 in unnamed and label_map_file else ""))
    classes = DataClasses(names, dict((k, k - offset) for k in names))
    jsons = {split_name(os.path.basename(f)): f
             for f in sorted(glob.glob(os.path.join(glob.escape(folder), "*.json")))}
    splits = {name: DataSplit(name, ",".join(fs), lambda fs=fs: TFRecordSource(fs, offset),
                              jsons.get(name))
              for name, fs in sorted(by_split.items(), key=lambda kv: SPLITS.index(kv[0]))}
    return Dataset(path, LAYOUT.data_format, classes, splits, notes=notes, title=LAYOUT.title)


LAYOUT = Layout(
    name="tfrecord", data_format="tfrecord", title="TFRecord",
    writers="TFRecord (this package's, the Object Detection API's `*.record-*`, datumaro's "
            "`tf_detection_api`, FiftyOne's `tf.records`)",
    recognised="`*.tfrecord`, `*.record` and `*.records` files with `label_map.json`, `.yaml` or "
               "`.pbtxt` beside them, else the names their records carry in "
               "`image/object/class/text` (ids numbered from 0 are read one up: 0 is the "
               "background). Boxes whose class id the names leave out, which training drops, are "
               "counted over the first 1,000 records and said in one line with the fix",
    splits="`train`, `val`, `test` in the file names (one file alone is train)",
    sign="*.tfrecord files", find=find, read=read)
