"""Mosaic, mixup and GridMask as functions (data/augmentation/mixing.py, data/augmentation/gridmask.py)."""

import numpy as np
import pytest
import tensorflow as tf

from helpers import bright_box_image
from efficientdet_keras.data.augmentation import gridmask, mixing

pytestmark = pytest.mark.quick  # All of this file is in the inner-loop set.

# Object colours of the four mosaic images (class q + 1 is image q's object).
COLOURS = np.array([(255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 255)])
BACKGROUND = 60  # Grey around each object; the mosaic's fill is black.


def iou(a, b):
    inter = np.maximum(np.minimum(a[2:], b[2:]) - np.maximum(a[:2], b[:2]), 0).prod()
    area = lambda box: np.prod(box[2:] - box[:2])  # noqa: E731
    return inter / (area(a) + area(b) - inter)


def pixel_box(mask):
    """[ymin, xmin, ymax, xmax] around the True pixels (pixel edges), or None."""
    ys, xs = np.nonzero(mask)
    if not len(ys):
        return None
    return np.array([ys.min(), xs.min(), ys.max() + 1, xs.max() + 1], np.float32)


def mosaic_group(sizes, boxes_per_image, max_instances=4):
    """Four padded examples: image q is grey with its boxes painted in COLOURS[q]."""
    height, width = np.max(sizes, axis=0)
    group = {"image": np.zeros([4, height, width, 3], np.uint8),
             "size": np.array(sizes, np.int32), "image_id": np.arange(10, 14, dtype=np.int64),
             "boxes": np.zeros([4, max_instances, 4], np.float32),
             "classes": np.full([4, max_instances], -1, np.int32),
             "is_crowd": np.zeros([4, max_instances], bool),
             "area": np.zeros([4, max_instances], np.float32),
             "num_boxes": np.array([len(b) for b in boxes_per_image], np.int32)}
    for q, ((h, w), boxes) in enumerate(zip(sizes, boxes_per_image)):
        group["image"][q, :h, :w] = BACKGROUND
        for i, box in enumerate(boxes):
            ymin, xmin, ymax, xmax = np.round(np.array(box) * [h, w, h, w]).astype(int)
            group["image"][q, ymin:ymax, xmin:xmax] = COLOURS[q]
            group["boxes"][q, i] = box
            group["classes"][q, i] = q + 1
    return group


def test_mosaic_hand_computed_placement_clipping_and_remnants():
    # Canvas 128x128 meeting at (y, x) = (64, 50). Each image is resized to fit the canvas.
    sizes = [[100, 120], [80, 120], [100, 60], [50, 50]]
    middle = [0.25, 0.25, 0.75, 0.75]
    sliver = [0.4, 0.6, 0.6, 0.62]
    group = mosaic_group(sizes, [[middle], [middle, sliver], [middle], [middle]])
    out = mixing.mosaic(group, (128, 128), tf.constant([64, 50]), [0, 0, 0], 10)
    # 0: 107x128 ending at the centre: the middle box keeps [0, 0, 37.25, 18] of its
    #    [-16.25, -46, 37.25, 18], 19.6% of its area (< 20%): dropped.
    # 1: 85x128 from (-21, 50): middle box [0.25, 82, 42.75, 146] clipped at x=128 (72%);
    #    the sliver [13, 126.8, 30, 129.4] keeps 1.2 px of width (< 2 px; 47%): dropped.
    # 2: 128x77 from (64, -27): [96, -7.75, 160, 30.75] -> [96, 0, 128, 30.75] (40%).
    # 3: 128x128 from (64, 50): [96, 82, 160, 146] -> [96, 82, 128, 128] (36%).
    expected = np.array([[0.25, 82, 42.75, 128], [96, 0, 128, 30.75], [96, 82, 128, 128]])
    np.testing.assert_allclose(out["boxes"].numpy() * 128, expected, atol=1e-3)
    assert list(out["classes"].numpy()) == [2, 3, 4]
    np.testing.assert_allclose(out["area"], np.prod(expected[:, 2:] - expected[:, :2], 1),
                               rtol=1e-5)
    assert int(out["image_id"]) == 10 and out["image"].shape == (128, 128, 3)
    image = out["image"].numpy()
    # Image 0 shows in the top-left quadrant only (the object's remnant is there).
    assert (pixel_box(np.all(image == COLOURS[0], -1))[2:] <= [64, 50]).all()
    assert (image.max(-1) > 0).all()  # Here the four images cover the canvas.


def test_mosaic_boxes_hold_their_objects_at_random_centres():
    """For random centres and image sizes, every box returned holds its object: its edges
    are within 1 px of the box around the object's visible pixels (resizing blurs edges),
    and their IoU is >= 0.85 when both sides are 10 px or more; objects with 30% of their
    area and 3 px sides visible are returned."""
    rng = np.random.default_rng(0)
    checked = 0
    for trial in range(6):
        sizes = rng.integers(40, 160, size=[4, 2])
        boxes = []
        for h, w in sizes:
            ymin, xmin = rng.uniform(0.0, 0.6, 2)
            boxes.append([[ymin, xmin, ymin + rng.uniform(0.2, 0.4), xmin + rng.uniform(0.2, 0.4)]])
        group = mosaic_group(sizes.tolist(), boxes)
        centre = mixing.mosaic_centre((96, 128), tf.constant([trial, 7], tf.int64))
        out = mixing.mosaic(group, (96, 128), centre, [0, 0, 0], 10)
        image = out["image"].numpy().astype(int)
        returned = dict(zip(out["classes"].numpy(), out["boxes"].numpy() * [96, 128, 96, 128]))
        for q in range(4):
            visible = pixel_box(np.abs(image - COLOURS[q]).max(-1) < 40)
            scale = min(96 / sizes[q][0], 128 / sizes[q][1])
            full_area = np.prod((np.array(boxes[q][0][2:]) - boxes[q][0][:2]) * sizes[q] * scale)
            if q + 1 in returned:
                assert np.abs(returned[q + 1] - visible).max() <= 1.0, (trial, q)
                if (visible[2:] - visible[:2]).min() >= 10:
                    assert iou(returned[q + 1], visible) >= 0.85, (trial, q)
                checked += 1
            else:
                visible_area = 0 if visible is None else np.prod(visible[2:] - visible[:2])
                small = visible is None or (visible[2:] - visible[:2]).min() < 3
                assert small or visible_area < 0.3 * full_area, (trial, q)
    assert checked >= 12


def test_mosaic_of_empty_images_and_of_full_images():
    # Wide images (32x64, not resized) meeting at (48, 32): the top 16 rows stay fill.
    empty = mixing.mosaic(mosaic_group([[32, 64]] * 4, [[]] * 4), (64, 64),
                          tf.constant([48, 32]), [10, 20, 30], 3)
    assert empty["boxes"].shape == (0, 4) and empty["classes"].shape == (0,)
    image = empty["image"].numpy()
    assert (image[:16] == [10, 20, 30]).all() and (image[16:] == BACKGROUND).all()
    sizes = [[64, 64]] * 4
    # Four boxes near each image's corner at the centre: all visible, the first 3 kept.
    corners = [[0.6, 0.6, 0.9, 0.9], [0.6, 0.1, 0.9, 0.4], [0.1, 0.6, 0.4, 0.9],
               [0.1, 0.1, 0.4, 0.4]]
    full = mixing.mosaic(mosaic_group(sizes, [[c] * 4 for c in corners]), (64, 64),
                         tf.constant([32, 32]), [0, 0, 0], 3)
    assert list(full["classes"].numpy()) == [1, 1, 1]
    padded = mixing.pad_instances(full, 5)
    assert int(padded["num_boxes"]) == 3 and list(padded["classes"].numpy()) == [1, 1, 1, -1, -1]
    for key in mixing.INSTANCE_KEYS:
        np.testing.assert_array_equal(mixing.unpad_instances(padded)[key], full[key])


def padded_example(box, class_id, image_scale, max_instances=3):
    """A padded example at the input size: a white box (1.0) on black, one instance."""
    image = bright_box_image(64, 64, box).astype(np.float32) / 255.0
    return mixing.pad_instances(
        {"image": tf.constant(image), "boxes": tf.constant([box], tf.float32),
         "classes": tf.constant([class_id]), "is_crowd": tf.constant([False]),
         "area": tf.constant([100.0]), "image_scale": tf.constant(image_scale),
         "image_id": tf.constant(class_id, tf.int64)}, max_instances)


def test_mixup_blends_images_and_keeps_the_boxes_of_both():
    first = padded_example([4, 4, 30, 40], 1, 2.0)
    second = padded_example([20, 10, 60, 50], 2, 4.0)
    mixed = mixing.mixup(first, second, tf.constant(0.3), 3)
    np.testing.assert_allclose(mixed["image"], 0.3 * first["image"] + 0.7 * second["image"],
                               rtol=1e-6)
    assert int(mixed["num_boxes"]) == 2 and list(mixed["classes"].numpy()) == [1, 2, -1]
    # The second image's area in the first's original pixels.
    np.testing.assert_allclose(mixed["area"][:2], [100.0, 100.0 * (2.0 / 4.0) ** 2])
    assert int(mixed["image_id"]) == 1 and float(mixed["image_scale"]) == 2.0
    # Each object is still where its box is: the pixels with its share of the blend
    # (0.3 or 0.7), or 1.0 where the two objects overlap.
    image = mixed["image"].numpy()[:, :, 0]
    for i, share in enumerate([0.3, 0.7]):
        object_pixels = np.isclose(image, share, atol=1e-4) | np.isclose(image, 1.0, atol=1e-4)
        assert iou(pixel_box(object_pixels), mixed["boxes"][i].numpy()) >= 0.99
    # Instances beyond max_instances are cut, the first image's first.
    three = mixing.mixup(mixed, mixed, tf.constant(0.5), 3)
    assert list(three["classes"].numpy()) == [1, 2, 1]


def test_beta_sample_matches_the_beta_distribution():
    for alpha, beta in [(32.0, 32.0), (2.0, 5.0)]:
        draws = mixing.beta_sample(tf.constant([3, 4], tf.int64), alpha, beta, [4000]).numpy()
        mean = alpha / (alpha + beta)
        std = np.sqrt(alpha * beta / ((alpha + beta) ** 2 * (alpha + beta + 1)))
        assert abs(draws.mean() - mean) < 0.01 and abs(draws.std() - std) < 0.01
        assert 0 < draws.min() and draws.max() < 1


def test_grid_hole_mask_matches_the_grid_formula_unrotated():
    unit, hole, offset = 10.0, 4.0, (3.0, 7.0)
    mask = gridmask.grid_hole_mask(40, 60, unit, hole, 0.0, tf.constant(offset)).numpy()
    # Unrotated, the frame is the pixel centre relative to the image centre.
    y = np.arange(40)[:, None] + 0.5 - 20
    x = np.arange(60)[None, :] + 0.5 - 30
    expected = ((y - offset[0]) % unit < hole) & ((x - offset[1]) % unit < hole)
    np.testing.assert_array_equal(mask, expected)
    # A quarter turn maps the square grid onto a square grid of the same holes.
    turned = gridmask.grid_hole_mask(60, 60, unit, hole, np.pi / 2, tf.constant(offset)).numpy()
    assert abs(turned.mean() - (hole / unit) ** 2) < 0.02


def test_grid_mask_cuts_a_quarter_and_keeps_the_rest_and_the_objects():
    box = [30, 20, 110, 100]
    image = tf.constant(bright_box_image(128, 128, box).astype(np.float32) + 1.0)
    fractions = []
    for i in range(12):
        masked = gridmask.grid_mask(image, tf.constant([i, 1], tf.int64)).numpy()
        holes = masked == 0
        assert (holes == holes[:, :, :1]).all()  # Same holes in every channel.
        np.testing.assert_array_equal(masked[~holes], image.numpy()[~holes])
        fractions.append(holes.mean())
        # The object's remaining pixels still span its box (boxes are unchanged).
        assert iou(pixel_box(masked[:, :, 0] > 200), np.array(box)) >= 0.8
    # 1 - KEEP_RATIO^2 of the image, up to the grid's phase at the borders.
    assert abs(np.mean(fractions) - (1 - gridmask.KEEP_RATIO) ** 2) < 0.04
    assert len(set(np.round(fractions, 4))) > 6  # Each seed draws its own grid.
