import json
import os

import numpy as np
import pytest
import tensorflow as tf

from efficientdet_keras.data.formats.voc import VOC_LABEL_MAP, load_voc_records

pytestmark = pytest.mark.quick  # All of this file is in the inner-loop set.

# id -> (height, width, [(name, xmin, ymin, xmax, ymax, difficult)]), in VOC's 1-based pixels;
# an object may add a dict of further tags ({"truncated": 1, "pose": "Left"}).
# The split file lists them in this (unsorted) order.
TINY_VOC = {
    "000003": (16, 20, [("car", 2, 3, 10, 12, 0)]),
    "000001": (30, 40, [("dog", 5, 3, 20, 15, 0)]),
    "000002": (24, 32, [("person", 1, 1, 32, 24, 0), ("cat", 10, 8, 20, 16, 1)]),
}


def write_annotation(path, height, width, objects):
    parts = ["<annotation><size><width>%d</width><height>%d</height><depth>3</depth></size>"
             % (width, height)]
    for name, xmin, ymin, xmax, ymax, difficult, *tags in objects:
        extra = "".join("<%s>%s</%s>" % (tag, value, tag) for tag, value in
                        (tags[0] if tags else {}).items())
        parts.append("<object><name>%s</name><difficult>%d</difficult>%s<bndbox><xmin>%d</xmin>"
                     "<ymin>%d</ymin><xmax>%d</xmax><ymax>%d</ymax></bndbox></object>"
                     % (name, difficult, extra, xmin, ymin, xmax, ymax))
    parts.append("</annotation>")
    with open(path, "w") as f:
        f.write("".join(parts))


def make_voc_tree(root, images=TINY_VOC, split="train"):
    """A minimal VOC year folder: solid-colour JPEGs of the annotated sizes."""
    for sub in ("Annotations", "JPEGImages", os.path.join("ImageSets", "Main")):
        os.makedirs(os.path.join(root, sub), exist_ok=True)
    for index, (name, (height, width, objects)) in enumerate(images.items()):
        pixels = tf.fill([height, width, 3], tf.constant(40 * index, tf.uint8))
        tf.io.write_file(os.path.join(root, "JPEGImages", name + ".jpg"), tf.io.encode_jpeg(pixels))
        write_annotation(os.path.join(root, "Annotations", name + ".xml"), height, width, objects)
    with open(os.path.join(root, "ImageSets", "Main", split + ".txt"), "w") as f:
        f.write("\n".join(images) + "\n")
    return str(root)


def test_records_follow_split_order_with_shifted_boxes(tmp_path):
    root = make_voc_tree(tmp_path)
    records = load_voc_records(root, "train")
    assert [r.image_id for r in records] == [1, 2, 3]
    assert [r.filename for r in records] == ["000003.jpg", "000001.jpg", "000002.jpg"]
    assert records[1].path == os.path.join(root, "JPEGImages", "000001.jpg")
    assert [(r.height, r.width) for r in records] == [(16, 20), (30, 40), (24, 32)]

    two = records[2]
    assert two.boxes.dtype == np.float32 and two.boxes.shape == (2, 4)
    # [ymin - 1, xmin - 1, ymax, xmax]: the person covering the 32x24 image is [0, 0, 24, 32].
    np.testing.assert_array_equal(two.boxes, [[0, 0, 24, 32], [7, 9, 16, 20]])
    assert two.classes.tolist() == [15, 8]  # person, cat
    assert two.is_crowd.tolist() == [False, True]  # the cat is difficult
    np.testing.assert_allclose(two.area, [24 * 32, 9 * 11])
    np.testing.assert_array_equal(records[1].boxes, [[2, 4, 15, 20]])
    assert records[1].classes.tolist() == [12] and records[0].classes.tolist() == [7]


def test_start_id_and_custom_label_map(tmp_path):
    root = make_voc_tree(tmp_path)
    label_map = {1: "person", 2: "cat", 3: "dog", 4: "car"}
    records = load_voc_records(root, "train", label_map=label_map, start_id=100)
    assert [r.image_id for r in records] == [100, 101, 102]
    assert [r.classes.tolist() for r in records] == [[4], [3], [1, 2]]


def test_image_without_objects_has_empty_arrays(tmp_path):
    root = make_voc_tree(tmp_path, {"empty": (8, 8, [])})
    (record,) = load_voc_records(root)
    assert record.boxes.shape == (0, 4) and record.classes.shape == (0,)
    assert (record.height, record.width) == (8, 8)


def test_unknown_class_names_file_and_name(tmp_path):
    root = make_voc_tree(tmp_path, {"a": (8, 8, [("unicorn", 1, 1, 4, 4, 0)])})
    with pytest.raises(ValueError) as info:
        load_voc_records(root)
    message = str(info.value)
    assert os.path.join(root, "Annotations", "a.xml") in message
    assert "'unicorn'" in message and "tvmonitor" in message


def test_missing_split_and_annotation_files_are_named(tmp_path):
    root = make_voc_tree(tmp_path)
    with pytest.raises(FileNotFoundError, match="ImageSets/Main/val.txt"):
        load_voc_records(root, "val")
    os.remove(os.path.join(root, "Annotations", "000001.xml"))
    with pytest.raises(FileNotFoundError, match="Annotations/000001.xml"):
        load_voc_records(root)


@pytest.mark.parametrize("content, reason", [
    ("<annotation><size><width>8</width>", "not a valid VOC annotation"),
    ("<annotation><object><name>cat</name></object></annotation>", "missing <size/height>"),
])
def test_malformed_xml_names_file(tmp_path, content, reason):
    root = make_voc_tree(tmp_path, {"bad": (8, 8, [])})
    xml_path = os.path.join(root, "Annotations", "bad.xml")
    with open(xml_path, "w") as f:
        f.write(content)
    with pytest.raises(ValueError) as info:
        load_voc_records(root)
    assert xml_path in str(info.value) and reason in str(info.value)


def test_voc_label_map_has_twenty_classes():
    assert sorted(VOC_LABEL_MAP) == list(range(1, 21))
    assert VOC_LABEL_MAP[15] == "person" and VOC_LABEL_MAP[20] == "tvmonitor"


def test_difficult_truncated_and_pose_reach_tfrecords_and_ground_truth(tmp_path):
    # The inverted dog box is dropped on writing: the fields of the others must stay theirs.
    root = make_voc_tree(tmp_path / "VOC", {"000007": (24, 32, [
        ("person", 1, 1, 32, 24, 1, {"truncated": 1, "pose": "Frontal"}),
        ("dog", 9, 3, 4, 9, 0, {"truncated": 1, "pose": "Rear"}),
        ("cat", 10, 8, 20, 16, 0, {"pose": "Left"}),
        ("car", 2, 2, 6, 6, 0),  # No <truncated> or <pose>: 0 and "Unspecified".
        ("bird", 3, 3, 7, 7, 0, {"pose": ""})])})  # An empty <pose> stays empty.
    (record,) = load_voc_records(root)
    assert record.difficult.tolist() == [1, 0, 0, 0, 0]
    assert record.truncated.tolist() == [1, 1, 0, 0, 0]
    assert record.view.tolist() == ["Frontal", "Rear", "Left", "Unspecified", ""]

    # Lazy: test_create_tfrecord imports this module.
    from test_create_tfrecord import run_tool
    prefix, gt_json = str(tmp_path / "out" / "train"), str(tmp_path / "out" / "gt.json")
    result = run_tool("--input_format=voc", "--voc_root=" + root, "--output_prefix=" + prefix,
                      "--output_json=" + gt_json)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Wrote 1 images (4 objects)" in result.stdout

    (serialized,) = tf.data.TFRecordDataset(prefix + "-00000-of-00001.tfrecord")
    parsed = tf.io.parse_single_example(serialized, {
        "image/object/difficult": tf.io.VarLenFeature(tf.int64),
        "image/object/truncated": tf.io.VarLenFeature(tf.int64),
        "image/object/view": tf.io.VarLenFeature(tf.string),
        "image/object/is_crowd": tf.io.VarLenFeature(tf.int64)})
    values = {key: tf.sparse.to_dense(value).numpy().tolist() for key, value in parsed.items()}
    assert values == {"image/object/difficult": [1, 0, 0, 0],
                      "image/object/truncated": [1, 0, 0, 0],
                      "image/object/view": [b"Frontal", b"Left", b"Unspecified", b""],
                      "image/object/is_crowd": [1, 0, 0, 0]}

    with open(gt_json) as f:
        annotations = json.load(f)["annotations"]
    assert [a["category_id"] for a in annotations] == [15, 8, 7, 3]  # person, cat, car, bird
    assert [a["ignore"] for a in annotations] == [1, 0, 0, 0]
    assert [a["iscrowd"] for a in annotations] == [1, 0, 0, 0]
    assert [a["segmentation"] for a in annotations] == [[], [], [], []]
