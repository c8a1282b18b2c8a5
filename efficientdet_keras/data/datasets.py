"""One way to name a dataset: a folder or a file whose format, splits and classes are found
from its layout.

    dataset = open_dataset("datasets/pets")   # or "pets/data.yaml", "instances_val.json", ...
    print(dataset.describe())
    train_source = dataset.source("train")
    classes_into_config(config, dataset.classes)

Layouts found, in this order, for a folder:
  yolo      an Ultralytics data.yaml (or another .yaml with `names`) in the folder; or
            Darknet's obj.data (CVAT's YOLO 1.1), or images with their label files beside them
            and classes.txt or obj.names (labelImg's), in split folders or in the folder
            (without any names file, the classes are named by their ids, with a note)
  roboflow  train/ valid/ test/ folders, each with _annotations.coco.json beside its images
  voc       Annotations/, JPEGImages/ and ImageSets/Main/<split>.txt (a VOC year folder)
  cvat      CVAT for images XML (<annotations> root) in the folder or annotations/, split by
            the images' subset or by the file names
  voc       or VOC XMLs beside their images, in train/ valid/ test/ or in the folder itself,
            or in a folder below it (Annotations/, labels/) with the images found by file name
  labelme   LabelMe JSON files beside their images, in split folders or in the folder itself
  csv       TensorFlow Object Detection CSV (filename,width,height,class,xmin,ymin,xmax,ymax;
            Roboflow's _annotations.csv), in split folders, or split by file name
  automl_csv  AutoML Vision's CSV (TRAIN/VALIDATION/TEST first, fractions, gs:// images)
  open_images <split>-annotations-bbox.csv with the class descriptions CSV
  label_studio  Label Studio's JSON or JSON-MIN export (a list of tasks), CreateML JSON or
  createml  VIA JSON, a file per split in split folders or in the folder, the images found by
  via       the names the files give
  kitti     KITTI label files (a class name and 14 numbers a line) in a folder below, split
            by its path (train/label_2/), the images found by the files' names
  tfrecord  *.tfrecord, *.record(s) files, split by name (train / val / test in the file
            name), with label_map.json, .yaml or .pbtxt beside them for the class names (else
            the records' class/text) and, when there, a COCO JSON per split (pets-val.json) as
            evaluation's ground truth
  coco      annotations/*.json (instances_train2017.json ...) or *.json in the folder, with
            their images beside them, in images/, or in a folder named after the split; the
            other COCO tasks' files (captions_*, person_keypoints_*, ...) passed over
A file is read as what its name says: .yaml / .yml (YOLO), .json (COCO), .tfrecord.

Split names are train, val and test (Roboflow's "valid", COCO's "val2017" and the like are
renamed). Classes come from the data (`data.formats.classes`); their ids are 1..K as the model
numbers them, and the records carry those ids whatever the data's own numbering.
"""

import glob
import os
from typing import Dict, Optional, Sequence

from efficientdet_keras.data.dataset_object import Dataset
from efficientdet_keras.data.layouts import (coco_dataset, named_boxes_dataset,
                                             tfrecord_dataset, voc_dataset, voc_folder_dataset,
                                             yolo_dataset)
from efficientdet_keras.data.named_box_layouts import cvat_layout, named_boxes_layout
from efficientdet_keras.data.split_names import (split_folders, split_folders_below,
                                                  split_name)

ROBOFLOW_ANNOTATIONS = "_annotations.coco.json"
# The names TFRecord files are given: this package's, the Object Detection API's
# (train.record-00000-of-00010) and FiftyOne's (tf.records).
TFRECORD_NAMES = ("*.tfrecord*", "*.record", "*.record-*", "*.records")


def open_dataset(path: str, voc_origin: Optional[int] = None) -> Dataset:
    """The dataset at `path` (a folder or a file), its layout found as the module doc says.

    voc_origin: the pixel VOC boxes start from, 0 or 1, for an export whose origin the
      reader cannot tell (None: found as `layouts.voc_dataset` says).

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
    yolo_without_yaml = _darknet_or_labelled_folder(path)
    if yolo_without_yaml:
        return yolo_dataset(yolo_without_yaml.yaml_path, yolo_without_yaml)
    roboflow = {split_name(os.path.basename(os.path.dirname(f))): f for f in sorted(
        glob.glob(os.path.join(glob.escape(path), "*", ROBOFLOW_ANNOTATIONS)))}
    roboflow.pop(None, None)
    if roboflow:
        return coco_dataset(path, {name: (f, os.path.dirname(f)) for name, f in roboflow.items()},
                            "roboflow")
    if os.path.isdir(os.path.join(path, "Annotations")) and \
            os.path.isdir(os.path.join(path, "ImageSets", "Main")):
        return voc_dataset(path, voc_origin)
    cvat = cvat_layout(path)
    if cvat:  # Before VOC's XMLs: CVAT's is an .xml too.
        return named_boxes_dataset(path, *cvat)
    voc_folders = _voc_xml_folders(path)
    if voc_folders:
        return voc_folder_dataset(path, voc_folders, voc_origin)
    named = named_boxes_layout(path)
    if named:
        return named_boxes_dataset(path, *named)
    records = sorted(f for pattern in TFRECORD_NAMES
                     for f in glob.glob(os.path.join(glob.escape(path), pattern)))
    if records:  # Before COCO: efficientdet-create-tfrecord writes ground truth beside them.
        return tfrecord_dataset(path, records)
    jsons = sorted(glob.glob(os.path.join(glob.escape(path), "annotations", "*.json"))) or \
        sorted(glob.glob(os.path.join(glob.escape(path), "*.json")))
    if jsons:
        return coco_dataset(path, _coco_splits(jsons), "coco")
    unnamed = _unnamed_yolo_folder(path)
    if unnamed:
        return unnamed
    raise ValueError("%s holds no dataset this package reads: looked for a YOLO data.yaml "
                     "(or Darknet's obj.data, or classes.txt with labels), Roboflow's train/%s, "
                     "VOC's Annotations/ and ImageSets/Main/ or its XMLs beside the images, CVAT "
                     "XML, LabelMe JSON, the Object Detection, AutoML Vision or Open Images CSVs, "
                     "Label Studio, CreateML or VIA JSON, KITTI labels, COCO JSON "
                     "(annotations/*.json or *.json) and *.tfrecord files"
                     % (path, ROBOFLOW_ANNOTATIONS))


def _open_file(path: str) -> Dataset:
    lower = path.lower()
    if lower.endswith((".yaml", ".yml")):
        return yolo_dataset(path)
    if lower.endswith(".json"):
        return coco_dataset(path, _coco_splits([path]), "coco")
    if ".tfrecord" in lower or lower.endswith((".record", ".records")) or ".record-" in lower:
        return tfrecord_dataset(path, [path])
    raise ValueError("%s: a dataset file is a YOLO .yaml, a COCO .json or a .tfrecord" % path)


# COCO's own downloads and datumaro's COCO export put these beside the instances files; they
# hold captions, keypoints, image lists, stuff or panoptic segments, not the detection boxes.
NOT_INSTANCES_PREFIXES = ("captions_", "person_keypoints_", "image_info_", "stuff_", "panoptic_")


def _coco_splits(json_files: Sequence[str]) -> Dict[str, tuple]:
    """{split: (json file, image folder)}; one file without a split in its name is train.

    A split's file is its instances file: files of the other COCO tasks (captions, keypoints,
    image info, stuff, panoptic) are left out by name, and among several files of one split
    an `instances_*` one is taken.
    """
    candidates = [f for f in json_files
                  if not os.path.basename(f).lower().startswith(NOT_INSTANCES_PREFIXES)]
    if not candidates:
        raise ValueError("%s hold captions, keypoints, image lists, stuff or panoptic "
                         "annotations, no instances_*.json with the detection boxes"
                         % ", ".join(json_files))
    by_split: Dict[str, list] = {}
    for json_file in candidates:
        name = split_name(os.path.splitext(os.path.basename(json_file))[0])
        if name is None and len(candidates) == 1:
            name = "train"
        if name is not None:
            by_split.setdefault(name, []).append(json_file)
    if not by_split:
        raise ValueError("none of %s names a split (train, val or test) in its file name"
                         % ", ".join(candidates))
    return {name: (_instances_first(files), None) for name, files in by_split.items()}


def _instances_first(files: Sequence[str]) -> str:
    """COCO's instances_<split>.json among a split's files, else the first by name."""
    return next((f for f in files if os.path.basename(f).lower().startswith("instances_")),
                files[0])


def _voc_xml_folders(path: str) -> Dict[str, str]:
    """{split: folder} of VOC XMLs: in split folders (train/, valid/, test/), else in the
    folder itself (as train), else in the folders below it that hold VOC annotations
    (Label Studio's Annotations/, FiftyOne's labels/), split by their names or train."""
    from efficientdet_keras.data.formats.voc import is_voc_annotation

    def has_xml(folder):
        return any(name.lower().endswith(".xml") for name in os.listdir(folder))
    folders = {split: folder for split, folder in split_folders(path).items()
               if has_xml(folder)}
    if not folders and has_xml(path):
        folders["train"] = path
    if folders:
        return folders
    return split_folders_below(path, lambda folder, files: any(
        is_voc_annotation(os.path.join(folder, f))
        for f in sorted(f for f in files if f.lower().endswith(".xml"))[:10]))


def _darknet_or_labelled_folder(path: str):
    """The YoloDataset of Darknet's obj.data, or of images with their label files beside them
    and classes.txt or obj.names (in the folder or its split folders); else None."""
    from efficientdet_keras.data.formats.yolo_darknet import (classes_file, read_darknet_data,
                                                               read_labelled_folder)
    if os.path.isfile(os.path.join(path, "obj.data")):
        return read_darknet_data(os.path.join(path, "obj.data"))
    folders = split_folders(path)
    names_file = classes_file(path) or next(
        (f for f in map(classes_file, folders.values()) if f), None)
    if names_file is None:
        return None
    return read_labelled_folder(path, names_file, folders)


def _unnamed_yolo_folder(path: str) -> Optional[Dataset]:
    """Images with YOLO label files and nothing that names the classes: named by their ids,
    and one note that says where the names would go."""
    from efficientdet_keras.data.formats.yolo_darknet import CLASS_FILES, unnamed_labelled_folder
    layout = unnamed_labelled_folder(path, split_folders(path))
    if layout is None:
        return None
    note = ("no %s or data.yaml names the classes: they are named by their ids 0..%d; put %s "
            "(a name a line, in id order) in %s to name them"
            % (" or ".join(CLASS_FILES), len(layout.names) - 1, CLASS_FILES[0], path))
    return yolo_dataset(path, layout, [note])


def _yolo_yaml(folder: str) -> Optional[str]:
    """The folder's data.yaml, else the one .yaml in it with a `names` key."""
    if os.path.isfile(os.path.join(folder, "data.yaml")):
        return os.path.join(folder, "data.yaml")
    import yaml
    from efficientdet_keras.utils.yaml_files import load_yaml_file
    for candidate in sorted(glob.glob(os.path.join(glob.escape(folder), "*.y*ml"))):
        try:
            content = load_yaml_file(candidate)
        except (OSError, yaml.YAMLError, UnicodeDecodeError):
            continue
        if isinstance(content, dict) and "names" in content:
            return candidate
    return None
