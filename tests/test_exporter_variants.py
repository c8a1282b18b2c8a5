"""YOLO and VOC data as other exporters than Ultralytics and the VOCdevkit write them, read box
for box as the standard layout: a data.yaml with `valid:` or `validation:` for its val split, or
with no split keys at all (supervision's), its split folders beside it; Darknet's YOLO 1.1
(CVAT's) and label files beside images with classes.txt (labelImg's); VOC XMLs beside their
images, in split folders (Roboflow's, supervision's) or in one folder (labelImg's), and VOC
written from pixel 0 (datumaro's, CVAT's, globox's)."""

import os
import re
import shutil

import pytest
import yaml

import dataset_layouts
from dataset_layouts import NAMES, assert_splits_read_as, boxes_by_file, expected_boxes
from efficientdet_keras.data.datasets import open_dataset

pytestmark = pytest.mark.quick


def rewrite_yaml(root, content):
    with open(os.path.join(root, "data.yaml"), "w") as f:
        yaml.safe_dump(content, f)


@pytest.mark.parametrize("val_key", ["valid", "validation"])
def test_val_split_spelled_as_other_exporters_spell_it(tmp_path, val_key):
    root = str(tmp_path)
    truth = dataset_layouts.write_yolo(root)
    rewrite_yaml(root, {"train": "images/train", val_key: "images/val", "names": list(NAMES)})
    dataset = open_dataset(root)
    assert list(dataset.splits) == ["train", "val"]
    assert boxes_by_file(dataset, "val") == expected_boxes(truth["val"])


def test_two_spellings_of_one_split_are_refused_naming_both(tmp_path):
    root = str(tmp_path)
    dataset_layouts.write_yolo(root)
    rewrite_yaml(root, {"train": "images/train", "val": "images/val", "valid": "images/val",
                        "names": list(NAMES)})
    with pytest.raises(ValueError, match="'val' and 'valid' both name the val split"):
        open_dataset(root)


def test_no_split_keys_reads_images_split_folders(tmp_path):
    # images/train, images/val beside a data.yaml holding only the names.
    root = str(tmp_path)
    truth = dataset_layouts.write_yolo(root)
    rewrite_yaml(root, {"nc": 2, "names": list(NAMES)})
    dataset = open_dataset(root)
    assert dataset.classes.names == {1: "widget", 2: "gadget"}
    assert_splits_read_as(dataset, truth)


def test_no_split_keys_reads_split_images_folders(tmp_path):
    # supervision's as_yolo into train/images, train/labels, valid/images, valid/labels.
    source, root = str(tmp_path / "source"), str(tmp_path / "dataset")
    truth = dataset_layouts.write_yolo(source)
    for split, folder in (("train", "train"), ("val", "valid")):
        for kind in ("images", "labels"):
            shutil.copytree(os.path.join(source, kind, split), os.path.join(root, folder, kind))
    rewrite_yaml(root, {"names": list(NAMES), "nc": 2})
    dataset = open_dataset(root)
    assert_splits_read_as(dataset, truth)


def test_no_split_keys_and_no_split_folders_is_one_line(tmp_path):
    root = str(tmp_path)
    rewrite_yaml(root, {"names": list(NAMES)})
    with pytest.raises(ValueError, match="no 'train', 'val' or 'test' key .* nor train/images/ or "
                       "images/train/"):
        open_dataset(root)


def voc_xml_beside_images(devkit, target, split_folders):
    """The VOC year folder's XMLs and images side by side, in target/<folder>/ per split (or
    target/ itself for a folder named "")."""
    for split, folder in split_folders.items():
        out = os.path.join(target, folder)
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(devkit, "ImageSets", "Main", split + ".txt")) as f:
            for image_id in f.read().split():
                shutil.copy(os.path.join(devkit, "Annotations", image_id + ".xml"), out)
                shutil.copy(os.path.join(devkit, "JPEGImages", image_id + ".jpg"), out)


def test_voc_xmls_beside_images_in_split_folders(tmp_path):
    # Roboflow's and supervision's VOC exports: train/ and valid/, each image with its XML.
    devkit, root = str(tmp_path / "devkit"), str(tmp_path / "dataset")
    truth = dataset_layouts.write_voc(devkit)
    voc_xml_beside_images(devkit, root, {"train": "train", "val": "valid"})
    dataset = open_dataset(root)
    assert dataset.format == "voc"
    assert dataset.classes.names == open_dataset(devkit).classes.names
    assert_splits_read_as(dataset, truth)
    assert "train 8 images, 8 boxes" in " ".join(dataset.describe().split())


def test_voc_xmls_beside_images_in_one_folder_are_train(tmp_path):
    # labelImg: one folder of images, each with its XML.
    devkit, root = str(tmp_path / "devkit"), str(tmp_path / "labelimg")
    truth = dataset_layouts.write_voc(devkit)
    voc_xml_beside_images(devkit, root, {"train": ""})
    dataset = open_dataset(root)
    assert list(dataset.splits) == ["train"]
    assert boxes_by_file(dataset, "train") == expected_boxes(truth["train"])


def test_a_voc_xml_without_its_image_is_named(tmp_path):
    devkit, root = str(tmp_path / "devkit"), str(tmp_path / "labelimg")
    dataset_layouts.write_voc(devkit)
    voc_xml_beside_images(devkit, root, {"train": ""})
    os.remove(os.path.join(root, "train_03.jpg"))
    with pytest.raises(FileNotFoundError, match="train_03.xml: no image beside it"):
        open_dataset(root)


def zero_based(xml_folder):
    """The XMLs rewritten as datumaro, CVAT and globox write VOC: pixels from 0."""
    for name in os.listdir(xml_folder):
        if name.endswith(".xml"):
            path = os.path.join(xml_folder, name)
            with open(path) as f:
                text = f.read()
            for key in ("xmin", "ymin"):
                text = re.sub(r"<%s>(\d+)</%s>" % (key, key),
                              lambda m, k=key: "<%s>%d</%s>" % (k, int(m.group(1)) - 1, k), text)
            with open(path, "w") as f:
                f.write(text)


def zero_based_export(tmp_path):
    """(truth, folder) of VOC XMLs beside their images in train/ and valid/, written 0-based
    as datumaro, CVAT and globox write them."""
    devkit, root = str(tmp_path / "devkit"), str(tmp_path / "export")
    truth = dataset_layouts.write_voc(devkit)
    voc_xml_beside_images(devkit, root, {"train": "train", "val": "valid"})
    zero_based(os.path.join(root, "train"))
    zero_based(os.path.join(root, "valid"))
    return truth, root


def test_zero_based_voc_folders_are_read_from_zero_and_said(tmp_path):
    truth, root = zero_based_export(tmp_path)
    # One box that touches the left edge: a 0 that 1-based pixels cannot hold.
    edge = os.path.join(root, "valid", "val_01.xml")
    with open(edge) as f:
        text = f.read()
    with open(edge, "w") as f:
        f.write(re.sub(r"<xmin>\d+</xmin>", "<xmin>0</xmin>", text))
    (name, box), = truth["val"]["val_01.jpg"]
    truth["val"]["val_01.jpg"] = [(name, [box[0], 0, box[2], box[3]])]
    dataset = open_dataset(root)
    assert_splits_read_as(dataset, truth)
    assert "boxes 0-based, as" in dataset.describe()


def test_a_datumaro_voc_year_folder_is_zero_based_by_its_labelmap(tmp_path):
    devkit = str(tmp_path)
    truth = dataset_layouts.write_voc(devkit)
    zero_based(os.path.join(devkit, "Annotations"))
    with open(os.path.join(devkit, "labelmap.txt"), "w") as f:
        f.write("# label:color_rgb:parts:actions\nbackground:0,0,0::\nwidget:1,2,3::\n"
                "gadget:4,5,6::\n")
    dataset = open_dataset(devkit)
    assert boxes_by_file(dataset, "val") == expected_boxes(truth["val"])
    assert "labelmap.txt" in dataset.describe()
    # The classes in the label map's order (not sorted by name, as without it).
    assert dataset.classes.names == {1: "widget", 2: "gadget"}


def test_the_voc_devkit_stays_one_based(tmp_path):
    truth = dataset_layouts.write_voc(str(tmp_path))
    dataset = open_dataset(str(tmp_path))
    assert boxes_by_file(dataset, "train") == expected_boxes(truth["train"])
    assert "0-based" not in dataset.describe()


def test_the_pixel_origin_given_wins_where_the_xmls_cannot_tell(tmp_path):
    truth, root = zero_based_export(tmp_path)
    # No coordinate of 0: read as the devkit's 1-based pixels, each box grows a pixel up
    # and left.
    shifted = boxes_by_file(open_dataset(root), "val")
    assert shifted == {name: [(c, [box[0] - 1, box[1] - 1, box[2], box[3]]) for c, box in boxes]
                       for name, boxes in expected_boxes(truth["val"]).items()}
    dataset = open_dataset(root, voc_origin=0)
    assert_splits_read_as(dataset, truth)
    assert "boxes 0-based, as given" in dataset.describe()


def test_the_origin_reaches_training_and_evaluation_data(tmp_path):
    from efficientdet_keras.config import get_efficientdet_config as get_config
    from efficientdet_keras.workflows.evaluate import validation_data
    from efficientdet_keras.workflows.train_data import DataSpec, find_training_data
    truth = dataset_layouts.write_voc(str(tmp_path / "voc"))
    zero_based(os.path.join(str(tmp_path / "voc"), "Annotations"))
    spec = DataSpec(data=str(tmp_path / "voc"), voc_origin=0)
    os.makedirs(tmp_path / "run")
    found = find_training_data(spec, get_config("efficientdet-d0"), str(tmp_path / "run"),
                               evaluate=False, report=lambda line: None)
    assert boxes_by_file(found.dataset, "train") == expected_boxes(truth["train"])
    scored = validation_data(get_config("efficientdet-d0"), data=spec.data, voc_origin=0)
    assert boxes_by_file(scored.dataset, "val") == expected_boxes(truth["val"])


def labels_beside_images(source, target):
    """An Ultralytics dataset's images with their label files beside them, per split."""
    for split in ("train", "val"):
        out = os.path.join(target, split)
        for kind in ("images", "labels"):
            shutil.copytree(os.path.join(source, kind, split), out, dirs_exist_ok=True)


def test_darknet_yolo_1_1_as_cvat_exports_it(tmp_path):
    # obj.data, obj.names, train.txt, valid.txt and obj_<split>_data/, paths under data/.
    source, root = str(tmp_path / "source"), str(tmp_path / "cvat")
    truth = dataset_layouts.write_yolo(source)
    labels_beside_images(source, os.path.join(root, "staging"))
    for split, listing in (("train", "train.txt"), ("val", "valid.txt")):
        folder = "obj_%s_data" % split
        os.rename(os.path.join(root, "staging", split), os.path.join(root, folder))
        images = sorted(n for n in os.listdir(os.path.join(root, folder)) if n.endswith(".jpg"))
        with open(os.path.join(root, listing), "w") as f:
            f.write("".join("data/%s/%s\n" % (folder, n) for n in images))
    with open(os.path.join(root, "obj.names"), "w") as f:
        f.write("\n".join(NAMES) + "\n")
    with open(os.path.join(root, "obj.data"), "w") as f:
        f.write("classes = 2\ntrain = data/train.txt\nvalid = data/valid.txt\n"
                "names = data/obj.names\nbackup = backup/\n")
    dataset = open_dataset(root)
    assert dataset.format == "yolo" and dataset.classes.names == {1: "widget", 2: "gadget"}
    assert_splits_read_as(dataset, truth)


def test_labels_beside_images_with_classes_txt(tmp_path):
    # labelImg's YOLO mode: train/ and val/ of images and label files, classes.txt above.
    source, root = str(tmp_path / "source"), str(tmp_path / "labelimg")
    truth = dataset_layouts.write_yolo(source)
    labels_beside_images(source, root)
    with open(os.path.join(root, "classes.txt"), "w") as f:
        f.write("\n".join(NAMES) + "\n")
    dataset = open_dataset(root)
    assert_splits_read_as(dataset, truth)
