"""One way to name a dataset: a folder or a file whose format, splits and classes are found
from its layout.

    dataset = open_dataset("datasets/pets")   # or "pets/data.yaml", "instances_val.json", ...
    print(dataset.describe())
    train_source = dataset.source("train")
    classes_into_config(config, dataset.classes)

Layouts found, in this order, for a folder:
  yolo      an Ultralytics data.yaml (or another .yaml with `names`) in the folder
  roboflow  train/ valid/ test/ folders, each with _annotations.coco.json beside its images
  voc       Annotations/, JPEGImages/ and ImageSets/Main/<split>.txt (a VOC year folder)
  tfrecord  *.tfrecord files, split by name (train / val / test in the file name), with
            label_map.json, .yaml or .pbtxt beside them for the class names and, when there,
            a COCO JSON per split (pets-val.json) as evaluation's ground truth
  coco      annotations/*.json (instances_train2017.json ...) or *.json in the folder, with
            their images beside them, in images/, or in a folder named after the split
A file is read as what its name says: .yaml / .yml (YOLO), .json (COCO), .tfrecord.

Split names are train, val and test (Roboflow's "valid", COCO's "val2017" and the like are
renamed). Classes come from the data (`data.formats.classes`); their ids are 1..K as the model
numbers them, and the records carry those ids whatever the data's own numbering.
"""

import collections
import dataclasses
import glob
import os
import re
from typing import Callable, Dict, List, Optional, Sequence

from efficientdet_keras.data.formats.classes import (DataClasses, coco_classes, indexed_classes,
                                             named_classes)
from efficientdet_keras.data.formats.coco_json import parse_coco_file, records_to_coco
from efficientdet_keras.data.formats.records import ImageRecord
from efficientdet_keras.data.sources import RecordsSource, TFRecordSource

FORMAT_NAMES = {"yolo": "YOLO (Ultralytics data.yaml)", "roboflow": "COCO JSON (Roboflow layout)",
                "voc": "Pascal VOC", "coco": "COCO JSON", "tfrecord": "TFRecord"}
SPLITS = ("train", "val", "test")
# The names tools give their splits' folders and files, and the split each one is.
_SPLIT_WORDS = {"train": "train", "training": "train", "trainval": "train", "val": "val",
                "valid": "val", "validation": "val", "test": "test", "testing": "test"}
_IMAGE_DIR_NAMES = ("images", "JPEGImages", "img", "imgs")
_LABEL_MAP_FILES = ("label_map.json", "label_map.yaml", "label_map.yml", "label_map.pbtxt")
ROBOFLOW_ANNOTATIONS = "_annotations.coco.json"


class DataSplit:
    """One split of a dataset: what it reads, and its source once asked for (read once)."""

    def __init__(self, name: str, location: str, load: Callable[[], object],
                 ground_truth_file: Optional[str] = None):
        self.name = name
        self.location = location
        self.ground_truth_file = ground_truth_file
        self._load = load
        self._source = None

    @property
    def source(self):
        if self._source is None:
            self._source = self._load()
        return self._source

    @property
    def records(self) -> Optional[List[ImageRecord]]:
        """The ImageRecords of a split read from files of annotations (None for TFRecords)."""
        return getattr(self.source, "records", None)


@dataclasses.dataclass
class Dataset:
    """A dataset found by `open_dataset`: its format, its splits and its classes.

    skipped: entries left out while reading, by kind (the warnings named each of them).
    """
    path: str
    format: str
    classes: DataClasses
    splits: Dict[str, DataSplit]
    skipped: collections.Counter = dataclasses.field(default_factory=collections.Counter)

    def split(self, name: str) -> DataSplit:
        """Raises ValueError naming the splits there are when `name` is not one of them."""
        if name not in self.splits:
            raise ValueError("%s has no %s split (it has %s)"
                             % (self.path, name, ", ".join(self.splits) or "none"))
        return self.splits[name]

    def source(self, name: str):
        """The data source (`data.sources`) of a split."""
        return self.split(name).source

    def validation_split(self) -> Optional[str]:
        """The split evaluation uses: val, else test; None when there is neither."""
        return next((name for name in ("val", "test") if name in self.splits), None)

    def ground_truth(self, name: str) -> Optional[dict]:
        """The COCO ground truth of a split, with the model's class ids (what evaluation
        scores against); for TFRecords the JSON beside them, else None (evaluation then
        takes it from the batches)."""
        split = self.split(name)
        if split.ground_truth_file:
            from efficientdet_keras.data.formats.coco_json import read_coco_json
            return read_coco_json(split.ground_truth_file)
        records = split.records
        return None if records is None else records_to_coco(records, self.classes.names)

    def describe(self, names: Optional[Sequence[str]] = None) -> str:
        """A few lines: the format, the images and boxes of each split, the classes."""
        lines = ["Data: %s, %s" % (self.path, FORMAT_NAMES[self.format])]
        for name in names or list(self.splits):
            split = self.split(name)
            records = split.records
            if records is None:
                lines.append("  %-5s %d TFRecord file(s) %s" % (
                    name, len(split.source.files), split.location))
                continue
            boxes = sum(len(r.classes) for r in records)
            background = sum(1 for r in records if not len(r.classes))
            lines.append("  %-5s %d images, %d boxes%s  %s" % (
                name, len(records), boxes,
                " (%d images without boxes)" % background if background else "", split.location))
        lines.append("  classes %s" % self.classes.describe())
        data_ids = [self.classes.data_ids[k] for k in sorted(self.classes.names)]
        if data_ids != sorted(self.classes.names) and self.format in ("yolo", "coco", "roboflow"):
            lines.append("  model ids 1..%d are the data's ids %s..%s"
                         % (self.classes.num_classes, data_ids[0], data_ids[-1]))
        if self.classes.dropped:
            lines.append("  left out the root category %r (no boxes; the others' supercategory)"
                         % self.classes.dropped)
        if self.skipped:
            lines.append("  skipped %s" % ", ".join("%d x %s" % (n, kind) for kind, n
                                                    in sorted(self.skipped.items())))
        return "\n".join(lines)


def open_dataset(path: str) -> Dataset:
    """The dataset at `path` (a folder or a file), its layout found as the module doc says.

    Raises:
      FileNotFoundError: the path does not exist (named).
      ValueError: it holds none of the layouts (named with the layouts looked for), or a
        malformed one (named with the file and key).
    """
    if not os.path.exists(path):
        raise FileNotFoundError("dataset %s does not exist" % path)
    if os.path.isfile(path):
        return _open_file(path)
    yaml_file = _yolo_yaml(path)
    if yaml_file:
        return yolo_dataset(yaml_file)
    roboflow = {_split_name(os.path.basename(os.path.dirname(f))): f for f in sorted(
        glob.glob(os.path.join(glob.escape(path), "*", ROBOFLOW_ANNOTATIONS)))}
    roboflow.pop(None, None)
    if roboflow:
        return coco_dataset(path, {name: (f, os.path.dirname(f)) for name, f in roboflow.items()},
                            "roboflow")
    if os.path.isdir(os.path.join(path, "Annotations")) and \
            os.path.isdir(os.path.join(path, "ImageSets", "Main")):
        return voc_dataset(path)
    records = sorted(glob.glob(os.path.join(glob.escape(path), "*.tfrecord*")))
    if records:  # Before COCO: efficientdet-create-tfrecord writes ground truth beside them.
        return tfrecord_dataset(path, records)
    jsons = sorted(glob.glob(os.path.join(glob.escape(path), "annotations", "*.json"))) or \
        sorted(glob.glob(os.path.join(glob.escape(path), "*.json")))
    if jsons:
        return coco_dataset(path, _coco_splits(jsons), "coco")
    raise ValueError("%s holds no dataset this package reads: looked for a YOLO data.yaml, "
                     "Roboflow's train/%s, VOC's Annotations/ and ImageSets/Main/, COCO JSON "
                     "(annotations/*.json or *.json) and *.tfrecord files"
                     % (path, ROBOFLOW_ANNOTATIONS))


def _open_file(path: str) -> Dataset:
    lower = path.lower()
    if lower.endswith((".yaml", ".yml")):
        return yolo_dataset(path)
    if lower.endswith(".json"):
        return coco_dataset(path, _coco_splits([path]), "coco")
    if ".tfrecord" in lower:
        return tfrecord_dataset(path, [path])
    raise ValueError("%s: a dataset file is a YOLO .yaml, a COCO .json or a .tfrecord" % path)


def _split_name(word: str) -> Optional[str]:
    """train / val / test for a folder or file name that says which (valid, val2017,
    instances_train2017.json, voc-val-00000-of-00001.tfrecord), else None."""
    for token in re.split(r"[^a-z]+", word.lower()):
        if token in _SPLIT_WORDS:
            return _SPLIT_WORDS[token]
    return None


# --- COCO JSON ------------------------------------------------------------------------------

def _coco_splits(json_files: Sequence[str]) -> Dict[str, tuple]:
    """{split: (json file, image folder)}; one file without a split in its name is train."""
    splits = {}
    for json_file in json_files:
        name = _split_name(os.path.splitext(os.path.basename(json_file))[0])
        if name is None and len(json_files) == 1:
            name = "train"
        if name is None or name in splits:
            continue
        splits[name] = (json_file, None)
    if not splits:
        raise ValueError("none of %s names a split (train, val or test) in its file name"
                         % ", ".join(json_files))
    return splits


def coco_dataset(path: str, splits: Dict[str, tuple], data_format: str = "coco") -> Dataset:
    """COCO JSON files, {split: (json file, image folder or None to find it)}.

    The classes are the categories of the first split's file (train's when there is one);
    a split whose categories differ is an error naming both files.
    """
    from efficientdet_keras.data.formats.coco_records import load_coco_records
    ordered = sorted(splits, key=lambda s: SPLITS.index(s) if s in SPLITS else len(SPLITS))
    first_file = splits[ordered[0]][0]
    first = parse_coco_file(first_file)
    try:
        classes = coco_classes(first.get("categories") or [], first["annotations"])
    except ValueError as e:
        raise ValueError("%s: %s" % (first_file, e)) from None
    skipped = collections.Counter()
    shift = {data_id: model_id for model_id, data_id in classes.data_ids.items()}

    def loader(json_file, image_dir):
        def load():
            data = parse_coco_file(json_file)
            if json_file != first_file:
                _check_same_categories(json_file, data, first_file, first)
            folder = image_dir or find_image_dir(json_file, data)
            records = load_coco_records(json_file, folder, skipped)
            return RecordsSource([_with_model_ids(r, shift) for r in records])
        return load

    found = {}
    for name in ordered:
        json_file, image_dir = splits[name]
        found[name] = DataSplit(name, json_file, loader(json_file, image_dir))
    return Dataset(path, data_format, classes, found, skipped)


def _check_same_categories(json_file: str, data: dict, first_file: str, first: dict) -> None:
    def categories(d):
        return {(c.get("id"), c.get("name")) for c in d.get("categories") or []
                if isinstance(c, dict)}
    if categories(data) != categories(first):
        raise ValueError("%s and %s list different categories; the splits of a dataset share "
                         "their classes" % (json_file, first_file))


def _with_model_ids(record: ImageRecord, model_ids: Dict[int, int]) -> ImageRecord:
    """The record with its category ids as model ids (ids the categories do not list stay
    as they are, for the pipeline's checks to name)."""
    if all(model_ids.get(int(c), c) == c for c in record.classes):
        return record
    classes = record.classes.copy()
    for i, c in enumerate(record.classes):
        classes[i] = model_ids.get(int(c), c)
    return dataclasses.replace(record, classes=classes)


def find_image_dir(json_file: str, data: dict) -> str:
    """The folder the images of a COCO JSON are in: beside it, in images/, or in a folder
    named after the file (annotations/instances_val2017.json -> val2017/), found by the
    first image's file_name.

    Raises:
      ValueError naming the file and the folders looked in.
    """
    here = os.path.dirname(os.path.abspath(json_file))
    parent = os.path.dirname(here)
    stem = os.path.splitext(os.path.basename(json_file))[0]
    split_folder = stem.split("_", 1)[1] if "_" in stem else stem
    candidates = [here] + [os.path.join(here, d) for d in _IMAGE_DIR_NAMES]
    candidates += [os.path.join(parent, split_folder), os.path.join(parent, "images", split_folder)]
    candidates += [os.path.join(parent, d) for d in _IMAGE_DIR_NAMES]
    names = [im["file_name"] for im in data["images"][:20]
             if isinstance(im, dict) and isinstance(im.get("file_name"), str)]
    if not names:
        return here
    for folder in candidates:
        if any(os.path.isfile(os.path.join(folder, name)) for name in names):
            return folder
    raise ValueError("%s: cannot find its images (such as %s) in %s"
                     % (json_file, names[0], ", ".join(sorted(set(candidates)))))


# --- YOLO -----------------------------------------------------------------------------------

def _yolo_yaml(folder: str) -> Optional[str]:
    """The folder's data.yaml, else the one .yaml in it with a `names` key."""
    if os.path.isfile(os.path.join(folder, "data.yaml")):
        return os.path.join(folder, "data.yaml")
    import yaml
    for candidate in sorted(glob.glob(os.path.join(glob.escape(folder), "*.y*ml"))):
        try:
            with open(candidate) as f:
                content = yaml.safe_load(f)
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(content, dict) and "names" in content:
            return candidate
    return None


def yolo_dataset(yaml_file: str) -> Dataset:
    """An Ultralytics data.yaml with its images/ and labels/ (see `data.formats.yolo`)."""
    from efficientdet_keras.data.formats.yolo import load_yolo_records
    from efficientdet_keras.data.formats.yolo_yaml import read_yolo_yaml
    layout = read_yolo_yaml(yaml_file)
    classes = indexed_classes(layout.names)
    skipped = collections.Counter()

    def loader(image_paths):
        def load():
            records = load_yolo_records(image_paths, len(layout.names), skipped)
            return RecordsSource(records)
        return load

    splits = {}
    for name, image_paths in layout.splits.items():
        split = _split_name(name) or name
        splits[split] = DataSplit(split, "%s: %s" % (os.path.basename(yaml_file), name),
                                  loader(image_paths))
    return Dataset(yaml_file, "yolo", classes, splits, skipped)


# --- Pascal VOC -----------------------------------------------------------------------------

def voc_dataset(voc_root: str) -> Dataset:
    """A VOC year folder: train and val (else trainval as train) and test from
    ImageSets/Main; the classes are the object names of its annotations."""
    from efficientdet_keras.data.formats.voc import load_voc_records, voc_object_names
    main = os.path.join(voc_root, "ImageSets", "Main")
    present = [s for s in ("train", "val", "trainval", "test")
               if os.path.isfile(os.path.join(main, s + ".txt"))]
    files = {"val": "val", "test": "test"}
    files["train"] = "train" if "train" in present else "trainval"
    files = {split: name for split, name in files.items() if name in present}
    if not files:
        raise ValueError("%s has no train.txt, val.txt, trainval.txt or test.txt" % main)
    classes = named_classes(voc_object_names(voc_root, list(files.values())))

    def loader(split_file):
        return lambda: RecordsSource(load_voc_records(voc_root, split_file, classes.names))

    splits = {split: DataSplit(split, os.path.join(main, name + ".txt"), loader(name))
              for split, name in sorted(files.items(), key=lambda kv: SPLITS.index(kv[0]))}
    return Dataset(voc_root, "voc", classes, splits)


# --- TFRecord -------------------------------------------------------------------------------

def tfrecord_dataset(path: str, files: Sequence[str]) -> Dataset:
    """TFRecord files split by their names, classes from a label map file beside them."""
    by_split: Dict[str, List[str]] = {}
    for f in files:
        name = _split_name(os.path.basename(f)) or ("train" if len(files) == 1 else None)
        if name:
            by_split.setdefault(name, []).append(f)
    if not by_split:
        raise ValueError("%s: no TFRecord file names its split (train, val or test)" % path)
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    label_map_file = next((os.path.join(folder, n) for n in _LABEL_MAP_FILES
                           if os.path.isfile(os.path.join(folder, n))), None)
    if label_map_file is None:
        raise ValueError("%s: TFRecords carry no class names; put a label map beside them (%s)"
                         % (path, ", ".join(_LABEL_MAP_FILES)))
    names = read_label_map_file(label_map_file)
    classes = DataClasses(names, dict((k, k) for k in names))
    jsons = {_split_name(os.path.basename(f)): f
             for f in sorted(glob.glob(os.path.join(glob.escape(folder), "*.json")))}
    splits = {name: DataSplit(name, ",".join(fs), lambda fs=fs: TFRecordSource(fs), jsons.get(name))
              for name, fs in sorted(by_split.items(), key=lambda kv: SPLITS.index(kv[0]))}
    return Dataset(path, "tfrecord", classes, splits)


def read_label_map_file(path: str) -> Dict[int, str]:
    """{id: name} from a JSON or YAML mapping (or a config file's label_map key), or an
    Object Detection API .pbtxt (`item { id: 1 name: 'cat' }`).

    Raises:
      ValueError naming the file when it cannot be read or is not such a mapping.
    """
    if path.endswith(".pbtxt"):
        with open(path) as f:
            text = f.read()
        items = {}
        for block in re.findall(r"item\s*\{(.*?)\}", text, re.S):
            found_id = re.search(r"\bid\s*:\s*(\d+)", block)
            # The readable display_name when there is one (name is often an id like /m/01g317).
            found_name = (re.search(r"\bdisplay_name\s*:\s*[\"']([^\"']*)[\"']", block) or
                          re.search(r"\bname\s*:\s*[\"']([^\"']*)[\"']", block))
            if found_id and found_name:
                items[int(found_id.group(1))] = found_name.group(1)
        if not items:
            raise ValueError("label map %s holds no `item { id: ... name: ... }` entries" % path)
        return items
    import yaml
    try:
        with open(path) as f:
            data = yaml.safe_load(f)  # YAML is a superset of JSON.
    except (OSError, yaml.YAMLError) as e:
        # YAML errors span several lines; the tools report errors on one.
        raise ValueError("cannot read label map %s: %s" % (path, " ".join(str(e).split()))) \
            from None
    if isinstance(data, dict) and isinstance(data.get("label_map"), dict):
        data = data["label_map"]
    try:
        if not isinstance(data, dict) or not data:
            raise TypeError
        return {int(k): str(v) for k, v in data.items()}
    except (TypeError, ValueError):
        raise ValueError("label map %s must be a mapping of integer ids to names, e.g. "
                         "{1: cat, 2: dog}" % path) from None
