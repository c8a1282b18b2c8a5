"""CVAT for images XML, the AutoML Vision CSV and Open Images box files found by
`open_dataset` and read box for box, with their classes and splits."""

import os

import numpy as np
import pytest

import dataset_layouts
from dataset_layouts import assert_splits_read_as, boxes_by_file, expected_boxes
from efficientdet_keras.data.datasets import open_dataset

pytestmark = pytest.mark.quick


def test_cvat_project_export_splits_by_subset_and_keeps_the_label_order(tmp_path):
    truth = dataset_layouts.write_cvat_xml(str(tmp_path))
    dataset = open_dataset(str(tmp_path))
    assert dataset.format == "cvat"
    assert dataset.classes.names == {1: "gadget", 2: "widget"}
    assert_splits_read_as(dataset, truth, (("train", "Train"), ("val", "Validation")))
    for record in dataset.split("val").records:
        assert os.path.isfile(record.path)
    assert "CVAT" in dataset.describe()


def test_cvat_rotated_box_ellipse_and_left_out_shapes(tmp_path, caplog):
    dataset_layouts._image(str(tmp_path / "images"), "a.jpg", 0)
    (tmp_path / "annotations.xml").write_text(
        '<annotations><meta><task><labels><label><name>cat</name></label></labels></task>'
        '</meta><image id="0" name="a.jpg" width="64" height="48">'
        '<box label="cat" xtl="10" ytl="10" xbr="30" ybr="20" rotation="90"/>'
        '<ellipse label="dog" cx="40" cy="24" rx="5" ry="3"/>'
        '<polyline label="cat" points="1,1;5,5"/><points label="cat" points="2,2"/>'
        '</image></annotations>')
    dataset = open_dataset(str(tmp_path))
    assert dataset.classes.names == {1: "cat", 2: "dog"}  # Undeclared labels after the rest.
    assert list(dataset.splits) == ["train"]
    # A 20x10 box turned a quarter about its centre (20, 15) stands 10 wide and 20 tall.
    (record,) = dataset.split("train").records
    np.testing.assert_allclose(record.boxes, [[5, 15, 25, 25], [21, 35, 27, 45]], atol=1e-4)
    assert "1 points, 1 polyline" in caplog.text and "annotations.xml" in caplog.text


def test_cvat_per_split_files_as_datumaro_writes_them(tmp_path):
    truth = dataset_layouts.write_cvat_xml(str(tmp_path / "source"))
    text = (tmp_path / "source" / "annotations.xml").read_text()
    head, images = text.split("</meta>")
    for subset, stem in (("Train", "train"), ("Validation", "val")):
        mine = "".join(part + "</image>" for part in images.split("</image>")
                       if 'subset="%s"' % subset in part)
        (tmp_path / (stem + ".xml")).write_text(
            head.replace('subset="%s"' % subset, "") + "</meta>" +
            mine.replace(' subset="%s"' % subset, "") + "</annotations>")
        os.rename(tmp_path / "source" / "images" / subset, tmp_path / "source" / stem)
    os.rename(tmp_path / "source", tmp_path / "images")
    os.remove(tmp_path / "images" / "annotations.xml")
    dataset = open_dataset(str(tmp_path))
    assert_splits_read_as(dataset, truth, (("train", "Train"), ("val", "Validation")))


def test_cvat_for_video_and_a_bad_coordinate_are_one_line(tmp_path):
    (tmp_path / "annotations.xml").write_text(
        '<annotations><meta/><track id="0" label="cat"><box frame="0" xtl="1" ytl="1" xbr="2" '
        'ybr="2"/></track></annotations>')
    with pytest.raises(ValueError, match="annotations.xml is CVAT for video"):
        open_dataset(str(tmp_path))
    (tmp_path / "annotations.xml").write_text(
        '<annotations><image id="0" name="a.jpg" width="64" height="48">'
        '<box label="cat" xtl="1" ytl="x" xbr="2" ybr="2"/></image></annotations>')
    with pytest.raises(ValueError, match=r"annotations.xml, image a.jpg: a <box> whose "):
        open_dataset(str(tmp_path))


def test_automl_csv_by_split_column_with_gs_addresses(tmp_path):
    truth = dataset_layouts.write_automl_csv(str(tmp_path))
    dataset = open_dataset(str(tmp_path))
    assert dataset.format == "automl_csv"
    assert dataset.classes.names == {1: "gadget", 2: "widget"}
    assert_splits_read_as(dataset, truth, (("train", "TRAIN"), ("val", "VALIDATION"),
                                           ("test", "TEST")))


def test_automl_unassigned_rows_are_train_and_said(tmp_path):
    dataset_layouts.write_automl_csv(str(tmp_path))
    table = tmp_path / "widgets.csv"
    table.write_text(table.read_text().replace("TRAIN,", "UNASSIGNED,", 3))
    dataset = open_dataset(str(tmp_path))
    assert len(dataset.split("train").records) == 8
    assert "3 UNASSIGNED images read into train" in dataset.describe()


def test_automl_bad_rows_are_named_with_their_line(tmp_path, caplog):
    dataset_layouts.write_automl_csv(str(tmp_path))
    table = tmp_path / "widgets.csv"
    lines = table.read_text().splitlines()
    bad = lines[:]
    bad[2] = bad[2].replace(",widget,0.", ",widget,1.5")
    table.write_text("\n".join(bad) + "\n")
    with pytest.raises(ValueError, match=r"widgets.csv, line 3: coordinates are fractions"):
        open_dataset(str(tmp_path))
    bad = lines[:]
    bad[1] = bad[1].replace(",gadget,", ",gadget,,,")
    table.write_text("\n".join(bad) + "\n")
    with pytest.raises(ValueError, match=r"widgets.csv, line 2: a box is x_min,y_min"):
        open_dataset(str(tmp_path))
    os.remove(tmp_path / "images" / "train" / "img00.jpg")
    table.write_text("\n".join(lines) + "\n")
    dataset = open_dataset(str(tmp_path))
    assert len(dataset.split("train").records) == 7
    assert "img00.jpg: cannot read the image's size, skipping its rows" in caplog.text


def test_open_images_boxes_with_descriptions_and_group_boxes(tmp_path):
    truth = dataset_layouts.write_open_images(str(tmp_path))
    dataset = open_dataset(str(tmp_path))
    assert dataset.format == "open_images"
    assert dataset.classes.names == {1: "gadget", 2: "widget"}
    assert_splits_read_as(dataset, truth, (("train", "train"), ("val", "validation")))
    crowd = {os.path.basename(r.path): bool(r.is_crowd.any())
             for r in dataset.split("train").records}
    assert crowd == {name: name == "t0007.jpg" for name in truth["train"]}


def test_open_images_without_descriptions_names_classes_by_label_id(tmp_path):
    truth = dataset_layouts.write_open_images(str(tmp_path))
    os.remove(tmp_path / "class-descriptions-boxable.csv")
    dataset = open_dataset(str(tmp_path))
    ids = dataset_layouts.OPEN_IMAGES_IDS
    assert sorted(dataset.classes.names.values()) == sorted(ids.values())
    assert boxes_by_file(dataset, "val") == expected_boxes(
        {name: [(ids[cls], box) for cls, box in boxes]
         for name, boxes in truth["validation"].items()})
    assert "named by their Open Images label ids" in dataset.describe()


def test_open_images_unknown_label_is_named_with_its_line(tmp_path):
    dataset_layouts.write_open_images(str(tmp_path))
    table = tmp_path / "validation-annotations-bbox.csv"
    table.write_text(table.read_text().replace("/m/0w1dg3t", "/m/0unknown", 1))
    with pytest.raises(ValueError, match=r"validation-annotations-bbox.csv, line 2: label "
                                         r"/m/0unknown is not in the class descriptions"):
        open_dataset(str(tmp_path))
