import collections
import logging
import os

import numpy as np
import pytest
from PIL import Image, ImageOps

from efficientdet_keras.data.formats.yolo import (label_path_for, load_yolo_records,
                                                  orphan_label_files)
from efficientdet_keras.data.formats.yolo_yaml import YoloDataset, read_yolo_yaml

pytestmark = pytest.mark.quick  # All of this file is in the inner-loop set.

HEIGHT, WIDTH = 30, 40
WRONG_FIELDS = "label line with the wrong number of fields"
NOT_A_NUMBER = "label line with a value that is not a number"
CLASS_RANGE = "class id out of range"
OUTSIDE = "coordinates outside the image"
EMPTY_BOX = "box of zero or negative size"
BAD_IMAGE = "image cannot be opened"
BAD_LABEL_FILE = "label file cannot be read"
ORPHAN = "label file without its image"


def write_image(path, width=WIDTH, height=HEIGHT, orientation=None, pixels=None):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    image = Image.fromarray(np.zeros([height, width, 3], np.uint8) if pixels is None else pixels)
    options = {}
    if orientation is not None:
        exif = Image.Exif()
        exif[0x0112] = orientation
        options["exif"] = exif
    image.save(path, **options)
    return str(path)


def write_labels(image_path, *lines):
    label = label_path_for(str(image_path))
    os.makedirs(os.path.dirname(label), exist_ok=True)
    with open(label, "w") as f:
        f.write("\n".join(lines) + "\n")
    return label


def load(image_paths, caplog, num_classes=3, **kwargs):
    skipped = collections.Counter()
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        records = load_yolo_records([str(p) for p in image_paths], num_classes, skipped, **kwargs)
    return records, skipped, caplog.text


def write_yaml(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return str(path)


# --- labels -------------------------------------------------------------------------------

def test_box_lines_become_pixel_boxes_with_classes_one_up(tmp_path, caplog):
    image = write_image(tmp_path / "images" / "train" / "a.png")
    write_labels(image, "1 0.5 0.5 0.5 0.4", "0 0.125 0.2 0.25 0.4")
    (record,), skipped, text = load([image], caplog)
    assert (record.image_id, record.path, record.height, record.width) == (1, image, 30, 40)
    assert record.boxes.dtype == np.float32 and record.classes.dtype == np.int64
    # x 0.25..0.75 of 40, y 0.3..0.7 of 30; then x 0..0.25 of 40, y 0..0.4 of 30.
    np.testing.assert_allclose(record.boxes, [[9, 10, 21, 30], [0, 0, 12, 10]], atol=1e-5)
    assert record.classes.tolist() == [2, 1]
    assert record.is_crowd.tolist() == [False, False]
    np.testing.assert_allclose(record.area, [12 * 20, 12 * 10], rtol=1e-5)
    assert not skipped and text == ""


def test_a_polygon_line_becomes_its_enclosing_box(tmp_path, caplog):
    image = write_image(tmp_path / "images" / "a.png")
    write_labels(image, "2 0.1 0.2 0.5 0.1 0.3 0.6",  # A triangle.
                 "0 0.25 0.5 0.75 0.5 0.75 1.0 0.25 1.0")  # An oriented box's 4 corners.
    (record,), skipped, _ = load([image], caplog)
    # x 0.1..0.5 of 40, y 0.1..0.6 of 30; then x 0.25..0.75, y 0.5..1.
    np.testing.assert_allclose(record.boxes, [[3, 4, 18, 20], [15, 10, 30, 30]], atol=1e-5)
    assert record.classes.tolist() == [3, 1] and not skipped


def test_images_without_labels_or_with_empty_ones_are_background(tmp_path, caplog):
    folder = tmp_path / "images" / "train"
    labelled, unlabelled, empty = (write_image(folder / name) for name in ("a.png", "b.png",
                                                                            "c.png"))
    write_labels(labelled, "0 0.5 0.5 0.5 0.5")
    with open(label_path_for(empty), "w"):
        pass
    records, skipped, text = load([labelled, unlabelled, empty], caplog, start_id=10)
    assert [r.image_id for r in records] == [10, 11, 12]
    for record in records[1:]:
        assert record.boxes.shape == (0, 4) and record.classes.shape == (0,)
        assert record.area.shape == (0,) and (record.height, record.width) == (30, 40)
    assert not skipped and text == ""


def test_no_label_file_at_all_is_one_warning(tmp_path, caplog):
    images = [write_image(tmp_path / "images" / name) for name in ("a.png", "b.png")]
    records, skipped, text = load(images, caplog)
    assert len(records) == 2 and not skipped
    assert ("None of the 2 images has a label file (looked for %s, ...)"
            % (tmp_path / "labels" / "a.txt")) in text


def test_bad_lines_are_skipped_by_kind_and_the_good_ones_kept(tmp_path, caplog):
    image = write_image(tmp_path / "images" / "a.png")
    label = write_labels(
        image,
        "0 0.5 0.5 0.5 0.4",  # 1: good
        "0 0.5 0.5 0.2",  # 2: four fields
        "0 0.5 0.5 0.2 0.2 0.1",  # 3: six fields, not a polygon
        "0 0.5 x 0.2 0.2",  # 4
        "3 0.5 0.5 0.2 0.2",  # 5: the classes are 0..2
        "-1 0.5 0.5 0.2 0.2",  # 6
        "1.5 0.5 0.5 0.2 0.2",  # 7
        "1 0.5 0.5 0.2 0.0",  # 8: zero height
        "1 0.5 0.5 -0.2 0.2",  # 9: negative width
        "1 0.9 0.5 0.3 0.2",  # 10: right edge at 1.05
        "1 20 15 10 6",  # 11: pixels, not fractions
        "",  # 12: blank lines are no entry
        "2 0.5 0.5 0.2 nan",  # 13
        "2 0.25 0.5 0.5 0.2")  # 14: good
    (record,), skipped, text = load([image], caplog)
    np.testing.assert_allclose(record.boxes, [[9, 10, 21, 30], [12, 0, 18, 20]], atol=1e-5)
    assert record.classes.tolist() == [1, 3]
    assert skipped == {WRONG_FIELDS: 2, NOT_A_NUMBER: 2, CLASS_RANGE: 3, EMPTY_BOX: 2, OUTSIDE: 2}
    for number, kind in [(2, WRONG_FIELDS), (3, WRONG_FIELDS), (4, NOT_A_NUMBER),
                         (5, CLASS_RANGE), (6, CLASS_RANGE), (7, CLASS_RANGE), (8, EMPTY_BOX),
                         (9, EMPTY_BOX), (10, OUTSIDE), (11, OUTSIDE), (13, NOT_A_NUMBER)]:
        assert "%s:%d: %s: skipping" % (label, number, kind) in text
    assert "%s:1:" % label not in text and "%s:14:" % label not in text
    assert "%s:5: %s: skipping '3 0.5 0.5 0.2 0.2' (class 3; the dataset's class ids are 0..2)" \
        % (label, CLASS_RANGE) in text
    assert ("YOLO labels: skipped 2 x %s, 3 x %s, 2 x %s, 2 x %s, 2 x %s (of 1 images, 14 label "
            "lines)" % (EMPTY_BOX, CLASS_RANGE, OUTSIDE, NOT_A_NUMBER, WRONG_FIELDS)) in text


def test_coordinates_within_the_tolerance_are_clipped(tmp_path, caplog):
    image = write_image(tmp_path / "images" / "a.png")
    label = write_labels(
        image,
        "0 0.495 0.5 1.0 0.4",  # x -0.005..0.995: clipped at 0.
        "1 0.5 0.1 0.6 0.2 0.9 1.008",  # A polygon reaching y 1.008: clipped at 1.
        "2 0.489 0.5 1.0 0.4")  # x from -0.011: beyond the 0.01 tolerance.
    (record,), skipped, text = load([image], caplog)
    np.testing.assert_allclose(record.boxes, [[9, 0, 21, 39.8], [3, 20, 30, 36]], atol=1e-4)
    assert record.classes.tolist() == [1, 2]
    assert skipped == {OUTSIDE: 1}
    assert "%s:3: %s: skipping '2 0.489 0.5 1.0 0.4' (the box reaches x -0.011..0.989" \
        % (label, OUTSIDE) in text


def test_images_that_cannot_be_opened_are_skipped(tmp_path, caplog):
    folder = tmp_path / "images"
    good = write_image(folder / "a.png")
    broken = str(folder / "b.jpg")
    with open(broken, "wb") as f:
        f.write(b"not an image")
    missing = str(folder / "c.jpg")
    for image in (good, broken, missing):
        write_labels(image, "0 0.5 0.5 0.5 0.5")
    records, skipped, text = load([broken, good, missing], caplog)
    assert [(r.image_id, r.path) for r in records] == [(2, good)]
    assert skipped == {BAD_IMAGE: 2}  # The labels of listed images are not orphans.
    assert "%s: %s: skipping it (cannot identify image file" % (broken, BAD_IMAGE) in text
    assert "%s: %s: skipping it (" % (missing, BAD_IMAGE) in text


def test_a_label_file_that_cannot_be_read_skips_its_image(tmp_path, caplog):
    images = [write_image(tmp_path / "images" / name) for name in ("a.png", "b.png")]
    write_labels(images[0], "0 0.5 0.5 0.5 0.5")
    with open(label_path_for(images[1]), "wb") as f:
        f.write(b"0 0.5 \xff\xfe 0.5\n")
    records, skipped, text = load(images, caplog)
    assert [r.path for r in records] == [images[0]]
    assert skipped == {BAD_LABEL_FILE: 1}
    assert "%s: %s: skipping it and its image %s" % (label_path_for(images[1]), BAD_LABEL_FILE,
                                                      images[1]) in text


def test_label_files_without_their_image_are_named(tmp_path, caplog):
    folder = tmp_path / "images" / "train"
    images = [write_image(folder / "a.png"), write_image(folder / "sub" / "b.JPG")]
    for image in images:
        write_labels(image, "0 0.5 0.5 0.5 0.5")
    labels = tmp_path / "labels" / "train"
    for name in ("ghost.txt", os.path.join("sub", "gone.txt"), "classes.txt"):
        (labels / name).write_text("0 0.5 0.5 0.5 0.5\n")
    (labels / "notes.md").write_text("not a label file\n")
    # An image outside the list but on disk keeps its label file from being an orphan.
    write_labels(write_image(folder / "c.webp"), "0 0.5 0.5 0.5 0.5")
    orphans = [str(labels / "ghost.txt"), str(labels / "sub" / "gone.txt")]
    assert orphan_label_files(images) == orphans
    records, skipped, text = load(images, caplog)
    assert len(records) == 2 and all(len(r.classes) == 1 for r in records)
    assert skipped == {ORPHAN: 2}
    assert "%s: %s: skipping it: no image ghost.* in %s" % (orphans[0], ORPHAN, folder) in text
    assert "%s: %s" % (orphans[1], ORPHAN) in text


def test_labels_beside_the_images_are_read_but_not_checked_for_orphans(tmp_path, caplog):
    image = write_image(tmp_path / "photos" / "a.png")
    write_labels(image, "0 0.5 0.5 0.5 0.5")
    (tmp_path / "photos" / "train.txt").write_text("photos/a.png\n")
    (record,), skipped, _ = load([image], caplog)
    assert len(record.classes) == 1 and not skipped
    assert orphan_label_files([image]) == []


@pytest.mark.parametrize("extension", [".png", ".jpg"])
def test_boxes_of_an_exif_rotated_image_map_onto_its_stored_pixels(tmp_path, caplog, extension):
    # Stored 40 x 30 with a white box at x 20..34, y 5..12; orientation 6 shows it turned a
    # quarter clockwise, 30 wide and 40 tall, where the box is at x 18..25, y 20..34.
    pixels = np.zeros([HEIGHT, WIDTH, 3], np.uint8)
    pixels[5:12, 20:34] = 255
    image = write_image(tmp_path / "images" / ("a" + extension), orientation=6, pixels=pixels)
    with Image.open(image) as opened:
        shown = np.asarray(ImageOps.exif_transpose(opened))[..., 0] > 128
    rows, columns = np.nonzero(shown)
    assert shown.shape == (40, 30)
    assert (columns.min(), columns.max() + 1, rows.min(), rows.max() + 1) == (18, 25, 20, 34)
    write_labels(image, "0 %r %r %r %r" % (21.5 / 30, 27 / 40, 7 / 30, 14 / 40))
    (record,), _, _ = load([image], caplog)
    assert (record.height, record.width) == (30, 40)
    np.testing.assert_allclose(record.boxes, [[5, 20, 12, 34]], atol=1e-4)


@pytest.mark.parametrize("orientation", range(1, 9))
def test_every_exif_orientation_maps_back_to_the_stored_box(tmp_path, caplog, orientation):
    """The label is drawn from the image as PIL shows it (exif_transpose), as labelling tools
    and Ultralytics see it."""
    pixels = np.zeros([HEIGHT, WIDTH, 3], np.uint8)
    pixels[5:12, 20:34] = 255
    image = write_image(tmp_path / "images" / "a.png", orientation=orientation, pixels=pixels)
    with Image.open(image) as opened:
        shown = np.asarray(ImageOps.exif_transpose(opened))[..., 0] > 128
    rows, columns = np.nonzero(shown)
    height, width = shown.shape
    x1, x2 = columns.min() / width, (columns.max() + 1) / width
    y1, y2 = rows.min() / height, (rows.max() + 1) / height
    write_labels(image, "0 %.9f %.9f %.9f %.9f" % ((x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1))
    (record,), _, _ = load([image], caplog)
    np.testing.assert_allclose(record.boxes, [[5, 20, 12, 34]], atol=1e-4)


# --- label_path_for -------------------------------------------------------------------------

@pytest.mark.parametrize("image, label", [
    ("/d/images/train/a.jpg", "/d/labels/train/a.txt"),
    ("/images/x/images/sub/a.b.PNG", "/images/x/labels/sub/a.b.txt"),  # The last one only.
    ("data/images/a.jpeg", "data/labels/a.txt"),
    ("/d/photos/a.jpg", "/d/photos/a.txt"),  # No images folder: beside the image.
    ("/d/myimages/images.jpg", "/d/myimages/images.txt"),  # Only a whole folder name counts.
])
def test_label_path_replaces_the_last_images_folder(image, label):
    assert label_path_for(image) == label


# --- data.yaml ------------------------------------------------------------------------------

def make_dataset(root):
    """images/train (with a subfolder and files that are not images), images/extra,
    images/val, and their labels."""
    train = root / "images" / "train"
    paths = [write_image(train / "b.png"), write_image(train / "a.jpg"),
             write_image(train / "sub" / "c.JPEG"),
             write_image(root / "images" / "extra" / "d.bmp"),
             write_image(root / "images" / "val" / "e.png")]
    (train / "notes.txt").write_text("not an image\n")
    Image.new("RGB", (4, 4)).save(train / "f.gif")
    for path in paths:
        write_labels(path, "1 0.5 0.5 0.5 0.4")
    return {name: str(path) for name, path in zip("bacde", paths)}


def test_yaml_with_folders_names_list_and_a_relative_root(tmp_path, caplog):
    images = make_dataset(tmp_path / "ds")
    yaml_path = write_yaml(tmp_path / "config" / "data.yaml",
                           "path: ../ds\ntrain: images/train\nval: images/val\ntest:\n"
                           "nc: 2\nnames: [cat, dog]\n")
    dataset = read_yolo_yaml(yaml_path)
    assert isinstance(dataset, YoloDataset)
    assert dataset.yaml_path == yaml_path and dataset.root == str(tmp_path / "ds")
    assert dataset.names == ["cat", "dog"]
    assert dataset.splits == {"train": [images["a"], images["b"], images["c"]],
                              "val": [images["e"]]}  # An empty test is no split.
    records, skipped, _ = load(dataset.splits["train"], caplog, num_classes=2)
    assert [r.classes.tolist() for r in records] == [[2]] * 3 and not skipped


def test_yaml_without_path_is_rooted_at_its_folder_and_names_may_be_a_dict(tmp_path):
    images = make_dataset(tmp_path)
    yaml_path = write_yaml(tmp_path / "data.yaml", "train: images/train\nval: images/val\n"
                           "names:\n  0: cat\n  1: dog\n  2: bird\n")
    dataset = read_yolo_yaml(yaml_path)
    assert dataset.root == str(tmp_path) and dataset.names == ["cat", "dog", "bird"]
    assert dataset.splits["val"] == [images["e"]]


def test_a_split_may_be_a_txt_list_or_a_list_of_folders(tmp_path):
    images = make_dataset(tmp_path)
    (tmp_path / "train.txt").write_text("./images/train/b.png\n\nimages/extra/d.bmp\n")
    yaml_path = write_yaml(tmp_path / "data.yaml",
                           "path: .\ntrain: train.txt\nval: [images/val, images/extra]\n"
                           "names: [cat, dog]\n")
    dataset = read_yolo_yaml(yaml_path)
    assert dataset.splits == {"train": [images["b"], images["d"]],  # In the list's order.
                              "val": [images["e"], images["d"]]}


def test_roboflow_paths_above_the_yaml_fall_back_to_its_folder(tmp_path, caplog):
    image = write_image(tmp_path / "valid" / "images" / "a.jpg")
    write_labels(image, "0 0.5 0.5 0.5 0.5")
    assert label_path_for(image) == str(tmp_path / "valid" / "labels" / "a.txt")
    write_image(tmp_path / "train" / "images" / "b.jpg")
    yaml_path = write_yaml(tmp_path / "data.yaml", "train: ../train/images\n"
                           "val: ../valid/images\nnc: 1\nnames: ['widget']\n")
    dataset = read_yolo_yaml(yaml_path)
    assert dataset.splits["val"] == [image]
    (record,), _, _ = load(dataset.splits["val"], caplog, num_classes=1)
    assert record.classes.tolist() == [1]


def test_names_keyed_by_other_ids_number_the_classes_in_their_order(tmp_path, caplog):
    """labelformat's data.yaml: names keyed by the COCO ids (1, 3), which the labels use; and
    only a val split, an evaluation set."""
    image = write_image(tmp_path / "images" / "a.jpg")
    write_labels(image, "3 0.5 0.5 0.5 0.4", "1 0.25 0.25 0.25 0.25", "0 0.5 0.5 0.1 0.1")
    dataset = read_yolo_yaml(write_yaml(tmp_path / "data.yaml",
                                        "path: .\nval: images\nnames: {1: cat, 3: dog}\n"))
    assert list(dataset.splits) == ["val"] and dataset.names == ["cat", "dog"]
    assert dataset.class_ids == [1, 3]
    (record,), skipped, text = load(dataset.splits["val"], caplog, num_classes=2,
                                    class_ids=dataset.class_ids)
    assert record.classes.tolist() == [2, 1] and sum(skipped.values()) == 1
    assert "(class 0; the dataset's class ids are 1, 3)" in text


def test_a_class_name_that_is_a_yaml_list_is_said(tmp_path):
    """An anchor's alias where a name was meant gives a list: read as its text, and said."""
    make_dataset(tmp_path)
    dataset = read_yolo_yaml(write_yaml(tmp_path / "data.yaml", "train: images/train\n"
                                        "names: [&pets [cat, dog], bird, *pets]\n"))
    assert dataset.names == ["['cat', 'dog']", "bird", "['cat', 'dog']"]
    assert [n.split(": ", 1)[1][:44] for n in dataset.notes] == [
        "class 0's name ['cat', 'dog'] is a YAML list", "class 2's name ['cat', 'dog'] is a YAML list"]


@pytest.mark.parametrize("text, error, message", [
    ("train: images/train\nnc: 3\nnames: [cat, dog]\n", ValueError,
     "'nc' is 3 but 'names' has 2 classes"),
    ("train: images/train\n", ValueError, "'names' must be a list of class names"),
    ("train: images/train\nnames: {cat: 0, dog: 1}\n", ValueError,
     "'names' keys must be class ids, whole numbers from 0, not 'cat', 'dog'"),
    ("train: images/train\nnames: {-1: cat}\n", ValueError, "'names' keys must be class ids"),
    ("train: images/train\nval: images/missing\nnames: [cat]\n", FileNotFoundError,
     "'val': %s does not exist" % os.path.join("{root}", "images", "missing")),
    ("train: lists/train.txt\nnames: [cat]\n", FileNotFoundError,
     "'train': %s does not exist" % os.path.join("{root}", "lists", "train.txt")),
    ("path: elsewhere\ntrain: images/train\nnames: [cat]\n", FileNotFoundError,
     "'path': dataset folder %s does not exist" % os.path.join("{root}", "elsewhere")),
    ("train: images/empty\nnames: [cat]\n", ValueError,
     "'train': %s holds no images" % os.path.join("{root}", "images", "empty")),
    ("- train\n", ValueError, "expected a mapping"),
])
def test_yaml_errors_name_the_file_and_the_key(tmp_path, text, error, message):
    make_dataset(tmp_path)
    os.makedirs(tmp_path / "images" / "empty")
    yaml_path = write_yaml(tmp_path / "data.yaml", text)
    with pytest.raises(error) as raised:
        read_yolo_yaml(yaml_path)
    assert str(raised.value).startswith(yaml_path + ": ")
    assert message.format(root=tmp_path) in str(raised.value)


def test_a_missing_yaml_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="YOLO data.yaml not found: .*nowhere.yaml"):
        read_yolo_yaml(str(tmp_path / "nowhere.yaml"))


def test_a_missing_test_folder_leaves_the_test_split_out_with_a_warning(tmp_path, caplog):
    make_dataset(tmp_path)
    yaml_path = write_yaml(tmp_path / "data.yaml", "train: images/train\nval: images/train\n"
                           "test: ../test/images\nnames: [cat, dog]\n")
    with caplog.at_level("WARNING"):
        dataset = read_yolo_yaml(yaml_path)
    assert sorted(dataset.splits) == ["train", "val"]
    assert "reading the dataset without its test split" in caplog.text
    assert "'test'" in caplog.text
