"""Data whose class names are a model's, numbered another way (another layout of the same data,
another tool's export, a subset of COCO's names), scores and trains against the model's ids:
the data's classes take the model's ids by name."""

import json
import os

import pytest

import dataset_layouts
from efficientdet_keras import get_efficientdet_config
from efficientdet_keras.data.datasets import open_dataset
from efficientdet_keras.data.formats.classes import DataClasses, ids_matched_by_name
from efficientdet_keras.workflows.validation_data import (match_classes_by_name,
                                                          open_validation_data)

pytestmark = pytest.mark.quick


def coco_ap(ground_truth, detections):
    """COCO AP by pycocotools itself."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval
    truth = COCO()
    truth.dataset = json.loads(json.dumps(ground_truth))
    truth.createIndex()
    evaluation = COCOeval(truth, truth.loadRes(detections), "bbox")
    evaluation.evaluate()
    evaluation.accumulate()
    evaluation.summarize()
    return evaluation.stats[0]


def test_ids_matched_by_name():
    data = DataClasses({1: "widget", 2: "gadget"}, {1: 0, 2: 1})
    assert ids_matched_by_name(data, {1: "gadget", 2: "widget"}) == {1: 2, 2: 1}
    assert ids_matched_by_name(data, {1: "widget", 2: "gadget"}) == {}  # Already agree.
    assert ids_matched_by_name(data, {3: "widget", 7: "gadget", 9: "other"}) == {1: 3, 2: 7}
    assert ids_matched_by_name(data, {1: "widget", 2: "thing"}) == {}  # A name not the model's.


def test_a_model_trained_on_coco_scores_the_voc_export_of_its_data_as_the_coco_one(tmp_path):
    coco_root, voc_root = str(tmp_path / "coco"), str(tmp_path / "voc")
    dataset_layouts.write_coco_folder(coco_root)
    dataset_layouts.write_voc(voc_root)
    coco = open_dataset(coco_root)
    # The same data, numbered two ways: COCO in the data's order, VOC by sorted name.
    assert coco.classes.names == {1: "widget", 2: "gadget"}
    assert open_dataset(voc_root).classes.names == {1: "gadget", 2: "widget"}
    config = get_efficientdet_config("efficientdet-d0")
    config.override({"num_classes": 2, "label_map": dict(coco.classes.names)})

    # A model that finds every box of the COCO export, as its ids name them.
    coco_truth = coco.ground_truth("val")
    detections = [{"image_id": a["image_id"], "category_id": a["category_id"],
                   "bbox": a["bbox"], "score": 1.0} for a in coco_truth["annotations"]]
    assert coco_ap(coco_truth, detections) == pytest.approx(1.0)

    validation = open_validation_data(voc_root, config, files_dir=str(tmp_path))
    with open(validation.ground_truth) as f:
        voc_truth = json.load(f)
    # The VOC files are val_00.jpg ... for the COCO export's img00.jpg ...: the same images.
    voc_ids = {image["file_name"].replace("val_", "img"): image["id"]
               for image in voc_truth["images"]}
    coco_files = {image["id"]: image["file_name"] for image in coco_truth["images"]}
    on_voc = [dict(d, image_id=voc_ids[coco_files[d["image_id"]]]) for d in detections]
    assert coco_ap(voc_truth, on_voc) == pytest.approx(1.0)
    assert {c["id"]: c["name"] for c in voc_truth["categories"]} == coco.classes.names
    records = validation.source.records
    assert sorted(int(c) for r in records for c in r.classes) == sorted(
        a["category_id"] for a in coco_truth["annotations"])


def test_a_subset_of_coco_names_takes_the_released_ids(tmp_path):
    root = str(tmp_path)
    dataset_layouts.write_yolo(root)
    with open(os.path.join(root, "data.yaml"), "w") as f:
        f.write("train: images/train\nval: images/val\nnames: [car, person]\n")
    config = get_efficientdet_config("efficientdet-d0")
    config.label_map = "coco"  # As a released checkpoint's: person 1, car 3.
    dataset = match_classes_by_name(config, open_dataset(root), {"label_map", "num_classes"})
    assert dataset.classes.names == {3: "car", 1: "person"}
    assert dataset.classes.data_ids == {3: 0, 1: 1}
    assert {int(c) for r in dataset.split("val").records for c in r.classes} == {1, 3}


def test_fixed_keys_without_the_label_map_leave_the_data_as_it_is(tmp_path):
    dataset_layouts.write_voc(str(tmp_path))
    config = get_efficientdet_config("efficientdet-d0")
    config.override({"num_classes": 2, "label_map": {1: "widget", 2: "gadget"}})
    dataset = open_dataset(str(tmp_path))
    assert match_classes_by_name(config, dataset, {"num_classes"}) is dataset
