"""Test-time augmentation by a horizontal flip (detection/tta.py): mirrored boxes against the
reference implementation's flipped post-processing rows, the evaluation with tta: flip against
hand-placed boxes, and the Detector's tta against the mirror symmetry it must have."""

import numpy as np
import pytest

from helpers import bright_box_image, tiny_config, untrained_small_network, write_image
from efficientdet_keras import Detector
from efficientdet_keras.data.pipeline import InputPipeline
from efficientdet_keras.data.formats.records import ImageRecord
from efficientdet_keras.data.sources import RecordsSource
from efficientdet_keras.detection.postprocess import BatchedDetections
from efficientdet_keras.detection.tta import check_tta, merge_flipped, mirror_boxes
from efficientdet_keras.evaluation import COCOEvaluator
from efficientdet_keras.evaluation.runner import evaluate_dataset, flip_tta_fns

pytestmark = pytest.mark.quick  # All of this file is in the inner-loop set.

# The reference implementation's case (google/automl, efficientdet/tf2/postprocess_test.py):
# its detections as rows [xmin, ymin, xmax, ymax] of images 8 and 16 px wide, as found, and
# the same outputs post-processed as those of mirrored images (generate_detections(flip=True)).
REFERENCE_FOUND = [[[-1.177383, 1.793507, 8.340945, 4.418388],
                    [5.676410, 6.102146, 7.785691, 8.537168]],
                   [[5.885427, 13.529362, 11.410081, 14.154047],
                    [8.145872, -9.660868, 14.173973, 10.41237]]]
REFERENCE_FLIPPED = [[[-0.340945, 1.793507, 9.177383, 4.418388],
                      [0.214309, 6.102146, 2.32359, 8.537168]],
                     [[4.589919, 13.529362, 10.114573, 14.154047],
                      [1.826027, -9.660868, 7.854128, 10.41237]]]


def test_mirrored_boxes_are_the_reference_flipped_rows():
    for found, flipped, width in zip(REFERENCE_FOUND, REFERENCE_FLIPPED, (8.0, 16.0)):
        yx = np.array(found)[:, [1, 0, 3, 2]]  # ymin, xmin, ymax, xmax
        np.testing.assert_allclose(mirror_boxes(yx, width),
                                   np.array(flipped)[:, [1, 0, 3, 2]], atol=1e-5)


def test_merge_flipped_hand_computed():
    # Image 100 wide. The plain pass finds A; the mirror pass finds A (at x 70..90 of the
    # mirror, i.e. 10..30 here, a little lower) and B, which the plain pass missed.
    plain = {"boxes": [[10, 10, 50, 30]], "scores": [0.8], "classes": [1]}
    mirror = {"boxes": [[12, 70, 52, 90], [0, 0, 20, 20]], "scores": [0.4, 0.6],
              "classes": [1, 2]}
    fused = merge_flipped(plain, mirror, width=100)
    np.testing.assert_array_equal(fused["classes"], [1, 2])
    np.testing.assert_allclose(fused["scores"], [0.6, 0.3])
    np.testing.assert_allclose(fused["boxes"], [[(0.8 * 10 + 0.4 * 12) / 1.2, 10,
                                                 (0.8 * 50 + 0.4 * 52) / 1.2, 30],
                                                [0, 80, 20, 100]], rtol=1e-6)
    assert len(merge_flipped(plain, mirror, width=100, max_detections=1)["scores"]) == 1
    with pytest.raises(ValueError, match="tta must be flip or null"):
        check_tta("multiscale")


def bright_box_detect_fns(threshold=0.0):
    """(forward, postprocess) of a 'model' that finds the one bright rectangle of each
    normalised image exactly: its outputs are the images themselves."""
    def forward(images):
        return images, None

    def postprocess(images, _, image_scales):
        found = []
        for image, scale in zip(np.asarray(images), np.asarray(image_scales)):
            rows = np.flatnonzero((image > threshold).all(-1).any(1))
            cols = np.flatnonzero((image > threshold).all(-1).any(0))
            box = np.array([rows[0], cols[0], rows[-1] + 1, cols[-1] + 1], np.float32)
            found.append(box * scale)
        count = len(found)
        return BatchedDetections(np.array(found)[:, np.newaxis],
                                 np.full([count, 1], 0.9, np.float32),
                                 np.ones([count, 1], np.int32), np.ones([count], np.int32))

    return forward, postprocess


def test_evaluation_with_flip_tta_maps_the_mirror_pass_back(tmp_path):
    # 96 x 160 images (letterboxed to 64 px: padding below, which the mirror pass keeps), one
    # box each, away from the centre: a mirror pass mapped back with any other width (or not
    # at all) misses them.
    records = []
    for i, box in enumerate([[10, 10, 40, 50], [50, 100, 90, 150], [20, 60, 70, 80]]):
        path = write_image(str(tmp_path / ("%d.png" % i)), bright_box_image(96, 160, box), "png")
        records.append(ImageRecord(i + 1, path, 96, 160, np.array([box], np.float32),
                                   np.array([1]), np.zeros(1, bool), np.zeros(1, np.float32)))
    config = tiny_config(num_classes=1, image_size=64, tta="flip")
    dataset = InputPipeline(config, RecordsSource(records), is_training=False, batch_size=2)()
    evaluator = COCOEvaluator(label_map={1: "box"}, backend="pycocotools")
    detect_fns = flip_tta_fns(bright_box_detect_fns(), config)
    metrics, timing = evaluate_dataset(None, dataset, config, evaluator, progress=False,
                                       detect_fns=detect_fns)
    assert timing.images == 3 and metrics["AP75"] == pytest.approx(1.0)
    rows = evaluator.detection_results()
    assert [row["score"] for row in rows] == pytest.approx([0.9] * 3)  # Both passes agree.
    wrong_width = flip_tta_fns(bright_box_detect_fns(), config.copy().override(
        {"image_size": (64, 80)}))  # Mirrored back across 80 px instead of 64.
    evaluate_dataset(None, dataset, config, evaluator, progress=False, detect_fns=wrong_width)
    rows = evaluator.detection_results()  # The passes no longer meet: two halves each.
    assert [row["score"] for row in rows] == pytest.approx([0.45] * 6)


def test_detector_flip_tta_is_mirror_symmetric():
    model = untrained_small_network(class_kernel_seed=[1, 2])
    image = np.random.RandomState(3).randint(0, 256, [64, 64, 3]).astype(np.uint8)
    plain = Detector.from_model(model).detect(image)
    detector = Detector.from_model(model, tta="flip")
    assert detector.tta == "flip" and Detector.from_model(model).tta is None
    found = detector.detect(image)
    in_mirror = detector.detect(np.ascontiguousarray(image[:, ::-1]))
    # The image's two passes are the mirror image's two passes, swapped.
    assert len(found) == len(in_mirror) > 10
    np.testing.assert_allclose(found.scores, in_mirror.scores, rtol=1e-5)
    np.testing.assert_allclose(found.boxes, mirror_boxes(in_mirror.boxes, 64), atol=1e-3)
    assert not np.allclose(found.scores[:len(plain)], plain.scores[:len(found)])
