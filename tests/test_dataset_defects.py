"""Defects real dataset folders have, each made in a temporary folder: read as the tool that
wrote the data meant, or one line naming the file and the defect, never a run on wrong boxes."""

import json
import os

import numpy as np
import pytest
from PIL import Image

import dataset_layouts
from dataset_layouts import boxes_by_file, expected_boxes
from efficientdet_keras.data.datasets import open_dataset

pytestmark = pytest.mark.quick


def rewrite_json(path, change):
    with open(path) as f:
        data = json.load(f)
    change(data)
    with open(path, "w") as f:
        json.dump(data, f)


def test_coco_file_names_with_windows_separators_are_paths(tmp_path):
    truth = dataset_layouts.write_coco_folder(str(tmp_path))
    os.makedirs(tmp_path / "val" / "sub")
    for name in truth["val"]:
        os.rename(tmp_path / "val" / name, tmp_path / "val" / "sub" / name)

    def windows_names(data):
        for image in data["images"]:
            image["file_name"] = "sub\\" + image["file_name"]
    rewrite_json(tmp_path / "annotations" / "instances_val.json", windows_names)
    dataset = open_dataset(str(tmp_path))
    assert boxes_by_file(dataset, "val") == expected_boxes(truth["val"])
    assert all(os.path.isfile(r.path) for r in dataset.split("val").records)


def test_coco_corner_boxes_are_refused_in_one_line_for_the_file(tmp_path):
    dataset_layouts.write_coco_folder(str(tmp_path))

    def corners(data):  # Boxes across the 64x48 images, written as corners.
        for index, annotation in enumerate(data["annotations"]):
            x, y, w, h = 20 + index, 10 + index, 30, 25
            annotation["bbox"] = [x, y, x + w, y + h]
    rewrite_json(tmp_path / "annotations" / "instances_train.json", corners)
    with pytest.raises(ValueError) as refused:
        open_dataset(str(tmp_path)).split("train").records
    message = str(refused.value)
    assert "instances_train.json: 8 of its 8 boxes reach past their image" in message
    assert "corners [x1, y1, x2, y2]" in message and "\n" not in message


def test_a_category_id_the_categories_lack_is_skipped_and_said(tmp_path, caplog):
    truth = dataset_layouts.write_coco_folder(str(tmp_path))

    def gap(data):
        data["annotations"][0]["category_id"] = 7
    rewrite_json(tmp_path / "annotations" / "instances_val.json", gap)
    dataset = open_dataset(str(tmp_path))
    assert dataset.classes.names == {1: "widget", 2: "gadget"}  # No class appears.
    read = boxes_by_file(dataset, "val")
    assert read["img00.jpg"] == [] and read["img01.jpg"] == expected_boxes(truth["val"])[
        "img01.jpg"]
    assert "category_id 7 is not among the file's categories" in caplog.text


def test_voc_pngs_in_jpegimages_and_ids_with_their_extension(tmp_path):
    truth = dataset_layouts.write_voc(str(tmp_path))
    images = tmp_path / "JPEGImages"
    for name in os.listdir(images):
        if name.startswith("train_"):
            Image.open(images / name).save(images / name.replace(".jpg", ".png"))
            os.remove(images / name)
    val_list = tmp_path / "ImageSets" / "Main" / "val.txt"
    val_list.write_text("".join(line + ".jpg\n" for line in val_list.read_text().split()))
    dataset = open_dataset(str(tmp_path))
    read = boxes_by_file(dataset, "train")
    assert read == {name.replace(".jpg", ".png"): boxes
                    for name, boxes in expected_boxes(truth["train"]).items()}
    assert boxes_by_file(dataset, "val") == expected_boxes(truth["val"])


ALIAS_BOMB = """\
a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
names: *g
train: images/train
val: images/val
"""


def test_a_yaml_alias_bomb_in_data_yaml_is_one_line(tmp_path):
    dataset_layouts.write_yolo(str(tmp_path))
    (tmp_path / "data.yaml").write_text(ALIAS_BOMB)
    with pytest.raises(ValueError) as refused:
        open_dataset(str(tmp_path))
    message = str(refused.value)
    assert "data.yaml: its aliases expand it to more than" in message and "\n" not in message


def test_yaml_limits_leave_ordinary_aliases_and_refuse_a_self_reference(tmp_path):
    from efficientdet_keras.utils.yaml_files import YamlOutOfBounds, load_yaml_file
    ordinary = tmp_path / "hparams.yaml"
    ordinary.write_text("base: &base {learning_rate: 0.01, jitter_min: 0.5}\n"
                        "other: *base\nnames: [a, b]\n")
    assert load_yaml_file(str(ordinary)) == {
        "base": {"learning_rate": 0.01, "jitter_min": 0.5},
        "other": {"learning_rate": 0.01, "jitter_min": 0.5}, "names": ["a", "b"]}
    looped = tmp_path / "looped.yaml"
    looped.write_text("names: &n [a, *n]\n")
    with pytest.raises(YamlOutOfBounds, match="looped.yaml: an alias refers to a node"):
        load_yaml_file(str(looped))
    np.testing.assert_equal(load_yaml_file(str(tmp_path / "hparams.yaml"))["names"], ["a", "b"])


def test_describe_warns_of_leaks_and_label_set_mistakes(tmp_path):
    import shutil
    truth = dataset_layouts.write_coco_folder(str(tmp_path), train=8, val=4)
    # The same image in both splits: a copy under another name, and the same file listed.
    shutil.copy(tmp_path / "train" / "img05.jpg", tmp_path / "val" / "copy.jpg")

    def val_changes(data):
        data["images"].append({"id": 99, "file_name": "copy.jpg", "height": 48, "width": 64})
        data["images"].append({"id": 98, "file_name": "../train/img06.jpg", "height": 48,
                               "width": 64})
        data["annotations"] = [a for a in data["annotations"] if a["category_id"] == 1]
        first = dict(data["annotations"][0], id=500)  # A box given twice.
        data["annotations"].append(first)
    rewrite_json(tmp_path / "annotations" / "instances_val.json", val_changes)

    def train_names(data):
        data["categories"].append({"id": 3, "name": "Widget ", "supercategory": "things"})
        data["categories"].append({"id": 4, "name": "gadget", "supercategory": "things"})
    for split in ("train", "val"):
        rewrite_json(tmp_path / "annotations" / ("instances_%s.json" % split), train_names)
    text = open_dataset(str(tmp_path)).describe()
    warnings = [line.strip() for line in text.splitlines() if "warning:" in line]
    # The writer draws img00..img03 of both splits alike: 4 of the 6 are the same bytes.
    assert any("6 images are in train and val" in w and "img00.jpg" in w for w in warnings), text
    assert any("'gadget' has boxes in train but none in val" in w for w in warnings), text
    assert any("'widget', 'Widget '" in w and "differ only in case" in w for w in warnings), text
    assert any("class name 'gadget' is given to ids 2, 4" in w for w in warnings), text
    assert any("val: 1 boxes repeat another box" in w for w in warnings), text
    assert len(truth["train"]) == 8


def test_describe_of_clean_data_has_no_warning(tmp_path):
    dataset_layouts.write_coco_folder(str(tmp_path))
    for name in os.listdir(tmp_path / "val"):  # Not the bytes of train's images of one name.
        pixels = np.array(Image.open(tmp_path / "val" / name))
        pixels[-1, -1] = 77
        Image.fromarray(pixels).save(tmp_path / "val" / name, quality=95)
    assert "warning" not in open_dataset(str(tmp_path)).describe()


@pytest.mark.parametrize("kpt_shape", [[2, 3], [3, 2]])
def test_yolo_pose_labels_are_read_as_their_boxes(tmp_path, kpt_shape):
    import yaml
    truth = dataset_layouts.write_yolo(str(tmp_path))
    with open(tmp_path / "data.yaml") as f:
        content = yaml.safe_load(f)
    content["kpt_shape"] = kpt_shape
    with open(tmp_path / "data.yaml", "w") as f:
        yaml.safe_dump(content, f)
    keypoints = " ".join(["0.5"] * (kpt_shape[0] * kpt_shape[1]))
    for split in ("train", "val"):
        folder = tmp_path / "labels" / split
        for name in os.listdir(folder):
            lines = (folder / name).read_text().splitlines()
            (folder / name).write_text("".join("%s %s\n" % (line, keypoints) for line in lines))
    dataset = open_dataset(str(tmp_path))
    for split in ("train", "val"):
        read = boxes_by_file(dataset, split)
        expected = expected_boxes(truth[split])
        assert read.keys() == expected.keys()
        for name, boxes in expected.items():
            np.testing.assert_allclose([b for _, b in read[name]], [b for _, b in boxes],
                                       atol=1e-3)
            assert [c for c, _ in read[name]] == [c for c, _ in boxes]


def test_yolo_images_in_a_symlinked_folder_are_read_and_a_link_loop_ends(tmp_path):
    truth = dataset_layouts.write_yolo(str(tmp_path / "data"))
    images = tmp_path / "data" / "images" / "train"
    labels = tmp_path / "data" / "labels" / "train"
    for kind, folder in (("images", images), ("labels", labels)):
        outside = tmp_path / ("elsewhere-" + kind)
        os.makedirs(outside)
        for name in sorted(os.listdir(folder))[:3]:
            os.rename(folder / name, outside / name)
        os.symlink(outside, folder / "more")
    os.symlink(images, images / "loop")  # A link back up: followed once, no more.
    dataset = open_dataset(str(tmp_path / "data"))
    assert sorted(boxes_by_file(dataset, "train").items()) == sorted(
        expected_boxes(truth["train"]).items())


def test_a_coco_split_without_annotations_is_said(tmp_path, caplog):
    dataset_layouts.write_coco_folder(str(tmp_path))
    rewrite_json(tmp_path / "annotations" / "instances_val.json",
                 lambda data: data.update(annotations=[]))
    records = open_dataset(str(tmp_path)).split("val").records
    assert len(records) == 4 and not any(len(r.classes) for r in records)
    assert "instances_val.json lists 4 images and no annotations" in caplog.text


@pytest.mark.parametrize("orientation", [5, 6, 7, 8])
def test_coco_boxes_drawn_on_the_exif_turned_image_land_on_its_stored_pixels(tmp_path,
                                                                              orientation):
    from PIL import ImageOps
    stored_box = [6, 10, 20, 40]  # ymin, xmin, ymax, xmax in the stored 48x64 pixels.
    pixels = np.zeros([48, 64, 3], np.uint8)
    pixels[6:20, 10:40] = 255
    exif = Image.Exif()
    exif[0x0112] = orientation
    os.makedirs(tmp_path / "train")
    path = tmp_path / "train" / "turned.jpg"
    Image.fromarray(pixels).save(path, quality=95, exif=exif)
    # What a labelling tool shows and boxes: the image turned by its orientation.
    with Image.open(path) as image:
        shown = np.array(ImageOps.exif_transpose(image))
    rows, columns = np.nonzero(shown[..., 0] > 128)
    x, y = int(columns.min()), int(rows.min())
    w, h = int(columns.max()) + 1 - x, int(rows.max()) + 1 - y
    os.makedirs(tmp_path / "annotations")
    with open(tmp_path / "annotations" / "instances_train.json", "w") as f:
        json.dump({"images": [{"id": 1, "file_name": "turned.jpg", "height": shown.shape[0],
                               "width": shown.shape[1]}],
                   "annotations": [{"id": 1, "image_id": 1, "category_id": 1,
                                    "bbox": [x, y, w, h], "area": w * h, "iscrowd": 0}],
                   "categories": [{"id": 1, "name": "widget"}]}, f)
    (record,) = open_dataset(str(tmp_path)).split("train").records
    assert (record.height, record.width) == (48, 64)
    np.testing.assert_allclose(record.boxes[0], stored_box, atol=1e-3)


def test_roboflows_root_category_used_by_boxes_is_kept_and_said(tmp_path):
    dataset_layouts.write_roboflow(str(tmp_path))

    def root_box(data):
        data["annotations"][0]["category_id"] = 0
    rewrite_json(tmp_path / "train" / "_annotations.coco.json", root_box)
    dataset = open_dataset(str(tmp_path))
    assert "widgets-xyz" in dataset.classes.names.values()
    assert ("category 'widgets-xyz' is the others' supercategory (Roboflow's root category), "
            "yet 1 boxes use it: kept as a class") in dataset.describe()
    clean = str(tmp_path / "clean")
    dataset_layouts.write_roboflow(clean)
    assert "root category), yet" not in open_dataset(clean).describe()


def test_a_root_category_repeated_without_boxes_is_left_out_and_said(tmp_path):
    dataset_layouts.write_roboflow(str(tmp_path))

    def repeated_root(data):
        data["categories"].append({"id": 3, "name": "widgets-xyz", "supercategory": "none"})
    for split in ("train", "valid"):
        rewrite_json(tmp_path / split / "_annotations.coco.json", repeated_root)
    dataset = open_dataset(str(tmp_path))
    assert sorted(dataset.classes.names.values()) == ["gadget", "widget"]
    assert ("left out the root category 'widgets-xyz' (no boxes; the others' supercategory), "
            "and its repeats without boxes (ids 3)") in dataset.describe()


def test_a_class_no_box_uses_is_said(tmp_path):
    dataset_layouts.write_coco_folder(str(tmp_path))

    def unused_class(data):
        data["categories"].append({"id": 5, "name": "gizmo", "supercategory": "things"})
    for split in ("train", "val"):
        rewrite_json(tmp_path / "annotations" / ("instances_%s.json" % split), unused_class)
    text = open_dataset(str(tmp_path)).describe()
    assert "warning: 1 classes have no box in train or val: 'gizmo' (id 5)" in text


def test_an_image_file_no_coco_entry_lists_is_said(tmp_path):
    import shutil
    truth = dataset_layouts.write_coco_folder(str(tmp_path))
    shutil.copy(tmp_path / "train" / "img00.jpg", tmp_path / "train" / "unlabelled.JPG")
    dataset = open_dataset(str(tmp_path))
    assert len(dataset.split("train").records) == len(truth["train"])
    text = dataset.describe()
    assert ("1 image files in %s are read by no split, such as unlabelled.JPG"
            % (tmp_path / "train")) in text
    # VOC's JPEGImages holds other tasks' images besides the detection lists': not a mistake.
    voc = str(tmp_path / "voc")
    dataset_layouts.write_voc(voc)
    images = os.path.join(voc, "JPEGImages")
    shutil.copy(os.path.join(images, sorted(os.listdir(images))[0]),
                os.path.join(images, "segmentation_only.jpg"))
    assert "read by no split" not in open_dataset(voc).describe()


def _val_is_train(root):
    import yaml
    dataset_layouts.write_yolo(root)
    with open(os.path.join(root, "data.yaml")) as f:
        data = yaml.safe_load(f)
    data["val"] = "images/train"
    with open(os.path.join(root, "data.yaml"), "w") as f:
        yaml.safe_dump(data, f)


def _two_categories_one_name(root):
    dataset_layouts.write_coco_folder(root)
    for split in ("train", "val"):
        rewrite_json(os.path.join(root, "annotations", "instances_%s.json" % split),
                     lambda data: data["categories"][1].update(name="widget"))


def _boxes_on_roboflow_root(root):
    dataset_layouts.write_roboflow(root)
    rewrite_json(os.path.join(root, "train", "_annotations.coco.json"),
                 lambda data: data["annotations"][0].update(category_id=0))


def _root_with_children_under_none(root):
    dataset_layouts.write_roboflow(root)
    for split in ("train", "valid"):
        rewrite_json(os.path.join(root, split, "_annotations.coco.json"), lambda data: [
            category.update(supercategory="none") for category in data["categories"][1:]])


def _class_only_in_val(root):
    dataset_layouts.write_coco_folder(root)
    sprocket = {"id": 3, "name": "sprocket", "supercategory": "things"}
    rewrite_json(os.path.join(root, "annotations", "instances_train.json"),
                 lambda data: data["categories"].append(sprocket))
    rewrite_json(os.path.join(root, "annotations", "instances_val.json"), lambda data: (
        data["categories"].append(sprocket), data["annotations"][0].update(category_id=3)))


def _names_from_aliases(root):
    dataset_layouts.write_yolo(root)
    with open(os.path.join(root, "data.yaml")) as f:
        text = f.read()
    with open(os.path.join(root, "data.yaml"), "w") as f:
        f.write("pair: &pair [widget, gadget]\n" + text.replace("- gadget", "- *pair"))


@pytest.mark.parametrize("defect, line", [
    (_val_is_train, "warning: the val split is the train split (the same 8 images)"),
    (_two_categories_one_name, "warning: class name 'widget' is given to ids 1, 2"),
    (_boxes_on_roboflow_root, "category 'widgets-xyz' is the others' supercategory (Roboflow's "
                              "root category), yet 1 boxes use it: kept as a class"),
    (_root_with_children_under_none, "category 'widgets-xyz' (id 0, supercategory \"none\", no "
                                     "boxes) looks like Roboflow's root category"),
    (_class_only_in_val, "warning: class 'sprocket' has boxes in val but none in train"),
    (_names_from_aliases, "class 1's name ['widget', 'gadget'] is a YAML list, not text"),
])
def test_describe_names_each_defect_a_python_user_would_miss(tmp_path, defect, line):
    """What open_dataset(...).describe() says, so a Python user sees what the tools print."""
    defect(str(tmp_path))
    assert line in open_dataset(str(tmp_path)).describe()
