"""LabelMe JSON folders and the TensorFlow Object Detection CSV (Roboflow's `_annotations.csv`)
found by `open_dataset` and read box for box, with their classes by name."""

import os

import pytest

import dataset_layouts
from dataset_layouts import assert_splits_read_as, boxes_by_file, expected_boxes
from efficientdet_keras.data.datasets import open_dataset

pytestmark = pytest.mark.quick

LAYOUTS = {"labelme": (dataset_layouts.write_labelme, "LabelMe JSON"),
           "csv": (dataset_layouts.write_box_csv, "CSV (TensorFlow Object Detection)")}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_split_folders_are_read_box_for_box(tmp_path, layout):
    write, format_name = LAYOUTS[layout]
    truth = write(str(tmp_path))
    dataset = open_dataset(str(tmp_path))
    assert dataset.format == layout
    assert dataset.classes.names == {1: "gadget", 2: "widget"}  # By name, as VOC's.
    assert_splits_read_as(dataset, truth, (("train", "train"), ("val", "valid")))
    text = " ".join(dataset.describe().split())
    assert format_name in text and "train 8 images, 8 boxes" in text
    for record in dataset.split("val").records:
        assert os.path.isfile(record.path)


def test_labelme_in_one_folder_is_train_and_shapes_without_a_box_are_said(tmp_path, caplog):
    import json
    source = str(tmp_path / "source")
    truth = dataset_layouts.write_labelme(source)
    folder = os.path.join(source, "train")
    with open(os.path.join(folder, "img00.json")) as f:
        data = json.load(f)
    data["shapes"].append({"label": "tip", "shape_type": "point", "points": [[3, 4]]})
    with open(os.path.join(folder, "img00.json"), "w") as f:
        json.dump(data, f)
    dataset = open_dataset(folder)
    assert list(dataset.splits) == ["train"]
    assert boxes_by_file(dataset, "train") == expected_boxes(truth["train"])
    assert "img00.json: 1 shapes without a box left out (point)" in caplog.text


def test_a_bad_csv_value_is_named_with_its_line(tmp_path):
    dataset_layouts.write_box_csv(str(tmp_path))
    table = tmp_path / "train" / "_annotations.csv"
    lines = table.read_text().splitlines()
    lines[3] = lines[3].replace(",widget,", ",widget,x")
    table.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"_annotations.csv, line 4: "):
        open_dataset(str(tmp_path))


def test_a_labelme_file_without_its_size_is_named(tmp_path):
    dataset_layouts.write_labelme(str(tmp_path))
    path = tmp_path / "train" / "img01.json"
    path.write_text(path.read_text().replace('"imageHeight": 48, ', ""))
    with pytest.raises(ValueError, match="img01.json: a LabelMe file needs imageHeight"):
        open_dataset(str(tmp_path))
