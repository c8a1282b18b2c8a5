"""A tiny sample of every layout in the registry (`data.layouts.registry.LAYOUTS`), written as
the tools that export it write it: two training images and one validation image, one box
each, in `dataset_layouts`' classes and pixels. Each writer returns the ground truth as
{split folder or word: {image file name: [(class name, [ymin, xmin, ymax, xmax] pixels)]}}.
"""

import functools
import json
import os

import dataset_layouts
from dataset_layouts import HEIGHT, NAMES, WIDTH, _image, _plan

COUNTS = (("train", 2), ("val", 1))


def _yolo_line(cls, box):
    ymin, xmin, ymax, xmax = box
    return "%d %.6f %.6f %.6f %.6f\n" % (cls, (xmin + xmax) / 2 / WIDTH, (ymin + ymax) / 2 / HEIGHT,
                                         (xmax - xmin) / WIDTH, (ymax - ymin) / HEIGHT)


def _labelled_folders(root, names_file):
    """Images with their YOLO label files beside them in train/ and valid/; names_file: None
    or the file (in root) that names the classes."""
    truth = {}
    for split, count in (("train", 2), ("valid", 1)):
        folder = os.path.join(root, split)
        truth[split] = {}
        for i, (name, cls) in enumerate(_plan(count)):
            box = _image(folder, name, i)
            with open(os.path.join(folder, name.replace(".jpg", ".txt")), "w") as f:
                f.write(_yolo_line(cls, box))
            truth[split][name] = [((NAMES[cls] if names_file else str(cls)), box)]
    if names_file:
        with open(os.path.join(root, names_file), "w") as f:
            f.write("\n".join(NAMES) + "\n")
    return truth


def write_voc_folders(root):
    """Label Studio's VOC export: Annotations/ with the XMLs, images/ with the images."""
    truth = {"train": {}}
    os.makedirs(os.path.join(root, "Annotations"))
    for i, (name, cls) in enumerate(_plan(2)):
        ymin, xmin, ymax, xmax = box = _image(os.path.join(root, "images"), name, i)
        with open(os.path.join(root, "Annotations", name.replace(".jpg", ".xml")), "w") as f:
            f.write("<annotation><folder>images</folder><filename>%s</filename><size><width>%d"
                    "</width><height>%d</height></size><object><name>%s</name><bndbox><xmin>%d"
                    "</xmin><ymin>%d</ymin><xmax>%d</xmax><ymax>%d</ymax></bndbox></object>"
                    "</annotation>" % (name, WIDTH, HEIGHT, NAMES[cls], xmin + 1, ymin + 1,
                                       xmax, ymax))
        truth["train"][name] = [(NAMES[cls], box)]
    return truth


def _json_per_split(root, entry, collect=list):
    """A JSON file per split (train.json, val.json) holding collect([entry(name, class, box)
    of each image]), the images in images/."""
    truth = {}
    for split, count in COUNTS:
        truth[split], entries = {}, []
        for i, (name, cls) in enumerate(_plan(count)):
            name = "%s_%s" % (split, name)
            box = _image(os.path.join(root, "images"), name, i)
            entries.append(entry(name, cls, box))
            truth[split][name] = [(NAMES[cls], box)]
        with open(os.path.join(root, split + ".json"), "w") as f:
            json.dump(collect(entries), f)
    return truth


def label_studio_task(name, cls, box):
    ymin, xmin, ymax, xmax = box
    value = {"x": 100 * xmin / WIDTH, "y": 100 * ymin / HEIGHT, "width": 100 * (xmax - xmin) / WIDTH,
             "height": 100 * (ymax - ymin) / HEIGHT, "rotation": 0, "rectanglelabels": [NAMES[cls]]}
    upload = "/data/upload/1/%08x-%s" % (48879 * (cls + 1), name)  # Its upload prefix.
    return {"id": 1, "data": {"image": upload}, "annotations": [
        {"result": [{"type": "rectanglelabels", "value": value, "original_width": WIDTH,
                     "original_height": HEIGHT}]}]}


def createml_image(name, cls, box):
    ymin, xmin, ymax, xmax = box
    return {"image": name, "annotations": [{"label": NAMES[cls], "coordinates": {
        "x": (xmin + xmax) / 2, "y": (ymin + ymax) / 2, "width": xmax - xmin,
        "height": ymax - ymin}}]}


def via_export(entries):
    """VIA's JSON export: its images keyed by file name and size."""
    return {entry["filename"] + str(entry["size"]): entry for entry in entries}


def via_image(name, cls, box):
    ymin, xmin, ymax, xmax = box
    return {"filename": name, "size": 1, "file_attributes": {}, "regions": [
        {"shape_attributes": {"name": "rect", "x": xmin, "y": ymin, "width": xmax - xmin,
                              "height": ymax - ymin},
         "region_attributes": {"label": NAMES[cls]}}]}


def write_kitti(root):
    """datumaro's `kitti_detection`: <split>/label_2/*.txt and <split>/image_2/*.jpg."""
    truth = {}
    for split, count in (("training", 2), ("val", 1)):
        truth[split] = {}
        os.makedirs(os.path.join(root, split, "label_2"))
        for i, (name, cls) in enumerate(_plan(count)):
            ymin, xmin, ymax, xmax = box = _image(os.path.join(root, split, "image_2"), name, i)
            with open(os.path.join(root, split, "label_2", name.replace(".jpg", ".txt")),
                      "w") as f:
                f.write("%s 0.00 0 0.00 %.2f %.2f %.2f %.2f 0.00 0.00 0.00 0.00 0.00 0.00 0.00\n"
                        % (NAMES[cls], xmin, ymin, xmax, ymax))
            truth[split][name] = [(NAMES[cls], box)]
    return truth


def write_tfrecords(root):
    """efficientdet-create-tfrecord's layout: a file per split with label_map.json."""
    import numpy as np
    import tensorflow as tf
    from efficientdet_keras.data.formats.records import ImageRecord
    from efficientdet_keras.data.formats.tf_example import record_to_tf_example
    truth = {}
    for split, count in COUNTS:
        truth[split] = {}
        with tf.io.TFRecordWriter(os.path.join(root, "%s.tfrecord" % split)) as writer:
            for i, (name, cls) in enumerate(_plan(count)):
                name = "%s_%s" % (split, name)
                box = _image(os.path.join(root, "images"), name, i)
                record = ImageRecord(i + 1, os.path.join(root, "images", name), HEIGHT, WIDTH,
                                     np.array([box], np.float32), np.array([cls + 1]),
                                     np.zeros(1, bool), np.zeros(1, np.float32))
                with open(record.path, "rb") as f:
                    writer.write(record_to_tf_example(record, f.read()).SerializeToString())
                truth[split][name] = [(NAMES[cls], box)]
    with open(os.path.join(root, "label_map.json"), "w") as f:
        json.dump({"1": NAMES[0], "2": NAMES[1]}, f)
    return truth


def _two_splits(write):
    return lambda root: write(root, train=2, val=1)


# {layout name: writer(root) -> ground truth}: one per registry row.
SAMPLES = {
    "yolo": _two_splits(dataset_layouts.write_yolo),
    "darknet": functools.partial(_labelled_folders, names_file="classes.txt"),
    "roboflow": lambda root: dataset_layouts.write_roboflow(root, train=2, valid=1),
    "voc": _two_splits(dataset_layouts.write_voc),
    "cvat": _two_splits(dataset_layouts.write_cvat_xml),
    "voc_folders": write_voc_folders,
    "labelme": _two_splits(dataset_layouts.write_labelme),
    "csv": _two_splits(dataset_layouts.write_box_csv),
    "automl_csv": _two_splits(dataset_layouts.write_automl_csv),
    "open_images": _two_splits(dataset_layouts.write_open_images),
    "label_studio": functools.partial(_json_per_split, entry=label_studio_task),
    "createml": functools.partial(_json_per_split, entry=createml_image),
    "via": functools.partial(_json_per_split, entry=via_image, collect=via_export),
    "kitti": write_kitti,
    "tfrecord": write_tfrecords,
    "coco": _two_splits(dataset_layouts.write_coco_folder),
    "unnamed_yolo": functools.partial(_labelled_folders, names_file=None),
}
