"""Evaluation images: ground truth beside the detections, drawn where the objects are, as
PNG files and a TensorBoard image summary, during training and in efficientdet-eval
(the CLI flag is tested in test_eval_tool.py)."""

import glob
import io
import json
import os

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from helpers import tiny_config
from efficientdet_keras import EfficientDetNet
from efficientdet_keras.data.pipeline import InputPipeline
from efficientdet_keras.data.sources import CocoSource
from efficientdet_keras.data.synthetic import SYNTHETIC_LABEL_MAP, write_synthetic_dataset
from efficientdet_keras.utils.drawing import class_colour
from efficientdet_keras.detection.postprocess import BatchedDetections
from efficientdet_keras.reports.eval_images import SUMMARY_TAG, EvaluationImages
from efficientdet_keras.training.callbacks.coco_evaluation import COCOCallback

pytestmark = pytest.mark.quick  # All of this file is in the inner-loop set.

SMALL = dict(fpn_num_filters=16, fpn_cell_repeats=1, box_class_repeats=1)
SIZE = 128  # tiny_config's input size
TITLE = 14  # side_by_side's title height
RIGHT = SIZE + 4  # x of the right picture: the left one's width plus the gap
GREY = 120


def grey_batch(config, count: int) -> tf.Tensor:
    """`count` uniform grey input images, normalised as the pipeline gives them."""
    pixels = np.full([count, SIZE, SIZE, 3], GREY, np.float32)
    return tf.constant((pixels - np.asarray(config.mean_rgb)) / np.asarray(config.stddev_rgb))


def labels_for(boxes, classes, scales, ids):
    """Pipeline labels: ground truth [B, G, 4] in input pixels, padded with class -1."""
    return {"groundtruth_boxes": np.asarray(boxes, np.float32),
            "groundtruth_classes": np.asarray(classes, np.int32),
            "image_scales": np.asarray(scales, np.float32), "source_ids": np.asarray(ids, np.int64)}


def detections_for(boxes, scores, classes) -> BatchedDetections:
    """BatchedDetections [B, N, ...] in original pixels, every row valid."""
    scores = np.asarray(scores, np.float32)
    return BatchedDetections(np.asarray(boxes, np.float32), scores,
                             np.asarray(classes, np.int32),
                             np.full([len(scores)], scores.shape[1], np.int32))


def box_edge_pixels(picture, box, x_offset):
    """The picture's RGB at the middle of each edge of `box` (input pixels), [4, 3]."""
    ymin, xmin, ymax, xmax = (int(v) for v in box)
    ymid, xmid = (ymin + ymax) // 2, (xmin + xmax) // 2
    points = [(ymid, xmin), (ymid, xmax), (ymax, xmid), (ymin + 1, xmid)]
    return np.array([picture[TITLE + y, x_offset + x] for y, x in points])


def test_boxes_land_on_the_objects_truth_left_detections_right():
    config = tiny_config(label_map=dict(SYNTHETIC_LABEL_MAP))
    scale = 2.0  # Original pixels per input pixel: detections are twice the input boxes.
    truth_box, kept_box, dropped_box = [20, 30, 80, 90], [24, 40, 70, 100], [90, 10, 120, 60]
    labels = labels_for([[truth_box, [0, 0, 0, 0]]], [[2, -1]], [scale], [7])
    detections = detections_for([[np.multiply(kept_box, scale), np.multiply(dropped_box, scale)]],
                                [[0.9, 0.1]], [[3, 4]])
    images = EvaluationImages(config, num_images=1, score_threshold=0.3)
    images(grey_batch(config, 1), labels, detections)

    [(image_id, picture)] = images.pictures
    assert image_id == 7 and picture.shape == (TITLE + SIZE, 2 * SIZE + 4, 3)
    left, right = picture[TITLE:, :SIZE], picture[TITLE:, RIGHT:]
    # Ground truth on the left only, in its class colour, at its input-pixel box.
    assert (box_edge_pixels(picture, truth_box, 0) == class_colour(2)).all()
    assert (picture[TITLE + 50, 60] == GREY).all()  # Outlines, not filled.
    # The detection above the threshold on the right only, at original / scale.
    assert (box_edge_pixels(picture, kept_box, RIGHT) == class_colour(3)).all()
    assert not (left == class_colour(3)).all(-1).any()
    assert not (right == class_colour(2)).all(-1).any()
    # The one below 0.3 is not drawn at all.
    assert not (picture == class_colour(4)).all(-1).any()
    assert (box_edge_pixels(picture, dropped_box, RIGHT) == GREY).all()


def test_only_the_first_n_images_are_written_as_png_and_tensorboard_images(tmp_path):
    config = tiny_config()
    images = EvaluationImages(config, num_images=3)
    for ids in ([11, 12], [13, 14], [15, 16]):  # Three batches of two; only 3 images wanted.
        labels = labels_for([[[10, 10, 50, 50]]] * 2, [[1]] * 2, [1.0, 1.0], ids)
        images(grey_batch(config, 2), labels, detections_for([[[10, 10, 50, 50]]] * 2,
                                                             [[0.8]] * 2, [[1]] * 2))
    paths = images.write(str(tmp_path / "epoch-5"), summary_dir=str(tmp_path), step=5)

    assert [os.path.basename(p) for p in paths] == ["11.png", "12.png", "13.png"]
    assert sorted(os.listdir(tmp_path / "epoch-5")) == ["11.png", "12.png", "13.png"]
    for path, (_, picture) in zip(paths, images.pictures):
        np.testing.assert_array_equal(np.asarray(Image.open(path)), picture)
    # TensorBoard: one image summary at step 5 holding the three pictures.
    [event_file] = glob.glob(str(tmp_path / "events.out.tfevents.*"))
    summaries = [(event.step, value) for event in tf.compat.v1.train.summary_iterator(event_file)
                 for value in event.summary.value]
    assert [(step, value.tag) for step, value in summaries] == [(5, SUMMARY_TAG)]
    width, height, *pngs = summaries[0][1].tensor.string_val
    assert (int(width), int(height), len(pngs)) == (2 * SIZE + 4, TITLE + SIZE, 3)
    np.testing.assert_array_equal(np.asarray(Image.open(io.BytesIO(pngs[2]))),
                                  images.pictures[2][1])
    images.reset()
    assert images.write(str(tmp_path / "nothing")) == [] and not (tmp_path / "nothing").exists()


class EvaluatedOnly(EfficientDetNet):
    """A detector whose fit steps change nothing, so that fit runs only the callbacks."""

    def train_step(self, data):
        return {}


@pytest.fixture(scope="module")
def val_data(tmp_path_factory):
    """(config, a val dataset of 4 synthetic 160x96 images in batches of 2, the dataset paths)."""
    data = write_synthetic_dataset(str(tmp_path_factory.mktemp("eval_images")), num_train=1,
                                   num_val=4, image_size=(96, 160), seed=5, tfrecord=False)
    config = tiny_config(label_map=data.label_map, **SMALL)
    dataset = InputPipeline(config, CocoSource(data.val_json, data.val_images), is_training=False,
                            batch_size=2)()
    return config, dataset, data


def test_training_writes_images_at_each_coco_evaluation_only(val_data, tmp_path):
    config, dataset, _ = val_data
    model = EvaluatedOnly(config=config)
    model.compile()
    callback = COCOCallback(config, dataset, model_dir=str(tmp_path), map_freq=2,
                            eval_images=3)
    model.fit(dataset.repeat(), epochs=3, steps_per_epoch=1, callbacks=[callback], verbose=0)

    images_dir = tmp_path / "eval_images"
    # Evaluated after epoch 2 (map_freq) and 3 (the last), not after epoch 1.
    assert sorted(name for name in os.listdir(images_dir) if name.startswith("epoch-")) == [
        "epoch-2", "epoch-3"]
    first_ids = [int(i) for _, labels in dataset for i in labels["source_ids"]][:3]
    for epoch in ("epoch-2", "epoch-3"):
        assert sorted(os.listdir(images_dir / epoch)) == sorted("%d.png" % i for i in first_ids)
    steps = [event.step for path in glob.glob(str(images_dir / "events.out.tfevents.*"))
             for event in tf.compat.v1.train.summary_iterator(path)
             if any(value.tag == SUMMARY_TAG for value in event.summary.value)]
    assert sorted(steps) == [2, 3]


def lower_edge_pixels(picture, box, x_offset):
    """The picture's RGB at 3 points of a fractional box's outline, [3, 3]: its left and right
    edges 3/4 down, its bottom edge's middle (away from the label at the top; inside the
    2-pixel outline whether Pillow rounds or truncates the corners)."""
    ymin, xmin, ymax, xmax = box
    y, xmid = int(ymin + 0.75 * (ymax - ymin)), int((xmin + xmax) / 2)
    points = [(y, int(xmin) + 1), (y, int(xmax)), (int(ymax), xmid)]
    return np.array([picture[TITLE + y, x_offset + x] for y, x in points])


def test_detections_in_original_pixels_land_where_the_pipeline_put_the_objects(val_data):
    """The val JSON's boxes (original pixels), given as perfect detections, are drawn on the
    letterboxed input at JSON box / (160 / 128), and so is the pipeline's ground truth."""
    config, dataset, data = val_data
    images_batch, labels = next(iter(dataset))
    objects = {}
    for annotation in json.load(open(data.val_json))["annotations"]:
        x, y, width, height = annotation["bbox"]
        objects.setdefault(annotation["image_id"], []).append(
            ([y, x, y + height, x + width], annotation["category_id"]))
    ids = [int(i) for i in labels["source_ids"]]
    most = max(len(objects[i]) for i in ids)
    boxes = np.zeros([len(ids), most, 4], np.float32)
    classes = np.zeros([len(ids), most], np.int32)
    for row, image_id in enumerate(ids):
        for column, (box, class_id) in enumerate(objects[image_id]):
            boxes[row, column], classes[row, column] = box, class_id
    detections = BatchedDetections(boxes, np.where(classes > 0, 0.9, 0.0).astype(np.float32),
                                   classes, np.array([len(objects[i]) for i in ids], np.int32))
    images = EvaluationImages(config, num_images=2)
    images(images_batch, labels, detections)

    scale = 160 / SIZE  # The longer side fills the input.
    hits = {0: [], RIGHT: []}
    for image_id, picture in images.pictures:
        for box, class_id in objects[image_id]:
            for x_offset in hits:
                edges = lower_edge_pixels(picture, np.divide(box, scale), x_offset)
                hits[x_offset].extend((edges == class_colour(class_id)).all(-1))
    # Nearly every edge (a later box or label covers a few) has its class colour.
    assert len(hits[0]) >= 20 and np.mean(hits[0]) >= 0.85 and np.mean(hits[RIGHT]) >= 0.85
