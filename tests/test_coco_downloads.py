"""COCO folders as COCO's own download and datumaro's export lay them out: the files of the other
COCO tasks sit beside the instances files, and the split's boxes come from `instances_*` only."""

import json
import os
import shutil

import pytest

from efficientdet_keras.data.datasets import open_dataset
from efficientdet_keras.data.synthetic import write_synthetic_dataset

pytestmark = pytest.mark.quick


def write_json(path, content):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(content, f)


def other_task_files(annotations, split, instances):
    """What the COCO 2017 zip and datumaro add beside instances_<split>.json, built from the
    instances file's own images: captions and image info (no categories, no boxes), person
    keypoints (one category and boxes of its own), stuff (other categories and boxes)."""
    images = instances["images"]
    first = images[0]["id"]
    write_json(os.path.join(annotations, "captions_%s.json" % split), {
        "images": images, "annotations": [{"id": 1, "image_id": first, "caption": "shapes"}]})
    write_json(os.path.join(annotations, "image_info_%s.json" % split), {
        "images": images, "annotations": []})
    write_json(os.path.join(annotations, "person_keypoints_%s.json" % split), {
        "images": images, "categories": [{"id": 1, "name": "person", "keypoints": ["nose"]}],
        "annotations": [{"id": 1, "image_id": first, "category_id": 1, "bbox": [1, 1, 5, 5],
                         "area": 25, "iscrowd": 0, "keypoints": [2, 2, 2], "num_keypoints": 1}]})
    write_json(os.path.join(annotations, "stuff_%s.json" % split), {
        "images": images, "categories": [{"id": 92, "name": "banner"}],
        "annotations": [{"id": 1, "image_id": first, "category_id": 92, "bbox": [0, 0, 9, 9],
                         "area": 81, "iscrowd": 0}]})


def boxes_by_image(dataset, split):
    return {str(r.image_id): (sorted(map(tuple, r.boxes.round(3).tolist())), sorted(r.classes))
            for r in dataset.split(split).records}


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("coco-source"))
    return write_synthetic_dataset(root, num_train=4, num_val=2, image_size=64, tfrecord=False)


def test_coco_2017_as_the_zip_unpacks_reads_the_instances_files(synthetic, tmp_path):
    # annotations/{captions,instances,person_keypoints}_{train,val}2017.json, train2017/, val2017/
    root = str(tmp_path / "coco")
    for split, images in (("train", synthetic.train_images), ("val", synthetic.val_images)):
        shutil.copytree(images, os.path.join(root, split + "2017"))
        with open(getattr(synthetic, split + "_json")) as f:
            instances = json.load(f)
        write_json(os.path.join(root, "annotations", "instances_%s2017.json" % split), instances)
        other_task_files(os.path.join(root, "annotations"), split + "2017", instances)
    dataset = open_dataset(root)
    source = open_dataset(synthetic.train_json)
    assert sorted(dataset.splits) == ["train", "val"]
    assert dataset.classes.names == source.classes.names == synthetic.label_map
    assert dataset.split("train").location.endswith("instances_train2017.json")
    assert dataset.split("val").location.endswith("instances_val2017.json")
    assert boxes_by_image(dataset, "train") == boxes_by_image(source, "train")
    assert sum(len(r.classes) for r in dataset.split("val").records) > 0
    assert not dataset.skipped


def test_datumaro_layout_with_image_info_reads_the_instances_file(synthetic, tmp_path):
    # datumaro's COCO export: annotations/<task>_<subset>.json, images/<subset>/
    root = str(tmp_path / "datumaro")
    shutil.copytree(synthetic.train_images, os.path.join(root, "images", "train"))
    with open(synthetic.train_json) as f:
        instances = json.load(f)
    write_json(os.path.join(root, "annotations", "instances_train.json"), instances)
    other_task_files(os.path.join(root, "annotations"), "train", instances)
    dataset = open_dataset(root)
    assert list(dataset.splits) == ["train"]
    assert dataset.classes.names == synthetic.label_map
    assert boxes_by_image(dataset, "train") == boxes_by_image(open_dataset(synthetic.train_json),
                                                              "train")


def test_only_other_tasks_files_are_refused_in_one_line(synthetic, tmp_path):
    with open(synthetic.train_json) as f:
        instances = json.load(f)
    annotations = str(tmp_path / "annotations")
    other_task_files(annotations, "train2017", instances)
    os.remove(os.path.join(annotations, "person_keypoints_train2017.json"))
    os.remove(os.path.join(annotations, "stuff_train2017.json"))
    with pytest.raises(ValueError, match="no instances_") as error:
        open_dataset(str(tmp_path))
    assert "captions_train2017.json" in str(error.value) and "\n" not in str(error.value)


def test_a_split_file_without_categories_is_refused_naming_it(synthetic, tmp_path):
    with open(synthetic.train_json) as f:
        instances = json.load(f)
    del instances["categories"]
    path = str(tmp_path / "train.json")
    write_json(path, instances)
    with pytest.raises(ValueError, match="no 'categories' list") as error:
        open_dataset(path)
    assert path in str(error.value)
