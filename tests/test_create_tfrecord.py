import json
import os
import re
import subprocess

import numpy as np
import pytest
import tensorflow as tf
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from helpers import REPO_ROOT, python
from efficientdet_keras.data.tfrecord_writer import write_tfrecords
from efficientdet_keras.data.formats.coco_records import load_coco_records
from efficientdet_keras.data.formats.tf_example import parse_tf_example
from test_voc import TINY_VOC, make_voc_tree

TOOL = os.path.join(REPO_ROOT, "tools", "create_tfrecord.py")


def run_tool(*args):
    return subprocess.run([python(), TOOL, *args], capture_output=True, text=True,
                          timeout=120)


def read_examples(path):
    return [parse_tf_example(serialized) for serialized in tf.data.TFRecordDataset(path)]


@pytest.mark.quick
def test_voc_to_two_shards_with_ground_truth_json(tmp_path):
    root = make_voc_tree(tmp_path / "VOC")
    prefix, gt_json = str(tmp_path / "out" / "train"), str(tmp_path / "out" / "gt.json")
    result = run_tool("--input_format=voc", "--voc_root=" + root, "--voc_split=train",
                      "--output_prefix=" + prefix, "--num_shards=2", "--output_json=" + gt_json)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Wrote 3 images (4 objects) to 2 shard(s)" in result.stdout
    assert "skipped 0 images" in result.stdout
    # Only the finished shards and the JSON: no temporary files are left behind.
    assert sorted(os.listdir(tmp_path / "out")) == [
        "gt.json", "train-00000-of-00002.tfrecord", "train-00001-of-00002.tfrecord"]

    shard0 = read_examples(prefix + "-00000-of-00002.tfrecord")
    shard1 = read_examples(prefix + "-00001-of-00002.tfrecord")
    assert (len(shard0), len(shard1)) == (2, 1)  # round-robin
    for example in shard0 + shard1:
        name = example["filename"].numpy().decode()[:-len(".jpg")]
        height, width, objects = TINY_VOC[name]
        image = tf.io.decode_jpeg(example["encoded"])
        assert image.shape == (height, width, 3)
        pixel_boxes = np.array([[ymin - 1, xmin - 1, ymax, xmax]
                                for _, xmin, ymin, xmax, ymax, _ in objects], np.float32)
        np.testing.assert_allclose(example["boxes"].numpy(),
                                   pixel_boxes / [height, width, height, width], rtol=1e-6)
        assert example["is_crowd"].numpy().tolist() == [bool(o[5]) for o in objects]
    assert sorted(e["source_id"].numpy().decode() for e in shard0 + shard1) == ["1", "2", "3"]

    coco = COCO(gt_json)
    assert len(coco.getImgIds()) == 3 and len(coco.getAnnIds()) == 4
    assert len(coco.getCatIds()) == 20 and coco.loadCats(15)[0]["name"] == "person"
    assert len(coco.getAnnIds(iscrowd=True)) == 1  # the difficult cat


def test_missing_jpeg_is_skipped_with_warning(tmp_path):
    root = make_voc_tree(tmp_path / "VOC")
    missing = os.path.join(root, "JPEGImages", "000001.jpg")
    os.remove(missing)
    prefix, gt_json = str(tmp_path / "out" / "val"), str(tmp_path / "out" / "gt.json")
    result = run_tool("--input_format=voc", "--voc_root=" + root, "--output_prefix=" + prefix,
                      "--output_json=" + gt_json)
    assert result.returncode == 0, result.stderr[-2000:]
    assert re.search(r"Data: unreadable image files in record source_id \d / 000001\.jpg: the "
                     r"image file is missing or unreadable", result.stderr)
    assert "Data report: unreadable_image_files=1" in result.stdout
    assert "Wrote 2 images (3 objects) to 1 shard(s)" in result.stdout
    assert "skipped 1 images" in result.stdout
    assert len(read_examples(prefix + "-00000-of-00001.tfrecord")) == 2
    with open(gt_json) as f:
        assert [image["file_name"] for image in json.load(f)["images"]] == [
            "000003.jpg", "000002.jpg"]


@pytest.mark.parametrize("args, message", [
    (["--input_format=voc", "--voc_root=/nonexistent/VOC2012", "--output_prefix=OUT"],
     "--voc_root /nonexistent/VOC2012 is not a directory"),
    (["--input_format=voc", "--output_prefix=OUT"], "--voc_root is required"),
    (["--input_format=coco", "--image_dir=.", "--output_prefix=OUT"], "--coco_json is required"),
])
def test_bad_flags_give_one_line_error(tmp_path, args, message):
    args = [a.replace("OUT", str(tmp_path / "out" / "x")) for a in args]
    result = run_tool(*args)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("efficientdet-create-tfrecord: " + message), lines
    assert not os.path.exists(tmp_path / "out" / "x-00000-of-00001.tfrecord")


def write_tiny_coco(tmp_path):
    """Two images (a JPEG and a PNG) and three boxes, one of them a crowd."""
    image_dir = tmp_path / "images"
    image_dir.mkdir()
    tf.io.write_file(str(image_dir / "a.jpg"), tf.io.encode_jpeg(tf.zeros([20, 30, 3], tf.uint8)))
    tf.io.write_file(str(image_dir / "b.png"), tf.io.encode_png(tf.zeros([10, 16, 3], tf.uint8)))
    data = {
        "images": [{"id": 7, "file_name": "a.jpg", "height": 20, "width": 30},
                   {"id": 9, "file_name": "b.png", "height": 10, "width": 16}],
        "annotations": [
            {"id": 1, "image_id": 7, "category_id": 3, "bbox": [3, 2, 12, 10], "iscrowd": 0},
            {"id": 2, "image_id": 7, "category_id": 1, "bbox": [0, 0, 30, 20], "iscrowd": 1},
            {"id": 3, "image_id": 9, "category_id": 1, "bbox": [4, 5, 8, 4], "iscrowd": 0}],
        "categories": [{"id": 1, "name": "person"}, {"id": 3, "name": "car"}],
    }
    json_path = tmp_path / "instances.json"
    json_path.write_text(json.dumps(data))
    return str(json_path), str(image_dir)


@pytest.mark.quick
def test_coco_records_through_write_tfrecords(tmp_path):
    json_path, image_dir = write_tiny_coco(tmp_path)
    records = load_coco_records(json_path, image_dir)
    prefix = str(tmp_path / "coco")
    stats = write_tfrecords(records, prefix, num_shards=1, label_map={1: "person", 3: "car"},
                            show_progress=False)
    assert (stats.images_written, stats.objects_written, stats.images_skipped) == (2, 3, 0)
    assert stats.shard_paths == [prefix + "-00000-of-00001.tfrecord"]

    raw = [tf.train.Example.FromString(s.numpy())
           for s in tf.data.TFRecordDataset(stats.shard_paths[0])]
    features = [r.features.feature for r in raw]
    assert [f["image/format"].bytes_list.value[0] for f in features] == [b"jpeg", b"png"]
    assert list(features[0]["image/object/class/text"].bytes_list.value) == [b"car", b"person"]

    first, second = read_examples(stats.shard_paths[0])
    assert first["source_id"].numpy() == b"7" and second["source_id"].numpy() == b"9"
    np.testing.assert_allclose(first["boxes"].numpy(), [[0.1, 0.1, 0.6, 0.5], [0, 0, 1, 1]],
                               rtol=1e-6)
    assert first["is_crowd"].numpy().tolist() == [False, True]
    assert tf.io.decode_png(second["encoded"]).shape == (10, 16, 3)
    np.testing.assert_allclose(second["boxes"].numpy(), [[0.5, 0.25, 0.9, 0.75]], rtol=1e-6)


def test_unreadable_images_are_skipped_and_all_missing_leaves_nothing(tmp_path):
    json_path, image_dir = write_tiny_coco(tmp_path)
    records = load_coco_records(json_path, image_dir)
    with open(records[1].path, "wb") as f:
        f.write(b"not an image")
    out = tmp_path / "out"
    out.mkdir()
    stats = write_tfrecords(records, str(out / "part"), num_shards=3, show_progress=False)
    assert stats.skipped_paths == [records[1].path]
    assert [r.image_id for r in stats.written_records] == [7]
    assert [len(read_examples(p)) for p in stats.shard_paths] == [1, 0, 0]

    os.remove(records[0].path)
    os.remove(records[1].path)
    with pytest.raises(ValueError, match="none of the 2 images could be read"):
        write_tfrecords(records, str(out / "gone"), num_shards=2, show_progress=False)
    assert sorted(os.listdir(out)) == ["part-%05d-of-00003.tfrecord" % i for i in range(3)]


def test_coco_segmentation_and_iscrowd_reach_ground_truth_json(tmp_path):
    json_path, image_dir = write_tiny_coco(tmp_path)
    with open(json_path) as f:
        data = json.load(f)
    polygon = [[3, 2, 15, 2, 15, 12, 3, 12]]
    crowd_rle = {"size": [20, 30], "counts": [0, 600]}
    data["annotations"][0]["segmentation"] = polygon
    data["annotations"][1]["segmentation"] = crowd_rle  # The iscrowd one.
    # A box with no width is dropped on writing; the segmentations after it must stay theirs.
    data["annotations"].insert(2, {"id": 4, "image_id": 9, "category_id": 1, "bbox": [5, 5, 0, 4],
                                   "segmentation": [[5, 5, 5, 9, 6, 9]]})
    with open(json_path, "w") as f:
        json.dump(data, f)

    prefix, gt_json = str(tmp_path / "out" / "coco"), str(tmp_path / "out" / "gt.json")
    result = run_tool("--input_format=coco", "--coco_json=" + json_path,
                      "--image_dir=" + image_dir, "--output_prefix=" + prefix,
                      "--output_json=" + gt_json)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Wrote 2 images (3 objects)" in result.stdout
    with open(gt_json) as f:
        annotations = json.load(f)["annotations"]
    assert [a["bbox"] for a in annotations] == [[3, 2, 12, 10], [0, 0, 30, 20], [4, 5, 8, 4]]
    assert [a["segmentation"] for a in annotations] == [polygon, crowd_rle, []]
    assert [a["iscrowd"] for a in annotations] == [0, 1, 0]
    assert not any("ignore" in a for a in annotations)  # Only VOC sources have difficult.
    # The VOC-only features are not written for COCO input.
    (serialized,) = tf.data.TFRecordDataset(prefix + "-00000-of-00001.tfrecord").take(1)
    features = tf.train.Example.FromString(serialized.numpy()).features.feature
    assert "image/object/difficult" not in features and "image/object/view" not in features

    # Bounding-box evaluation works on the written file: exact detections of the two
    # non-crowd boxes score AP 1.
    groundtruth = COCO(gt_json)
    detections = groundtruth.loadRes([
        {"image_id": 7, "category_id": 3, "bbox": [3, 2, 12, 10], "score": 0.9},
        {"image_id": 9, "category_id": 1, "bbox": [4, 5, 8, 4], "score": 0.8}])
    evaluator = COCOeval(groundtruth, detections, "bbox")
    evaluator.evaluate()
    evaluator.accumulate()
    evaluator.summarize()
    assert evaluator.stats[0] == pytest.approx(1.0)
