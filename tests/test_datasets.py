"""`open_dataset`: each layout labelling tools export is found, with its splits, its boxes and
its classes as the model numbers them; and how the data's classes meet a config."""

import json
import os

import numpy as np
import pytest

import dataset_layouts
from dataset_layouts import NAMES
from efficientdet_keras import get_efficientdet_config
from efficientdet_keras.data.formats.classes import (classes_into_config, coco_classes,
                                             named_classes)
from efficientdet_keras.data.datasets import open_dataset
from efficientdet_keras.data.formats.label_map import read_label_map_file

LAYOUTS = {
    "coco": (dataset_layouts.write_coco_folder, "COCO JSON", {"train": "train", "val": "val"}),
    "roboflow": (dataset_layouts.write_roboflow, "Roboflow", {"train": "train", "val": "valid"}),
    "yolo": (dataset_layouts.write_yolo, "YOLO", {"train": "train", "val": "val"}),
    "voc": (dataset_layouts.write_voc, "Pascal VOC", {"train": "train", "val": "val"}),
}


def boxes_by_file(records, names):
    # Rounded: YOLO's normalised coordinates hold 6 decimals.
    return {os.path.basename(r.path): [(names[int(c)], [round(float(v), 3) for v in box])
                                       for c, box in zip(r.classes, r.boxes)] for r in records}


@pytest.mark.quick
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_each_layout_is_found_with_its_splits_boxes_and_classes(tmp_path, layout):
    write, format_name, split_folders = LAYOUTS[layout]
    truth = write(str(tmp_path))
    dataset = open_dataset(str(tmp_path))
    assert dataset.format == layout
    assert list(dataset.splits) == ["train", "val"]
    # The two classes are 1 and 2 in the model, whatever the data's numbering (0-based in
    # YOLO, a root category first in Roboflow); VOC names its classes, taken in sorted order.
    expected = {1: "gadget", 2: "widget"} if layout == "voc" else {1: "widget", 2: "gadget"}
    assert dataset.classes.names == expected
    assert dataset.classes.num_classes == 2
    for split, folder in split_folders.items():
        found = boxes_by_file(dataset.split(split).records, dataset.classes.names)
        assert found == {name: [(cls, [float(v) for v in box])] for name, boxes
                         in truth[folder].items() for cls, box in boxes}
    text = dataset.describe()
    assert format_name in text.splitlines()[0]
    assert "train 8 images, 8 boxes" in " ".join(text.split())
    assert "val 4 images, 4 boxes" in " ".join(text.split())
    assert "classes 2 (%s, %s)" % (expected[1], expected[2]) in text


def test_roboflow_root_category_is_left_out_and_said(tmp_path):
    dataset_layouts.write_roboflow(str(tmp_path))
    dataset = open_dataset(str(tmp_path))
    assert dataset.classes.dropped == "widgets-xyz"
    assert dataset.classes.data_ids == {1: 1, 2: 2}
    assert "left out the root category 'widgets-xyz'" in dataset.describe()
    # Evaluation's ground truth has the model's classes, without the root.
    truth = dataset.ground_truth("val")
    assert truth["categories"] == [{"id": 1, "name": "widget"}, {"id": 2, "name": "gadget"}]


def test_zero_based_coco_ids_move_up_by_one_in_records_and_ground_truth(tmp_path):
    # Label Studio writes category ids from 0.
    dataset_layouts.write_coco_folder(str(tmp_path), category_ids=(0, 1))
    dataset = open_dataset(str(tmp_path))
    assert dataset.classes.names == {1: "widget", 2: "gadget"}
    assert dataset.classes.data_ids == {1: 0, 2: 1}
    records = dataset.split("train").records
    assert sorted({int(c) for r in records for c in r.classes}) == [1, 2]
    truth = dataset.ground_truth("val")
    assert sorted({a["category_id"] for a in truth["annotations"]}) == [1, 2]
    assert "model ids 1..2 are the data's ids 0..1" in dataset.describe()


def test_coco_ids_from_one_are_kept_with_their_gaps():
    classes = coco_classes([{"id": 1, "name": "person"}, {"id": 3, "name": "car"}])
    assert classes.names == {1: "person", 3: "car"}
    assert classes.num_classes == 3
    assert classes.data_ids == {1: 1, 3: 3}


def test_an_annotated_category_zero_is_a_class_not_a_root():
    categories = [{"id": 0, "name": "things", "supercategory": "none"},
                  {"id": 1, "name": "widget", "supercategory": "things"}]
    classes = coco_classes(categories, [{"category_id": 0}])
    assert classes.dropped is None
    assert classes.names == {1: "things", 2: "widget"}


@pytest.mark.parametrize("categories,message", [
    ([{"id": 1}], "needs an integer id and a name"),
    ([{"id": 1.5, "name": "a"}], "needs an integer id and a name"),
    ([{"id": 1, "name": "a"}, {"id": 1, "name": "b"}], "category id 1 appears twice"),
])
def test_bad_categories_are_named(categories, message):
    with pytest.raises(ValueError, match=message):
        coco_classes(categories)


def test_voc_names_take_the_voc_ids(tmp_path):
    dataset_layouts.write_voc(str(tmp_path), names=("cat", "dog"))
    dataset = open_dataset(str(tmp_path))
    assert dataset.classes.num_classes == 20
    assert dataset.classes.names[8] == "cat" and dataset.classes.names[12] == "dog"
    assert sorted({int(c) for r in dataset.split("train").records for c in r.classes}) == [8, 12]
    assert named_classes(["gizmo", "cat"]).names == {1: "cat", 2: "gizmo"}


def test_a_voc_folder_with_only_trainval_trains_on_it(tmp_path):
    dataset_layouts.write_voc(str(tmp_path))
    main = tmp_path / "ImageSets" / "Main"
    (main / "train.txt").rename(main / "trainval.txt")
    dataset = open_dataset(str(tmp_path))
    assert list(dataset.splits) == ["train", "val"]
    assert dataset.split("train").location.endswith("trainval.txt")


def test_a_coco_json_file_is_a_train_split_with_images_beside_it(tmp_path):
    truth = dataset_layouts.write_coco_json(str(tmp_path / "labels.json"), str(tmp_path), 3, (1, 2))
    dataset = open_dataset(str(tmp_path / "labels.json"))
    assert list(dataset.splits) == ["train"]
    assert dataset.validation_split() is None
    assert set(boxes_by_file(dataset.split("train").records, dataset.classes.names)) == set(truth)


def test_coco_images_missing_everywhere_are_named(tmp_path):
    dataset_layouts.write_coco_json(str(tmp_path / "a" / "train.json"), str(tmp_path / "a"), 2,
                                    (1, 2))
    for name in os.listdir(tmp_path / "a"):
        if name.endswith(".jpg"):
            os.remove(tmp_path / "a" / name)
    dataset = open_dataset(str(tmp_path / "a" / "train.json"))
    with pytest.raises(ValueError, match="train.json: cannot find its images .such as img00.jpg"):
        dataset.split("train").records


def test_coco_images_are_found_by_file_name_below_the_dataset_never_above_it(tmp_path):
    """FiftyOne's layout (labels.json, images in data/) with each file_name a path on the
    labelling machine: the images are the dataset's own copies, found by their file names."""
    root = tmp_path / "export"
    truth = dataset_layouts.write_coco_json(str(root / "labels.json"), str(root / "data"), 3,
                                            (1, 2))
    data = json.loads((root / "labels.json").read_text())
    for image in data["images"]:
        image["file_name"] = "/labelling-machine/photos/" + image["file_name"]
    (root / "labels.json").write_text(json.dumps(data))
    records = open_dataset(str(root)).split("train").records
    assert boxes_by_file(records, {1: NAMES[0], 2: NAMES[1]}) == truth
    assert all(os.path.dirname(r.path) == str(root / "data") for r in records)
    os.rename(root / "data", tmp_path / "data")  # Same names, but outside the dataset.
    with pytest.raises(ValueError, match="by their file names under %s$" % root):
        open_dataset(str(root)).split("train").records


def test_kitti_labels_read_their_boxes_and_leave_dont_care_regions_out(tmp_path, caplog):
    """KITTI's own layout, training/label_2 and training/image_2: pixel corners from fields
    5-8 of each line; DontCare regions said in one note, a malformed line in a warning."""
    root = tmp_path / "kitti"
    boxes = {}
    for i in range(2):
        name = "%06d" % i
        box = dataset_layouts._image(str(root / "training" / "image_2"), name + ".png", i)
        boxes[name + ".png"] = [(NAMES[i], box)]
        ymin, xmin, ymax, xmax = box
        lines = ["%s 0.00 0 -1.57 %.2f %.2f %.2f %.2f 1.5 1.6 3.7 -1.0 1.8 13.0 -1.6"
                 % (NAMES[i], xmin, ymin, xmax, ymax),
                 "DontCare -1 -1 -10 1.0 2.0 5.0 6.0 -1 -1 -1 -1000 -1000 -1000 -10"]
        if i == 1:
            lines.append("widget 1 2 3")
        os.makedirs(root / "training" / "label_2", exist_ok=True)
        (root / "training" / "label_2" / (name + ".txt")).write_text("\n".join(lines) + "\n")
    dataset = open_dataset(str(root))
    assert dataset.format == "kitti" and list(dataset.splits) == ["train"]
    with caplog.at_level("WARNING"):
        records = dataset.split("train").records
    assert "000001.txt:3: not a KITTI object" in caplog.text
    assert {k: [(n, [round(v) for v in b]) for n, b in v]
            for k, v in boxes_by_file(records, dataset.classes.names).items()} == \
        {k: [(n, [round(v) for v in b]) for n, b in v] for k, v in boxes.items()}
    assert "2 DontCare regions left out" in dataset.describe()


def test_label_studio_rectangles_in_percent_turned_about_their_corner(tmp_path):
    """Label Studio's JSON: an upload's name, its prefix aside, finds the image; a rectangle
    turned 90 degrees clockwise about its top-left corner is the box around it."""
    from PIL import Image
    os.makedirs(tmp_path / "images")
    Image.new("RGB", (200, 100)).save(tmp_path / "images" / "cat.jpg")
    rectangle = {"x": 50, "y": 10, "width": 10, "height": 40, "rotation": 90,
                 "rectanglelabels": ["cat"]}
    tasks = [{"id": 7, "data": {"image": "/data/upload/3/0a1b2c3d-cat.jpg"}, "annotations": [
        {"was_cancelled": True, "result": []},
        {"result": [{"type": "rectanglelabels", "value": rectangle, "original_width": 200,
                     "original_height": 100}]}]}]
    (tmp_path / "project-3.json").write_text(json.dumps(tasks))
    dataset = open_dataset(str(tmp_path))
    assert dataset.format == "label_studio"
    (record,) = dataset.split("train").records
    assert record.path == str(tmp_path / "images" / "cat.jpg")
    # Corner (100, 10); width 20 px turns downwards, height 40 px turns to the left.
    np.testing.assert_allclose(record.boxes, [[10, 60, 30, 100]], atol=1e-4)


def test_via_project_regions_are_boxes_of_their_class_attribute(tmp_path, caplog):
    """A VIA project ("Save project"): a polygon and an ellipse are the boxes around them, the
    class is the attribute named class beside another; a region without one is named."""
    from PIL import Image
    Image.new("RGB", (120, 80)).save(tmp_path / "a.jpg")
    regions = [
        {"shape_attributes": {"name": "polygon", "all_points_x": [10, 40, 25],
                              "all_points_y": [5, 8, 30]},
         "region_attributes": {"class": "cat", "colour": "black"}},
        {"shape_attributes": {"name": "ellipse", "cx": 60, "cy": 40, "rx": 20, "ry": 10},
         "region_attributes": {"class": "dog", "colour": "brown"}},
        {"shape_attributes": {"name": "rect", "x": 1, "y": 2, "width": 3, "height": 4},
         "region_attributes": {}}]
    project = {"_via_settings": {}, "_via_img_metadata": {
        "a.jpg1234": {"filename": "a.jpg", "size": 1234, "regions": regions}}}
    (tmp_path / "via_project.json").write_text(json.dumps(project))
    dataset = open_dataset(str(tmp_path))
    assert dataset.format == "via" and list(dataset.splits) == ["train"]
    assert "a region without a class attribute" in caplog.text
    (record,) = dataset.split("train").records
    assert boxes_by_file([record], dataset.classes.names) == {
        "a.jpg": [("cat", [5, 10, 30, 40]), ("dog", [30, 40, 50, 80])]}


def test_splits_whose_categories_differ_are_an_error(tmp_path):
    dataset_layouts.write_coco_folder(str(tmp_path))
    val = tmp_path / "annotations" / "instances_val.json"
    data = json.loads(val.read_text())
    data["categories"][0]["name"] = "sprocket"
    val.write_text(json.dumps(data))
    dataset = open_dataset(str(tmp_path))
    with pytest.raises(ValueError, match="list different categories"):
        dataset.split("val").records


def test_tfrecords_with_a_label_map_are_split_by_name(tmp_path):
    from helpers import make_records, write_tfrecord
    records = make_records(str(tmp_path), count=2)
    write_tfrecord(str(tmp_path / "data-train-00000-of-00001.tfrecord"), records)
    write_tfrecord(str(tmp_path / "data-val-00000-of-00001.tfrecord"), records)
    (tmp_path / "label_map.pbtxt").write_text(
        "item {\n  name: '/m/01'\n  id: 1\n  display_name: 'widget'\n}\n"
        "item { id: 2 name: 'gadget' }\n")
    dataset = open_dataset(str(tmp_path))
    assert dataset.format == "tfrecord"
    assert list(dataset.splits) == ["train", "val"]
    assert dataset.classes.names == {1: "widget", 2: "gadget"}
    assert dataset.split("val").records is None and dataset.ground_truth("val") is None
    assert "1 TFRecord file(s)" in dataset.describe()


def test_tfrecords_numbered_from_zero_take_their_names_from_class_text(tmp_path):
    """FiftyOne's TFRecords: one file tf.records, class/label from 0, the names only in
    class/text: read one up. With a label map from 1 beside them, the boxes of id 0, which
    training drops, are said in one note."""
    import tensorflow as tf
    from helpers import make_records
    from efficientdet_keras.data.formats.tf_example import record_to_tf_example
    os.makedirs(tmp_path / "images")
    records = make_records(str(tmp_path / "images"), count=2, classes=(0, 1))
    with tf.io.TFRecordWriter(str(tmp_path / "tf.records")) as writer:
        for record in records:
            with open(record.path, "rb") as f:
                writer.write(record_to_tf_example(record, f.read(), {0: "widget", 1: "gadget"})
                             .SerializeToString())
    dataset = open_dataset(str(tmp_path))
    assert dataset.format == "tfrecord" and list(dataset.splits) == ["train"]
    assert dataset.classes.names == {1: "widget", 2: "gadget"}
    assert "their ids 0..1 are read as 1..2" in dataset.describe()
    raw = next(iter(dataset.split("train").source.raw_dataset(None, False, None)))
    assert raw["classes"].numpy().tolist() == [1, 2]
    (tmp_path / "label_map.yaml").write_text("label_map: {1: widget, 2: gadget}\n")
    assert "2 boxes in the first 2 records have class ids 0 that label_map.yaml does not " \
        "name: training drops them; records numbered from 0" in open_dataset(
            str(tmp_path)).describe()


def test_label_map_files(tmp_path):
    (tmp_path / "a.yaml").write_text("label_map: {1: widget, 2: gadget}\n")
    assert read_label_map_file(str(tmp_path / "a.yaml")) == {1: "widget", 2: "gadget"}
    (tmp_path / "b.json").write_text('["widget"]')
    with pytest.raises(ValueError, match="b.json must be a mapping of integer ids to names"):
        read_label_map_file(str(tmp_path / "b.json"))


def test_a_folder_without_a_dataset_lists_what_was_looked_for(tmp_path):
    (tmp_path / "notes.txt").write_text("nothing here")
    with pytest.raises(ValueError, match="holds no dataset this package reads: looked for a "
                                         "YOLO data.yaml"):
        open_dataset(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        open_dataset(str(tmp_path / "missing"))


class TestClassesIntoConfig:
    def classes(self):
        return coco_classes([{"id": 1, "name": "widget"}, {"id": 2, "name": "gadget"}])

    def test_unset_keys_take_the_datas(self):
        config = get_efficientdet_config("efficientdet-d0")
        assert classes_into_config(config, self.classes()) == []
        assert config.num_classes == 2
        assert config.label_map == {1: "widget", 2: "gadget"}

    def test_a_smaller_num_classes_stops_with_one_line(self):
        config = get_efficientdet_config("efficientdet-d0").override("num_classes=1")
        with pytest.raises(ValueError, match="the data has 2 class ids but num_classes is 1: "
                                             "the boxes of gadget would be dropped"):
            classes_into_config(config, self.classes(), {"num_classes"})

    def test_a_larger_num_classes_and_other_names_are_warned_about(self):
        config = get_efficientdet_config("efficientdet-d0").override(
            {"num_classes": 90, "label_map": "coco"})
        warnings = classes_into_config(config, self.classes(), {"num_classes", "label_map"})
        assert config.num_classes == 90 and config.label_map == "coco"
        assert warnings[0] == ("num_classes is 90 but the data has 2 class ids: the head "
                               "predicts classes the data never shows")
        assert warnings[1].startswith("label_map differs from the data's classes (1: 'person' "
                                      "in the config, 'widget' in the data; 2: 'bicycle'")


def test_records_keep_pixel_boxes_through_the_pipeline(tmp_path):
    """The records of a found dataset decode as the training pipeline reads them."""
    import tensorflow as tf
    from efficientdet_keras.data.decode import decode_and_clean
    from efficientdet_keras.data.health import DataHealth
    dataset_layouts.write_yolo(str(tmp_path))
    source = open_dataset(str(tmp_path)).source("val")
    raw = next(iter(source.raw_dataset(None, shuffle=False, seed=None)))
    example = decode_and_clean(raw, num_classes=2, max_instances=10, health=DataHealth())
    assert bool(example["ok"])
    assert example["image"].shape[:2] == (48, 64)
    ymin, xmin, ymax, xmax = source.records[0].boxes[0]
    np.testing.assert_allclose(example["boxes"].numpy(), [[ymin / 48, xmin / 64, ymax / 48,
                                                           xmax / 64]], atol=1e-4)
    assert tf.reduce_all(example["classes"] == [1])
