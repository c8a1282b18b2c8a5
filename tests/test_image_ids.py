"""Image ids stay exact from the data to the COCO score, whatever form a dataset gives them."""

import json

import numpy as np
import pytest

from helpers import bright_box_image, tiny_config, write_image, write_tfrecord
from efficientdet_keras.data.formats.image_ids import image_id_to_int64
from efficientdet_keras.data.pipeline import InputPipeline
from efficientdet_keras.data.sources import CocoSource, TFRecordSource
from efficientdet_keras.data.formats.coco_json import read_coco_json, records_to_coco
from efficientdet_keras.data.formats.coco_records import load_coco_records
from efficientdet_keras.data.formats.records import ImageRecord
from efficientdet_keras.evaluation import COCOEvaluator, check_source_ids_match
from efficientdet_keras.detection.postprocess import CocoRows, BatchedDetections

pytestmark = pytest.mark.quick  # All of this file is in the inner-loop set.

# 2^53 and 2^53 + 1 are one float64: any float on the way merges their detections.
HARD_IDS = [2 ** 63 - 1, 2 ** 53, 2 ** 53 + 1, "000123", "img_a.jpg", "img_b.jpg"]
LABEL_MAP = {1: "box"}


def test_the_id_rule():
    assert image_id_to_int64(2 ** 63 - 1) == 2 ** 63 - 1
    assert image_id_to_int64("9223372036854775807") == 2 ** 63 - 1
    assert image_id_to_int64("000123") == image_id_to_int64(b"123") == 123
    hashed = image_id_to_int64("img_a.jpg")
    assert hashed == image_id_to_int64(b"img_a.jpg") and 0 <= hashed <= 2 ** 63 - 1
    assert hashed != image_id_to_int64("img_b.jpg")
    # Too large for int64 as a number: hashed like any other text.
    assert image_id_to_int64("9223372036854775808") != 9223372036854775808
    with pytest.raises(ValueError, match="2.5"):
        image_id_to_int64(2.5)
    with pytest.raises(ValueError, match="int64"):
        image_id_to_int64(2 ** 63)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """Six images named by HARD_IDS, one box each, as TFRecords and as COCO JSON + images."""
    folder = tmp_path_factory.mktemp("ids")
    records = []
    for index, image_id in enumerate(HARD_IDS):
        box = np.array([8 + 4 * index, 10, 60, 70 + 2 * index], np.float32)
        path = write_image(str(folder / ("image%d.png" % index)),
                           bright_box_image(96, 112, box), fmt="png")
        records.append(ImageRecord(image_id, path, 96, 112, box[np.newaxis], np.array([1]),
                                   np.zeros(1, bool), np.zeros(1, np.float32)))
    json_path = folder / "val.json"
    json_path.write_text(json.dumps(records_to_coco(records, LABEL_MAP)))
    tfrecord = write_tfrecord(str(folder / "val.tfrecord"), records)
    return str(json_path), str(folder), tfrecord


def perfect_detections(labels) -> BatchedDetections:
    """The ground truth of a batch as detections in original pixels, score 1."""
    classes = labels["groundtruth_classes"].numpy()
    boxes = labels["groundtruth_boxes"].numpy() * labels["image_scales"].numpy()[:, None, None]
    valid = (classes > 0).sum(axis=1).astype(np.int32)
    return BatchedDetections(boxes.astype(np.float32), (classes > 0).astype(np.float32),
                             np.maximum(classes, 0).astype(np.int32), valid)


def evaluate_perfectly(source, annotation_file):
    config = tiny_config(num_classes=1, label_map=LABEL_MAP)
    evaluator = COCOEvaluator(annotation_file, label_map=LABEL_MAP, backend="pycocotools")
    seen = []
    for _, labels in InputPipeline(config, source, is_training=False, batch_size=4)():
        seen.extend(labels["source_ids"].numpy().tolist())
        evaluator.add_batch(labels, perfect_detections(labels))
    return evaluator, seen


@pytest.mark.parametrize("source_kind", ["tfrecord", "coco_json"])
@pytest.mark.parametrize("groundtruth", ["json_file", "batches"])
def test_perfect_detections_score_ap_1_for_every_kind_of_id(dataset, source_kind, groundtruth):
    json_path, image_dir, tfrecord = dataset
    source = TFRecordSource(tfrecord) if source_kind == "tfrecord" else CocoSource(json_path,
                                                                                   image_dir)
    evaluator, seen = evaluate_perfectly(source, json_path if groundtruth == "json_file" else None)
    assert seen == [image_id_to_int64(i) for i in HARD_IDS]
    assert seen[0] == 2 ** 63 - 1 and seen[1:3] == [2 ** 53, 2 ** 53 + 1] and seen[3] == 123
    metrics = evaluator.result()
    assert metrics["AP"] == pytest.approx(1.0) and metrics["ARmax100"] == pytest.approx(1.0)
    results = evaluator.detection_results(original_ids=True)
    assert all(type(r["image_id"]) in (int, str) for r in results)
    if groundtruth == "json_file":  # The ids as the JSON spells them, for any COCO tool.
        assert [r["image_id"] for r in results] == HARD_IDS
    else:
        assert [r["image_id"] for r in results] == seen


def test_coco_json_with_string_ids_loads_and_matches_its_tfrecords(dataset):
    json_path, image_dir, tfrecord = dataset
    records = load_coco_records(json_path, image_dir)
    assert [r.image_id for r in records] == HARD_IDS
    check_source_ids_match(TFRecordSource(tfrecord), json_path)  # No error.


def write_json(path, images):
    path.write_text(json.dumps({"images": images, "annotations": [],
                                "categories": [{"id": 1, "name": "box"}]}))
    return str(path)


@pytest.mark.parametrize("ids,message", [
    ([7, 8, 7], "image id 7 appears twice"),
    (["a.jpg", "a.jpg"], "image id 'a.jpg' appears twice"),
    ([123, "0123"], "image id '0123' appears twice (as 123, which maps to the same int64 123)"),
])
def test_duplicate_image_ids_in_a_coco_json_are_an_error(tmp_path, ids, message):
    path = write_json(tmp_path / "dup.json", [{"id": i, "file_name": "x.png", "height": 4,
                                               "width": 4} for i in ids])
    # Ground truth stays strict (pycocotools would merge the entries); training input
    # (load_coco_records) skips them instead: tests/test_file_safety.py.
    for load in (lambda: COCOEvaluator(path), lambda: read_coco_json(path)):
        with pytest.raises(ValueError) as error:
            load()
        assert path in str(error.value) and message in str(error.value)


def test_source_ids_that_are_not_in_the_json_stop_with_a_few_of_each(dataset, tmp_path):
    _, _, tfrecord = dataset
    other = write_json(tmp_path / "other.json",
                       [{"id": 1000 + i, "file_name": "%d.png" % i, "height": 4, "width": 4}
                        for i in range(10)])
    with pytest.raises(ValueError) as error:
        check_source_ids_match(TFRecordSource(tfrecord), other)
    message = str(error.value)
    assert "\n" not in message and "6 of 6 image ids" in message and other in message
    assert "'9223372036854775807'" in message and "'img_a.jpg'" not in message  # 3 shown.
    assert "1000, 1001, 1002" in message and "1003" not in message
    # The evaluator refuses too, instead of dropping the images without a word.
    evaluator = COCOEvaluator(other, backend="pycocotools")
    evaluator.add_detections(np.array([1001, 77], np.int64),
                             CocoRows(np.zeros([0], np.int64), np.zeros([0, 6])))
    with pytest.raises(ValueError, match="1 of 2 image ids of the evaluated images are not in"):
        evaluator.result()
