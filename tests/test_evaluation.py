import contextlib
import io
import json

import numpy as np
import pytest
import tensorflow as tf
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from helpers import tiny_config
from efficientdet_keras.data.pipeline import InputPipeline
from efficientdet_keras.data.sources import TFRecordSource
from efficientdet_keras.data.synthetic import write_synthetic_dataset
from efficientdet_keras.evaluation import METRIC_NAMES, COCOEvaluator, faster_coco_eval_available
from efficientdet_keras.detection.postprocess import CocoRows, BatchedDetections, box_scale_factors

pytestmark = pytest.mark.quick  # All of this file is in the inner-loop set.


def random_case(seed, num_images=12, num_classes=5):
    """Ground truth and detections with the hard parts: empty images, crowds, all sizes,
    perfect, shifted and useless detections, and large image ids."""
    rng = np.random.default_rng(seed)
    images, annotations, results = [], [], []
    for index in range(num_images):
        image_id = int(rng.integers(1, 2 ** 40)) if index % 3 == 0 else index + 1
        images.append({"id": image_id, "width": 640, "height": 480})
        for _ in range(int(rng.integers(0, 6)) if index % 4 else 0):  # Every 4th image: no gt.
            side = float(rng.choice([8, 24, 64, 200]) * rng.uniform(0.7, 1.3))  # small..large
            x, y = rng.uniform(0, 640 - side), rng.uniform(0, 480 - side)
            box = [x, y, side, side * rng.uniform(0.5, 1.5)]
            annotations.append({"id": len(annotations) + 1, "image_id": image_id,
                                "category_id": int(rng.integers(1, num_classes + 1)),
                                "bbox": box, "area": box[2] * box[3],
                                "iscrowd": int(rng.uniform() < 0.1)})
            kind = rng.uniform()
            if kind < 0.4:  # Perfect.
                det = box
            elif kind < 0.8:  # Shifted.
                det = [box[0] + rng.normal(0, side / 4), box[1] + rng.normal(0, side / 4), box[2], box[3]]
            else:
                continue  # Missed.
            category = annotations[-1]["category_id"] if rng.uniform() < 0.9 else 1
            results.append({"image_id": image_id, "category_id": category, "bbox": det,
                            "score": float(rng.uniform(0.05, 1))})
        for _ in range(int(rng.integers(0, 4))):  # Useless detections.
            results.append({"image_id": image_id, "category_id": int(rng.integers(1, num_classes + 1)),
                            "bbox": [float(rng.uniform(0, 500)), float(rng.uniform(0, 400)), 30.0, 30.0],
                            "score": float(rng.uniform(0, 0.5))})
    categories = [{"id": c, "name": "class%d" % c} for c in range(1, num_classes + 1)]
    return {"images": images, "annotations": annotations, "categories": categories}, results


def pycocotools_stats(groundtruth, results):
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO()
        gt.dataset = json.loads(json.dumps(groundtruth))
        gt.createIndex()
        evaluation = COCOeval(gt, gt.loadRes(json.loads(json.dumps(results))), "bbox")
        evaluation.evaluate()
        evaluation.accumulate()
        evaluation.summarize()
    return dict(zip(METRIC_NAMES, evaluation.stats))


def rows_from_results(results, image_ids):
    """The detections of `results` on the images `image_ids`, as add_detections takes them."""
    chosen = [r for r in results if r["image_id"] in set(image_ids)]
    return CocoRows(np.array([r["image_id"] for r in chosen], np.int64),
                    np.array([[*r["bbox"], r["score"], r["category_id"]] for r in chosen],
                             np.float64).reshape(-1, 6))


def evaluate_from_file(tmp_path, groundtruth, results, backend):
    path = tmp_path / "gt.json"
    path.write_text(json.dumps(groundtruth))
    evaluator = COCOEvaluator(str(path), backend=backend)
    ids = [im["id"] for im in groundtruth["images"]]
    for start in range(0, len(ids), 5):  # In batches, as an eval loop would.
        batch_ids = ids[start:start + 5]
        evaluator.add_detections(np.array(batch_ids, np.int64),
                                 rows_from_results(results, batch_ids))
    return evaluator.result()


BACKENDS = ["pycocotools"] + (["faster_coco_eval"] if faster_coco_eval_available() else [])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(5))
def test_matches_pycocotools_on_random_cases(tmp_path, backend, seed):
    groundtruth, results = random_case(seed)
    expected = pycocotools_stats(groundtruth, results)
    got = evaluate_from_file(tmp_path, groundtruth, results, backend)
    for name in METRIC_NAMES:
        assert got[name] == pytest.approx(expected[name], abs=1e-12), name
    assert set(k for k in got if k.startswith("AP_/")) == {"AP_/class%d" % c for c in range(1, 6)}


def test_images_without_detections_still_count(tmp_path):
    groundtruth = {"images": [{"id": 1}, {"id": 2}],
                   "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, 50, 50],
                                    "area": 2500, "iscrowd": 0},
                                   {"id": 2, "image_id": 2, "category_id": 1, "bbox": [0, 0, 50, 50],
                                    "area": 2500, "iscrowd": 0}],
                   "categories": [{"id": 1, "name": "a"}]}
    perfect_on_one = [{"image_id": 1, "category_id": 1, "bbox": [0, 0, 50, 50], "score": 0.9}]
    for backend in BACKENDS:
        metrics = evaluate_from_file(tmp_path, groundtruth, perfect_on_one, backend)
        assert metrics["ARmax100"] == pytest.approx(0.5)  # Half the objects were found.
        assert metrics["AP50"] == pytest.approx(pycocotools_stats(groundtruth, perfect_on_one)["AP50"])
        assert metrics["AP50"] < 0.6


def test_no_detections_at_all_scores_zero(tmp_path):
    groundtruth, _ = random_case(0)
    metrics = evaluate_from_file(tmp_path, groundtruth, [], "pycocotools")
    assert metrics["AP"] == 0.0 and metrics["ARmax100"] == 0.0


def test_groundtruth_from_batches_equals_groundtruth_from_file(tmp_path):
    groundtruth, results = random_case(7)
    expected = pycocotools_stats(groundtruth, results)
    evaluator = COCOEvaluator(label_map={c["id"]: c["name"] for c in groundtruth["categories"]},
                              backend="pycocotools")
    scale = 2.0  # Pipeline boxes are in input pixels: original / image_scale.
    for image in groundtruth["images"]:
        anns = [a for a in groundtruth["annotations"] if a["image_id"] == image["id"]]
        boxes = np.zeros([1, 8, 4])
        classes = -np.ones([1, 8], np.int64)
        crowd = np.zeros([1, 8], bool)
        area = np.zeros([1, 8])
        for i, a in enumerate(anns):
            x, y, w, h = a["bbox"]
            boxes[0, i] = np.array([y, x, y + h, x + w]) / scale
            classes[0, i], crowd[0, i], area[0, i] = a["category_id"], a["iscrowd"], a["area"]
        ids = np.array([image["id"]], np.int64)
        evaluator.add_groundtruth(ids, boxes, classes, crowd, area, image_scales=np.array([scale]))
        evaluator.add_detections(ids, rows_from_results(results, [image["id"]]))
    got = evaluator.result()
    for name in METRIC_NAMES:
        assert got[name] == pytest.approx(expected[name], abs=1e-9), name


def test_add_batch_with_pipeline_labels_and_reset():
    evaluator = COCOEvaluator(label_map={1: "cat", 2: "dog"}, backend="pycocotools")
    big_id = 2 ** 41 + 3
    labels = {"source_ids": tf.constant([big_id], tf.int64), "image_scales": tf.constant([2.0]),
              "groundtruth_boxes": tf.constant([[[10.0, 10.0, 30.0, 50.0], [0, 0, 0, 0]]]),
              "groundtruth_classes": tf.constant([[2, -1]]),
              "groundtruth_is_crowd": tf.constant([[False, False]]),
              "groundtruth_area": tf.constant([[0.0, 0.0]])}
    detections = BatchedDetections(boxes=tf.constant([[[20.0, 20.0, 60.0, 100.0]]]),  # Original.
                                   scores=tf.constant([[0.8]]), classes=tf.constant([[2]]),
                                   valid=tf.constant([1]))
    evaluator.add_batch(labels, detections)
    assert evaluator.detection_results()[0]["image_id"] == big_id
    metrics = evaluator.result()
    assert metrics["AP"] == pytest.approx(1.0) and metrics["AP_/dog"] == pytest.approx(1.0)
    assert metrics["AP_/cat"] == -1.0  # No ground truth for cats.
    evaluator.reset()
    with pytest.raises(ValueError, match="no images"):
        evaluator.result()


def test_backend_printing_is_kept_quiet(tmp_path, capsys):
    groundtruth, results = random_case(1)
    evaluate_from_file(tmp_path, groundtruth, results, "pycocotools")
    assert "Average Precision" not in capsys.readouterr().out


@pytest.mark.skipif(not faster_coco_eval_available(), reason="faster-coco-eval is not installed")
def test_auto_backend_prefers_faster_coco_eval():
    assert COCOEvaluator(label_map={1: "a"}).backend == "faster_coco_eval"


def test_gather_across_replicas_collects_every_image(two_cpu_strategy):
    from efficientdet_keras.evaluation import gather_across_replicas
    strategy = two_cpu_strategy
    dataset = tf.data.Dataset.from_tensor_slices(tf.range(8, dtype=tf.int64)).batch(4)
    gathered = []
    for batch in strategy.experimental_distribute_dataset(dataset):
        ids = strategy.run(lambda x: tf.identity(x), args=(batch,))
        gathered.extend(gather_across_replicas(strategy, ids).numpy().tolist())
    assert sorted(gathered) == list(range(8))


def test_stretched_pipeline_boxes_map_back_to_the_annotations(tmp_path):
    """The ground truth of a stretched evaluation pipeline, given back as detections through
    the per-axis image_scales, lands on the COCO JSON's boxes: AP 1 (a wrong axis would not)."""
    data = write_synthetic_dataset(str(tmp_path), num_train=1, num_val=6, image_size=(48, 96),
                                   seed=2)
    config = tiny_config(num_classes=4, image_size=64, resize_mode="stretch")
    evaluator = COCOEvaluator(data.val_json, label_map=data.label_map, backend="pycocotools")
    for _, labels in InputPipeline(config, TFRecordSource(data.val_tfrecord), is_training=False,
                                   batch_size=3)():
        assert labels["image_scales"].shape == (3, 2)
        classes = labels["groundtruth_classes"]
        detections = BatchedDetections(
            boxes=labels["groundtruth_boxes"] * box_scale_factors(labels["image_scales"]),
            scores=tf.cast(classes > 0, tf.float32), classes=tf.maximum(classes, 0),
            valid=tf.reduce_sum(tf.cast(classes > 0, tf.int32), axis=1))
        evaluator.add_batch(labels, detections)
    metrics = evaluator.result()
    assert metrics["AP"] == pytest.approx(1.0, abs=1e-6)
