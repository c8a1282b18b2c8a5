"""Weighted box fusion against the reference implementation's published cases (google/automl,
efficientdet/tf2/wbf_test.py: detections there are rows [image id, y1, x1, y2, x2, score,
class]; here the box, score and class of each) and hand-computed groups."""

import numpy as np
import pytest

from efficientdet_keras.detection.wbf import box_iou, fuse_cluster, fuse_detections


@pytest.mark.parametrize("other, expected", [
    ([1, 1, 3, 3], 1.0),          # the same box
    ([2, 2, 4, 4], 1.0 / 7.0),    # corners overlapping
    ([3, 3, 5, 5], 0.0),          # touching at a point
])
def test_iou_reference_cases(other, expected):
    assert box_iou(np.array([[1, 1, 3, 3]]), np.array(other))[0] == pytest.approx(expected)


def test_iou_reference_cases_ends_and_vector():
    assert box_iou(np.array([[1, 1, 3, 2]]), np.array([2, 1, 4, 2]))[0] == pytest.approx(1 / 3)
    ious = box_iou(np.array([[1, 1, 3, 3], [2, 2, 4, 4], [3, 3, 5, 5]]), np.array([1, 1, 3, 3]))
    np.testing.assert_allclose(ious, [1, 1 / 7, 0])
    assert box_iou(np.array([[2, 1, 10, 1]]), np.array([3, 1, 10, 1]))[0] == 0.0  # No area.


def test_fused_box_is_the_score_weighted_mean_reference_cases():
    # The reference's weighted averages of 1 and 3: weights (0.5, 0.5) -> 2, (1, 0) -> 1,
    # (1, 2) -> 7/3; as the y1 of two boxes.
    for weights, expected in (([0.5, 0.5], 2.0), ([1.0, 0.0], 1.0), ([1.0, 2.0], 7 / 3)):
        box, _ = fuse_cluster([[1, 0, 2, 2], [3, 0, 4, 2]], weights, num_sources=1)
        assert box[0] == pytest.approx(expected)


def test_fused_score_divides_by_the_sources_reference_cases():
    d1, d2 = [1, 1, 2, 2], [3, 3, 4, 4]
    box, score = fuse_cluster([d1, d2], [0.3, 0.7], num_sources=1)
    np.testing.assert_allclose(box, [2.4, 2.4, 3.4, 3.4])
    assert score == pytest.approx(0.5)  # One source, two boxes: their mean.
    assert fuse_cluster([d1, d2], [0.3, 0.7], num_sources=3)[1] == pytest.approx(1 / 3)
    assert fuse_cluster([d2], [0.7], num_sources=2)[1] == pytest.approx(0.35)


def test_ensemble_reference_case():
    # The reference's case uses boxes of zero width ([2, 1, 10, 1]), whose IoU is 0 / 0;
    # its comparison happens to take that NaN as a match. The same case with boxes 1 wide:
    # the two class-1 boxes (IoU 0.875) fuse, the class-2 box stays alone.
    sources = [{"boxes": [[2, 1, 10, 2]], "scores": [0.75], "classes": [1]},
               {"boxes": [[3, 1, 10, 2], [3, 1, 10, 2]], "scores": [0.75, 1.0],
                "classes": [1, 2]}]
    fused = fuse_detections(sources)
    np.testing.assert_allclose(fused["boxes"], [[2.5, 1, 10, 2], [3, 1, 10, 2]])
    np.testing.assert_allclose(fused["scores"], [0.75, 0.5])
    np.testing.assert_array_equal(fused["classes"], [1, 2])


def test_each_box_joins_the_group_it_overlaps_most():
    # Hand-computed: a and c (IoU 60 / 140) stay apart; b overlaps a by 75 / 125 = 0.6 and c
    # by 85 / 115 = 0.74, both above 0.55, and joins c. Another class never fuses.
    a, c, b = [0, 0, 10, 10], [0, 4, 10, 14], [0, 2.5, 10, 12.5]
    np.testing.assert_allclose(box_iou(np.array([a, c]), np.array(b)), [0.6, 85 / 115])
    sources = [{"boxes": [a, c], "scores": [0.9, 0.8], "classes": [1, 1]},
               {"boxes": [b, a], "scores": [0.6, 0.7], "classes": [1, 2]}]
    fused = fuse_detections(sources)
    np.testing.assert_array_equal(fused["classes"], [1, 1, 2])
    np.testing.assert_allclose(fused["scores"], [1.4 / 2, 0.9 / 2, 0.7 / 2], rtol=1e-6)
    np.testing.assert_allclose(fused["boxes"], [(0.8 * np.array(c) + 0.6 * np.array(b)) / 1.4,
                                                a, a], rtol=1e-6)


def test_no_detections():
    fused = fuse_detections([{"boxes": np.zeros([0, 4]), "scores": [], "classes": []}] * 2)
    assert fused["boxes"].shape == (0, 4) and len(fused["scores"]) == 0


def test_ensemble_of_two_models_detections():
    from efficientdet_keras import Detections, ensemble_detections
    first = Detections.from_arrays([[10, 10, 50, 50], [60, 60, 90, 90]], [0.9, 0.5], [1, 2],
                                   (100, 100), {1: "cat", 2: "dog"})
    second = Detections.from_arrays([[12, 10, 52, 50]], [0.6], [1], (100, 100), {1: "cat"})
    fused = ensemble_detections([first, second])
    np.testing.assert_allclose(fused.boxes, [[(0.9 * 10 + 0.6 * 12) / 1.5, 10,
                                              (0.9 * 50 + 0.6 * 52) / 1.5, 50],
                                             [60, 60, 90, 90]], rtol=1e-6)
    np.testing.assert_allclose(fused.scores, [0.75, 0.25])
    assert list(fused.class_names) == ["cat", "dog"] and fused.image_size == (100, 100)
    with pytest.raises(ValueError, match="detections of one image"):
        ensemble_detections([first, Detections.from_arrays([], [], [], (50, 100))])
