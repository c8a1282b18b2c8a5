"""The data check: statistics, the anchor fit and its suggestion, the
efficientdet-check-data tool, and the progress bars of otherwise silent work."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from helpers import REPO_ROOT, python, tiny_config
from efficientdet_keras.detection.anchor_fit import (ENOUGH_MATCHED_UNMATCHED, AnchorSettings,
                                          best_anchor_iou, recommend_anchors, suggest_anchors,
                                          unmatched_share)
from efficientdet_keras.detection.anchors import Anchors, pairwise_iou
from efficientdet_keras.data.check import (count_records, format_report, plot_box_sizes,
                                           scan_dataset, summarize)
from efficientdet_keras.data.sources import CocoSource, RecordsSource, TFRecordSource
from efficientdet_keras.data.formats.coco_json import records_to_coco
from efficientdet_keras.data.formats.records import ImageRecord
from efficientdet_keras.data.formats.tf_example import record_to_tf_example

from test_voc import make_voc_tree


def anchor_settings(**overrides) -> AnchorSettings:
    """D0's anchors (levels 3-7, 3 scales, ratios 1, 2, 0.5, anchor_scale 4) at 128 px."""
    return AnchorSettings.from_config(tiny_config(**overrides))


@pytest.mark.quick
def test_best_anchor_iou_equals_the_iou_with_every_anchor():
    """The nearest-centre shortcut gives the same best IoU as comparing with all anchors."""
    config = tiny_config(image_size=(96, 160))  # Unequal strides and rounded-up levels.
    rng = np.random.default_rng(0)
    corners = rng.uniform(-10, 170, (400, 2))
    sizes = np.exp(rng.uniform(np.log(2), np.log(200), (400, 2)))
    boxes = np.concatenate([corners, corners + sizes], axis=1).astype(np.float32)
    every_anchor = pairwise_iou(Anchors(config).boxes, boxes).numpy().max(axis=0)
    np.testing.assert_allclose(best_anchor_iou(boxes, AnchorSettings.from_config(config)),
                               every_anchor, atol=1e-5)


@pytest.mark.quick
def test_unmatched_share_is_the_hand_counted_fraction():
    settings = anchor_settings()
    anchors = Anchors(tiny_config()).boxes
    exact = anchors[[0, 7, 500, len(anchors) - 1]]  # Boxes equal to anchors: IoU 1.
    # 6x6 px boxes: the smallest anchor is 4 x stride 8 = 32 px, IoU at most 36/1024.
    small = np.array([[10, 10, 16, 16], [60, 30, 66, 36], [100, 100, 106, 106]], np.float32)
    assert unmatched_share(exact, settings) == 0.0
    assert unmatched_share(small, settings) == 1.0
    assert unmatched_share(np.concatenate([exact, small]), settings) == pytest.approx(3 / 7)
    assert unmatched_share(np.zeros([0, 4]), settings) == 0.0


def write_jpeg(path, height, width, value=90):
    tf.io.write_file(path, tf.io.encode_jpeg(np.full([height, width, 3], value, np.uint8)))
    return path


def image_record(image_id, path, height, width, boxes, classes, crowd=None):
    boxes = np.array(boxes, np.float32).reshape(-1, 4)
    crowd = np.zeros(len(classes), bool) if crowd is None else np.array(crowd, bool)
    return ImageRecord(image_id, path, height, width, boxes, np.array(classes, np.int64), crowd,
                       np.zeros(len(classes), np.float32))


@pytest.fixture(scope="module")
def small_dataset(tmp_path_factory):
    """Four JPEGs (one 64x32, three 32x32) with hand-placed boxes, and one file that is not
    an image. At 128 px the 64x32 image scales by 2 and the square ones by 4."""
    folder = tmp_path_factory.mktemp("check-data")
    tall = write_jpeg(str(folder / "tall.jpg"), 64, 32)
    squares = [write_jpeg(str(folder / ("sq%d.jpg" % i)), 32, 32) for i in range(3)]
    broken = str(folder / "broken.jpg")
    with open(broken, "wb") as f:
        f.write(b"this is not a picture")
    records = [
        # 10x4 px -> 20x8 at the input (scale 2); 2x2 -> 4x4 (crowd).
        image_record(1, tall, 64, 32, [[4, 2, 14, 6], [0, 0, 2, 2]], [1, 2], crowd=[0, 1]),
        # 8x8 -> 32x32 (scale 4), twice; 4x2 -> 16x8; the last box sticks out: clipped to 8x4.
        image_record(2, squares[0], 32, 32, [[0, 0, 8, 8], [8, 8, 16, 16], [20, 20, 24, 22],
                                             [28, 28, 36, 32]], [1, 1, 3, 3]),
        image_record(3, squares[1], 32, 32, [], []),
        image_record(4, broken, 32, 32, [[0, 0, 8, 8]], [1]),
        image_record(5, squares[2], 32, 32, [[16, 0, 24, 16]], [2]),  # 8x16 -> 32x64.
    ]
    return folder, records


@pytest.mark.quick
def test_statistics_equal_the_hand_counted_ones(small_dataset):
    config = tiny_config()
    scan = scan_dataset(RecordsSource(small_dataset[1]), config, show_progress=False)
    summary = summarize(scan, config, label_map={1: "cat", 2: "dog"})
    assert summary["records"] == 5 and summary["images"] == 4
    assert [s["record"] for s in summary["skipped"]] == [
        "record source_id 4 / broken.jpg"]
    assert summary["skipped"][0]["reason"].startswith("undecodable_images: 21 bytes that are not")
    assert summary["repairs"] == {"boxes_clipped": 1}
    assert summary["boxes"] == 7 and summary["crowd_boxes"] == 1
    assert summary["boxes_per_image"] == {"mean": 7 / 4, "median": 1.5, "max": 4}
    assert summary["images_without_boxes"] == 1
    assert summary["classes"] == [{"id": 1, "name": "cat", "boxes": 3, "images": 2},
                                  {"id": 2, "name": "dog", "boxes": 2, "images": 2},
                                  {"id": 3, "name": "3", "boxes": 2, "images": 1}]
    np.testing.assert_allclose(scan.input_boxes, [
        [8, 4, 28, 12], [0, 0, 4, 4],
        [0, 0, 32, 32], [32, 32, 64, 64], [80, 80, 96, 88], [112, 112, 128, 128],
        [64, 0, 96, 64]], atol=1e-4)
    sizes = np.sqrt([20 * 8, 4 * 4, 32 * 32, 32 * 32, 16 * 8, 16 * 16, 32 * 64])
    assert summary["box_size_px"]["p50"] == pytest.approx(np.median(sizes), rel=1e-5)
    assert summary["box_size_px"]["p0"] == pytest.approx(4.0)
    assert summary["aspect_ratio"]["p100"] == pytest.approx(2.0)
    # Crowd boxes are ignore regions, not anchor matches: 6 boxes are matched.
    assert summary["anchors"]["matched_boxes"] == 6
    report = format_report(summary)
    assert "record source_id 4 / broken.jpg: undecodable_images" in report
    assert "cat" in report and "boxes_clipped=1" in report


def test_records_over_max_instances_are_counted_with_the_objects_they_lose(small_dataset):
    """At max_instances_per_image=2 only record 2 (four boxes) is over: two objects dropped."""
    config = tiny_config(max_instances_per_image=2)
    scan = scan_dataset(RecordsSource(small_dataset[1]), config, show_progress=False)
    summary = summarize(scan, config)
    assert summary["over_max_instances"] == {"records": 1, "objects_dropped": 2,
                                             "most_objects": 4, "max_instances": 2}
    assert summary["boxes"] == 5 and summary["boxes_per_image"]["max"] == 2
    assert ("Too many objects        1 record has more objects than max_instances_per_image=2 "
            "(up to 4): 2 objects dropped; raise max_instances_per_image to 4 to keep them all"
            ) in format_report(summary).splitlines()


def test_the_suggestion_leaves_fewer_small_boxes_unmatched():
    """6-12 px boxes at 128 px: anchor_scale 4 matches none of them; the suggested settings
    match some, give the share they report, and are an --hparams string that sets them."""
    rng = np.random.default_rng(1)
    corners = rng.uniform(0, 110, (200, 2))
    sides = rng.uniform(6, 12, (200, 2))
    boxes = np.concatenate([corners, corners + sides], axis=1)
    scan = _scan_of(boxes)
    config = tiny_config()
    anchors = summarize(scan, config)["anchors"]
    assert anchors["current"]["unmatched"] == 1.0
    suggestion = anchors["suggestion"]
    assert suggestion is not None and suggestion["unmatched"] < 0.8
    suggested = tiny_config().override(suggestion["hparams"])
    assert suggested.anchor_scale == suggestion["anchor_scale"] < 4
    assert unmatched_share(boxes, AnchorSettings.from_config(suggested)) == \
        pytest.approx(suggestion["unmatched"])


def test_the_recommendation_is_the_smallest_scale_change_that_matches_enough_boxes():
    """The glyphs' 512 training images at 128 px (1-5 square glyphs of 15-58 px):
    anchor_scale 4 leaves about a fifth of the boxes unmatched; the recommendation is 3
    (within 10%), not 2-2.5 (the fewest unmatched, every object a level coarser), and it keeps
    the aspect ratios. Boxes the anchors already match get no recommendation, and with none
    within 10% the fewest unmatched is taken."""
    from efficientdet_keras.data.synthetic import generate_examples
    from benchmarks.synthetic_glyphs import GLYPHS
    boxes = np.concatenate([record.boxes for record, _ in
                            generate_examples(512, 128, 128, style=GLYPHS)])
    current = anchor_settings()
    ranked = suggest_anchors(boxes, current)
    assert 0.15 < unmatched_share(boxes, current) < 0.3
    assert ranked[0].settings.anchor_scale <= 2.5
    recommended = recommend_anchors(ranked, current)
    assert recommended.settings.anchor_scale == 3.0
    assert recommended.settings.aspect_ratios == current.aspect_ratios
    assert recommended.unmatched <= ENOUGH_MATCHED_UNMATCHED
    # Hand check: a 15 px box and the 24 px anchors of level 3 at anchor_scale 3 overlap
    # (15 / 24)^2 = 0.39 < 0.5 at best, so the smallest boxes stay unmatched.
    assert best_anchor_iou(np.array([[32.0, 32.0, 47.0, 47.0]]), recommended.settings)[0] < 0.5

    large = np.array([[10.0, 10.0, 74.0, 74.0], [40.0, 40.0, 72.0, 72.0]])
    assert recommend_anchors(suggest_anchors(large, current), current) is None
    tiny = boxes[:, :2] + np.random.default_rng(3).uniform(6, 12, (len(boxes), 2))
    tiny_ranked = suggest_anchors(np.concatenate([boxes[:, :2], tiny], axis=1), current)
    assert recommend_anchors(tiny_ranked, current) is tiny_ranked[0]


def _scan_of(input_boxes):
    """A DatasetScan of one image holding `input_boxes` (input pixels), class 1."""
    from efficientdet_keras.data.check import DatasetScan
    count = len(input_boxes)
    return DatasetScan(records=1, boxes_per_image=np.array([count]),
                       classes=np.ones(count, np.int64),
                       is_crowd=np.zeros(count, bool),
                       input_boxes=np.asarray(input_boxes, np.float32), skipped=[], repairs={},
                       source_problems={})


@pytest.mark.quick
def test_coco_json_source_and_the_chart(small_dataset, tmp_path):
    folder, records = small_dataset
    coco = records_to_coco([r for r in records if r.image_id != 4], {1: "cat", 2: "dog", 3: "x"})
    coco["images"].append({"id": 9, "file_name": "gone.jpg", "height": 8, "width": 8})
    json_file = tmp_path / "data.json"
    json_file.write_text(json.dumps(coco))
    config = tiny_config()
    scan = scan_dataset(CocoSource(str(json_file), str(folder)), config, show_progress=False)
    summary = summarize(scan, config)
    assert summary["images"] == 4 and summary["boxes"] == 7
    assert summary["source_problems"] == {"image file missing": 1}
    assert "image file missing=1" in format_report(summary)
    path = plot_box_sizes(scan, config, str(tmp_path / "sizes.png"))
    from PIL import Image
    with Image.open(path) as image:
        assert image.format == "PNG" and image.size[0] > image.size[1] > 100


def test_the_chart_is_skipped_with_one_note_without_matplotlib(monkeypatch, tmp_path):
    from absl import logging
    notes = []
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # Its import now fails.
    monkeypatch.setattr(logging, "warning", lambda message, *args: notes.append(message % args))
    scan = _scan_of(np.array([[0, 0, 32, 32]], np.float32))
    assert plot_box_sizes(scan, tiny_config(), str(tmp_path / "sizes.png")) is None
    assert not (tmp_path / "sizes.png").exists()
    assert len(notes) == 1 and "matplotlib is not installed" in notes[0]


def write_tfrecord(path, examples):
    with tf.io.TFRecordWriter(str(path)) as writer:
        for example in examples:
            writer.write(example if isinstance(example, bytes) else example.SerializeToString())


@pytest.mark.quick
def test_count_records_shows_a_progress_bar(tmp_path, capsys):
    path = tmp_path / "three.tfrecord"
    write_tfrecord(path, [b"a", b"b", b"c"])
    assert count_records(TFRecordSource(str(path))) == 3
    out = capsys.readouterr().out
    assert "Counting the records of 1 TFRecord file(s)" in out
    assert "3/3" in out and "records/s:" in out  # One final line when stdout is no terminal.


def run_tool(*args, cwd):
    return subprocess.Popen([python(), os.path.join(REPO_ROOT, "tools", "check_data.py")]
                            + list(args), cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.quick
def test_tool_on_tfrecords_a_voc_tree_and_a_bad_flag(small_dataset, tmp_path):
    """Three runs at once: TFRecords with a corrupt record (named, with its reason), the
    chart and the JSON; a VOC tree with the VOC class names; a missing file named by flag."""
    folder, records = small_dataset
    good = [r for r in records if r.image_id != 4]
    examples = [record_to_tf_example(r, open(r.path, "rb").read()) for r in good]
    examples.insert(1, record_to_tf_example(records[3], b"\xff\xd8\xff broken jpeg"))
    write_tfrecord(tmp_path / "data.tfrecord", examples)
    voc_root = make_voc_tree(str(tmp_path / "VOC2012"))
    tfrecord_run = run_tool("--file_pattern=data.tfrecord", "--output_json=numbers.json",
                            "--output_png=chart.png", "--hparams=image_size=128,num_classes=4",
                            cwd=tmp_path)
    voc_run = run_tool("--voc_root=%s" % voc_root, "--output_png=", "--hparams=voc.yaml",
                       "--model_name=efficientdet-lite0", cwd=tmp_path)
    bad_run = run_tool("--json_file=missing.json", "--image_dir=.", cwd=tmp_path)

    out, err = tfrecord_run.communicate(timeout=300)
    assert tfrecord_run.returncode == 0, err[-3000:]
    assert ("record source_id 4 / broken.jpg (#1 of data.tfrecord): undecodable_images: "
            "corrupt or truncated jpeg data") in out
    assert "records/s:" in out  # The progress bar.
    numbers = json.loads((tmp_path / "numbers.json").read_text())
    assert numbers["images"] == 4 and numbers["boxes"] == 7 and len(numbers["skipped"]) == 1
    assert numbers["anchors"]["current"]["hparams"] in out
    assert (tmp_path / "chart.png").read_bytes().startswith(b"\x89PNG")

    out, err = voc_run.communicate(timeout=300)
    assert voc_run.returncode == 0, err[-3000:]
    assert "Usable images           3" in out and "At the 320x320 input" in out
    for name in ("person", "cat", "dog", "car"):
        assert name in out
    assert not (tmp_path / "box_sizes.png").exists()

    _, err = bad_run.communicate(timeout=300)
    assert bad_run.returncode == 1
    assert err.strip().splitlines()[-1] == \
        "efficientdet-check-data: --json_file missing.json does not exist"
