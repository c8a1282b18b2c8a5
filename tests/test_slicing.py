"""Sliced detection (detection/slicing.py): the tiles cover the image, boxes of one object cut
at a tile's edge become one, and small objects a whole-image pass loses are found, through
Detector and efficientdet-infer --slice."""

import json

import numpy as np
import pytest

from helpers import BrightSquares, untrained_small_network
from efficientdet_keras.detection.slicing import (SliceSettings, detect_sliced,
                                                  merge_detections, slice_settings,
                                                  tile_windows)
from efficientdet_keras.inference.detector import Detector


@pytest.mark.quick
def test_tiles_cover_the_image_with_the_overlap_asked_and_end_at_its_edges():
    settings = SliceSettings(400, overlap=0.25)  # A step of 300.
    windows = tile_windows(1000, 700, settings)
    assert windows.tolist() == [[y, x, y + 400, x + 400] for y in (0, 300, 600)
                                for x in (0, 300)]
    covered = np.zeros([1000, 700], bool)
    for y0, x0, y1, x1 in windows:
        covered[y0:y1, x0:x1] = True
    assert covered.all()
    # An image smaller than a tile is one tile, itself.
    assert tile_windows(300, 200, settings).tolist() == [[0, 0, 300, 200]]
    assert SliceSettings((200, 300)).tile == (200, 300) and slice_settings(None) is None
    for bad, message in ((dict(tile=0), "tile size"), (dict(tile=64, overlap=1.0), "overlap"),
                         (dict(tile=64, merge="vote"), "nmm, nms, wbf"),
                         (dict(tile=64, metric="giou"), "ios, iou")):
        with pytest.raises(ValueError, match=message):
            SliceSettings(**bad)


@pytest.mark.quick
def test_a_box_cut_at_a_tile_edge_becomes_the_whole_one():
    # One object: whole in one tile (0.9), its left half in the next (0.95, it sees less).
    # A neighbour of the same class, and an object of another class on top of it.
    boxes = [[100, 100, 120, 120], [100, 100, 120, 110], [100, 125, 120, 145],
             [100, 100, 120, 120]]
    scores, classes = [0.9, 0.95, 0.8, 0.7], [1, 1, 1, 2]
    merged = merge_detections(boxes, scores, classes, SliceSettings(64))
    # nmm: the enclosing box with the best score; the neighbour and the other class stay.
    assert merged[0].tolist() == [[100, 100, 120, 120], [100, 125, 120, 145],
                                  [100, 100, 120, 120]]
    assert merged[1].tolist() == pytest.approx([0.95, 0.8, 0.7])
    assert merged[2].tolist() == [1, 1, 2]
    # nms keeps the best box, here the cut one; by IoU (0.5) the two are one object only
    # from a threshold of 0.5.
    nms = merge_detections(boxes, scores, classes, SliceSettings(64, merge="nms"))
    assert nms[0][0].tolist() == [100, 100, 120, 110] and len(nms[0]) == 3
    by_iou = merge_detections(boxes, scores, classes,
                              SliceSettings(64, merge="nms", metric="iou", threshold=0.6))
    assert len(by_iou[0]) == 4
    fused = merge_detections(boxes, scores, classes, SliceSettings(64, merge="wbf",
                                                                   threshold=0.4))
    assert len(fused[0]) == 3 and fused[1][0] == pytest.approx((0.9 + 0.95) / 2)


@pytest.mark.quick
def test_weak_boxes_around_an_object_are_dropped_before_merging():
    """A model's low-scoring boxes at other anchors often hold a confident one. Merged by IoS
    they would widen it to their size; the score threshold drops them in each tile first."""
    image = np.zeros([200, 200, 3], np.uint8)
    image[50:70, 50:70] = 255

    def detect(crops):  # In each tile: the bright square at 0.9, and the whole tile at 0.1.
        found = []
        for crop in crops:
            rows, cols = np.nonzero(crop[..., 0])
            boxes = [[0, 0, crop.shape[0], crop.shape[1]]]
            if rows.size:
                boxes.insert(0, [rows.min(), cols.min(), rows.max() + 1, cols.max() + 1])
            found.append((np.array(boxes, np.float32), np.array([0.9, 0.1][-len(boxes):]),
                          np.ones(len(boxes), np.int64)))
        return found

    settings = SliceSettings(100, overlap=0.2, full_image=False)
    boxes, scores, _ = detect_sliced(detect, image, settings, score_threshold=0.3)
    assert boxes.tolist() == [[50, 50, 70, 70]] and scores.tolist() == pytest.approx([0.9])
    widened, _, _ = detect_sliced(detect, image, settings)  # Every box merged: a tile's size.
    assert widened[0].tolist() == [0, 0, 100, 100]


def large_image_with_small_squares(size=3000, square=20, tile=256, overlap=0.2):
    """A dark image with 20-pixel white squares: a grid of them, and one astride each of the
    first tile seams (where neighbouring tiles each see a part of it)."""
    image = np.full([size, size, 3], 30, np.uint8)
    starts = [(y, x) for y in range(150, size - 100, 400) for x in range(150, size - 100, 400)]
    step = int(round(tile * (1 - overlap)))
    starts += [(y, tile - square // 2) for y in (700, 1500)]  # Across a vertical tile edge.
    starts += [(step + tile - square // 2, x) for x in (900, 2100)]  # A horizontal one.
    for y, x in starts:
        image[y:y + square, x:x + square] = 255
    truth = np.array([[y, x, y + square, x + square] for y, x in starts], np.float32)
    return image, truth


def matched(truth, boxes, threshold=0.5):
    """How many detections each true box has (IoU >= threshold)."""
    from efficientdet_keras.detection.wbf import box_iou
    return [int((box_iou(boxes, t) >= threshold).sum()) for t in truth]


@pytest.mark.quick
def test_sliced_detection_finds_the_small_objects_each_once():
    image, truth = large_image_with_small_squares()
    model = BrightSquares()
    whole = Detector._with_backend(model, "blobs").detect(image)
    assert max(matched(truth, whole.boxes), default=0) == 0  # A pixel at 128 px: lost.
    sliced = Detector._with_backend(model, "blobs", slicing=SliceSettings(256)).detect(image)
    # Every square found, once: the parts seen in two tiles merged into the whole one.
    assert matched(truth, sliced.boxes) == [1] * len(truth)
    assert len(sliced) == len(truth)
    assert model.images_seen == 1 + len(tile_windows(3000, 3000, SliceSettings(256))) + 1


def test_slicing_runs_a_real_model_tile_by_tile(tmp_path):
    """A network's detections of an image of four tiles, sliced into those tiles, are its
    detections of each tile, moved to where the tile lies."""
    model = untrained_small_network(class_kernel_seed=[4, 5])
    tiles = np.random.RandomState(7).randint(0, 256, [4, 64, 64, 3]).astype(np.uint8)
    image = np.concatenate([np.concatenate(tiles[:2], 1), np.concatenate(tiles[2:], 1)], 0)
    plain = Detector.from_model(model).detect(list(tiles))
    # No overlap, no whole-image pass, only identical boxes merged: nothing but the tiles.
    separate = SliceSettings(64, overlap=0.0, full_image=False, merge="nms", metric="iou",
                             threshold=1.0)
    sliced = Detector.from_model(model, slice=separate).detect(image)
    expected_boxes = np.concatenate([found.boxes + np.tile([y, x], 2) for found, (y, x)
                                     in zip(plain, [(0, 0), (0, 64), (64, 0), (64, 64)])])
    expected_scores = np.concatenate([found.scores for found in plain])
    # Boxes the tiles clipped to their edges can be equal: merged, as any equal boxes are.
    expected_boxes, expected_scores, _ = merge_detections(
        expected_boxes, expected_scores, np.concatenate([found.class_ids for found in plain]),
        separate)
    assert len(sliced) == len(expected_scores) > 20
    def order(boxes, scores):  # Box by box, then by score: the same order for both.
        return np.lexsort(np.column_stack([np.round(boxes, 2), np.round(scores, 5)]).T[::-1])
    expected, got = order(expected_boxes, expected_scores), order(sliced.boxes, sliced.scores)
    np.testing.assert_allclose(sliced.boxes[got], expected_boxes[expected], atol=1e-3)
    np.testing.assert_allclose(sliced.scores[got], expected_scores[expected], rtol=1e-5)

    # efficientdet-infer --slice takes the same settings; its detections.json has the boxes.
    from efficientdet_keras.cli.infer import slicing_flags
    assert slicing_flags(None, 0.2, "nmm") is None
    assert slicing_flags(64, 0.0, "nms") == SliceSettings(64, 0.0, merge="nms")
    from efficientdet_keras.workflows.detect import detect_images
    from PIL import Image
    Image.fromarray(image).save(tmp_path / "four.png")
    detect_images(Detector.from_model(model, slice=64, overlap=0.25), str(tmp_path / "four.png"),
                  str(tmp_path / "out"), score_threshold=0.0, max_boxes=1000,
                  report=lambda line: None)
    with open(tmp_path / "out" / "detections.json") as f:
        records = json.load(f)["four.png"]
    assert len(records) > 20
