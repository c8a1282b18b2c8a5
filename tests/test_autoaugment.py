"""AutoAugment v0-v3 and RandAugment: boxes follow their objects, colour ops match PIL,
ops inside boxes leave the rest alone, shapes, seeds and graph mode."""

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image, ImageEnhance, ImageOps

from efficientdet_keras.data.augmentation import autoaugment, image_ops

pytestmark = pytest.mark.quick  # All of this file is in the inner-loop set.

HEIGHT, WIDTH = 160, 192  # not square, so a height/width swap shows
# One box-shaped object per channel (pixels [ymin, xmin, ymax, xmax]), so colour-free geometry
# can be followed channel by channel.
OBJECTS = np.array([[20, 24, 64, 84], [90, 100, 140, 170], [30, 120, 70, 160]], np.float32)
OBJECT_BOXES = (OBJECTS / [HEIGHT, WIDTH, HEIGHT, WIDTH]).astype(np.float32)
# Thresholds the tests hold: one moving op gives a box within IoU 0.85 of the moved object's
# bounding box, and so do v0 and v1 (one moving op per sub-policy). Policies that can rotate
# twice (v2, v3, RandAugment with 2 layers) keep IoU 0.3: the box of a rotated box is looser
# than the rotated object's box (a box annotation cannot say where in it the object was). Every
# policy keeps at least 98% of the object's pixels inside the returned box.
SINGLE_OP_IOU = 0.85
POLICY_IOU = {"v0": 0.85, "v1": 0.85, "v2": 0.3, "v3": 0.3, "randaug": 0.3}
POLICY_INSIDE = 0.98
SPEC = [tf.TensorSpec([None, None, 3], tf.uint8), tf.TensorSpec([None, 4], tf.float32),
        tf.TensorSpec([2], tf.int32)]


def object_image():
    """uint8 [HEIGHT, WIDTH, 3]: object c is 255 in channel c, the rest 0."""
    image = np.zeros([HEIGHT, WIDTH, 3], np.uint8)
    for channel, (ymin, xmin, ymax, xmax) in enumerate(OBJECTS.astype(int)):
        image[ymin:ymax, xmin:xmax, channel] = 255
    return image


def noise_image(seed=0, height=HEIGHT, width=WIDTH):
    return np.random.default_rng(seed).integers(0, 256, [height, width, 3]).astype(np.uint8)


def object_masks(image):
    """bool [3, H, W]: pixels of each object (255 moved; the grey fill is 128)."""
    return np.moveaxis(np.asarray(image) > 191, -1, 0)


def mask_box(mask):
    """Normalised bounding box of a bool [H, W] mask, or None when it is empty."""
    rows, cols = np.nonzero(mask)
    if rows.size == 0:
        return None
    height, width = mask.shape
    return np.array([rows.min() / height, cols.min() / width,
                     (rows.max() + 1) / height, (cols.max() + 1) / width])


def iou(a, b):
    inter = (max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
             * max(0.0, min(a[3], b[3]) - max(a[1], b[1])))
    area = lambda box: (box[2] - box[0]) * (box[3] - box[1])  # noqa: E731
    return inter / (area(a) + area(b) - inter)


def fraction_inside(mask, box):
    """Share of the mask's pixels whose centres lie in the normalised box (one pixel slack)."""
    rows, cols = np.nonzero(mask)
    height, width = mask.shape
    inside = ((rows + 0.5 >= box[0] * height - 1) & (rows + 0.5 <= box[2] * height + 1)
              & (cols + 0.5 >= box[1] * width - 1) & (cols + 0.5 <= box[3] * width + 1))
    return inside.mean()


def check_boxes_follow_objects(image, boxes, min_iou, min_inside=None):
    """Every returned box is the bounding box of its object's pixels (within min_iou); an
    object pushed out of the image leaves a box with (almost) no area."""
    for mask, box in zip(object_masks(image), np.asarray(boxes)):
        found = mask_box(mask)
        if found is None or mask.sum() < 20:  # gone or a sliver at the border
            assert (box[2] - box[0]) * (box[3] - box[1]) < 0.01, box
            continue
        assert iou(found, box) >= min_iou, (found, box)
        if min_inside is not None:
            assert fraction_inside(mask, box) >= min_inside, (found, box)


# ------------------------------------------------------------------- moving ops, both signs

@pytest.mark.parametrize("name, matrix", [
    ("rotate +30", lambda: image_ops.rotation_matrix(30.0, HEIGHT, WIDTH)),
    ("rotate -30", lambda: image_ops.rotation_matrix(-30.0, HEIGHT, WIDTH)),
    ("shear_x +0.3", lambda: image_ops.shear_x_matrix(0.3)),
    ("shear_x -0.3", lambda: image_ops.shear_x_matrix(-0.3)),
    ("shear_y +0.3", lambda: image_ops.shear_y_matrix(0.3)),
    ("shear_y -0.3", lambda: image_ops.shear_y_matrix(-0.3)),
    ("translate", lambda: image_ops.translation_matrix(-37.0, 51.0)),
])
def test_affine_transforms_move_boxes_with_their_objects(name, matrix):
    image, boxes = image_ops.transform_with_boxes(tf.constant(object_image()),
                                                  tf.constant(OBJECT_BOXES), matrix())
    check_boxes_follow_objects(image.numpy(), boxes.numpy(), SINGLE_OP_IOU)
    assert not np.allclose(boxes.numpy(), OBJECT_BOXES, atol=0.02), "nothing moved"


def test_rotate_turns_counter_clockwise_and_fills_grey():
    image = np.zeros([40, 40, 3], np.uint8)
    image[18:22, 30:38] = 255  # a bar right of the centre
    rotated = image_ops.rotate(tf.constant(image), 90.0).numpy()
    assert rotated[2:10, 18:22].min() > 200  # now above the centre
    assert rotated[18:22, 30:38].max() < 60
    sheared = image_ops.shear_x(tf.constant(image), 0.5).numpy()
    assert (sheared[39, :15] == 128).all()  # uncovered pixels are grey


@pytest.mark.parametrize("name", sorted(autoaugment.MOVING_OPS))
def test_moving_ops_keep_boxes_on_objects(name):
    for seed in range(3):
        image, boxes = autoaugment.apply_op(name, 1.0, 10, tf.constant(object_image()),
                                            tf.constant(OBJECT_BOXES), tf.constant([seed, 7]))
        check_boxes_follow_objects(image.numpy(), boxes.numpy(), SINGLE_OP_IOU)


def test_levels_map_to_the_published_arguments():
    """Level 4 translation: 100 px at 640 px (scaled with the image); level 10 rotation: 30
    degrees; level 10 shear: 0.3."""
    for width in (640, 320):
        box = tf.constant([[0.25, 0.4, 0.75, 0.6]])
        moved = autoaugment.apply_op("TranslateX_BBox", 1.0, 4, tf.zeros([64, width, 3], tf.uint8),
                                     box, tf.constant([1, 1]))[1].numpy()[0]
        np.testing.assert_allclose(abs(moved[1] - 0.4) * width, 100 * width / 640, atol=1e-3)
    square = tf.constant([[0.4, 0.4, 0.6, 0.6]])  # 40 px, centred in 200 x 200
    rotated = autoaugment.apply_op("Rotate_BBox", 1.0, 10, tf.zeros([200, 200, 3], tf.uint8),
                                   square, tf.constant([1, 1]))[1].numpy()[0]
    radians = np.deg2rad(30)
    np.testing.assert_allclose((rotated[2] - rotated[0]) * 200,
                               40 * (np.cos(radians) + np.sin(radians)), atol=1e-3)
    sheared = autoaugment.apply_op("ShearX_BBox", 1.0, 10, tf.zeros([200, 200, 3], tf.uint8),
                                   square, tf.constant([1, 1]))[1].numpy()[0]
    np.testing.assert_allclose((sheared[3] - sheared[1]) * 200, 40 + 0.3 * 40, atol=1e-3)


# ----------------------------------------------------------------- colour and box-only ops

@pytest.mark.parametrize("name", sorted(set(autoaugment.OPS) - autoaugment.MOVING_OPS))
def test_other_ops_leave_boxes_alone(name):
    image = noise_image() // 2 + 40  # a narrow range, so autocontrast and equalize act
    # Probability 3: always, and for the ops inside boxes 3 / 3 = every box.
    out, boxes = autoaugment.apply_op(name, 3.0, 6, tf.constant(image),
                                      tf.constant(OBJECT_BOXES), tf.constant([1, 2]))
    np.testing.assert_array_equal(boxes.numpy(), OBJECT_BOXES)
    assert out.shape == image.shape and out.dtype == tf.uint8
    if name in autoaugment.PER_BOX_OPS:
        outside = np.ones([HEIGHT, WIDTH], bool)
        for ymin, xmin, ymax, xmax in OBJECTS.astype(int):
            outside[ymin:ymax, xmin:xmax] = False
        np.testing.assert_array_equal(out.numpy()[outside], image[outside])
    assert not np.array_equal(out.numpy(), image), "%s changed nothing" % name


def test_ops_inside_boxes_pick_each_box_with_a_third_of_the_probability():
    # 100 separate 8x8 boxes on noise; probability 0.9 -> each box flipped with 0.3.
    image = noise_image(3, 160, 160)
    corners = np.array([(16 * i, 16 * j) for i in range(10) for j in range(10)], np.float32)
    boxes = np.concatenate([corners, corners + 8], 1) / 160.0
    out = autoaugment.apply_op("Flip_Only_BBoxes", 0.9, 0, tf.constant(image),
                               tf.constant(boxes), tf.constant([5, 5]))[0].numpy()
    changed = [not np.array_equal(out[y:y + 8, x:x + 8], image[y:y + 8, x:x + 8])
               for y, x in corners.astype(int)]
    for (y, x), flipped in zip(corners.astype(int), changed):
        if flipped:
            np.testing.assert_array_equal(out[y:y + 8, x:x + 8], image[y:y + 8, x:x + 8][:, ::-1])
    assert 15 <= sum(changed) <= 45, sum(changed)


def test_colour_ops_hand_computed_values():
    values = tf.constant([[[183, 0, 255], [200, 100, 127]]], tf.uint8)
    np.testing.assert_array_equal(image_ops.posterize(values, 2).numpy(),
                                  [[[128, 0, 192], [192, 64, 64]]])
    np.testing.assert_array_equal(image_ops.solarize(values, 128).numpy(),
                                  [[[72, 0, 0], [55, 100, 127]]])
    np.testing.assert_array_equal(image_ops.solarize_add(values, 110).numpy(),
                                  [[[183, 110, 255], [200, 210, 237]]])
    # One channel spanning [50, 150]: 50 -> 0, 100 -> floor(50 * 2.55), 150 -> 255; the
    # flat channels stay as they are.
    stretch = tf.constant([[[50, 7, 0], [100, 7, 0], [150, 7, 0]]], tf.uint8)
    np.testing.assert_array_equal(image_ops.autocontrast(stretch).numpy()[0, :, 0], [0, 127, 255])
    np.testing.assert_array_equal(image_ops.autocontrast(stretch).numpy()[0, :, 1:],
                                  [[7, 0]] * 3)
    # Equalize: 256 zeros and 256 hundreds: step (512 - 256) // 255 = 1, so 100 -> 256 -> 255.
    halves = np.zeros([16, 32, 3], np.uint8)
    halves[:, 16:] = 100
    np.testing.assert_array_equal(np.unique(image_ops.equalize(tf.constant(halves)).numpy()),
                                  [0, 255])


def test_colour_ops_match_pil():
    image = noise_image(4, 24, 20) // 2 + 40  # a narrow range, so equalize and autocontrast act
    pil = Image.fromarray(image)
    checks = [
        (image_ops.equalize(image), ImageOps.equalize(pil), 0),
        (image_ops.autocontrast(image), ImageOps.autocontrast(pil), 1),
        (image_ops.posterize(image, 3), ImageOps.posterize(pil, 3), 0),
        (image_ops.solarize(image, 100), ImageOps.solarize(pil, 100), 0),
        (image_ops.color(image, 1.6), ImageEnhance.Color(pil).enhance(1.6), 2),
        (image_ops.contrast(image, 0.4), ImageEnhance.Contrast(pil).enhance(0.4), 2),
        (image_ops.brightness(image, 1.3), ImageEnhance.Brightness(pil).enhance(1.3), 1),
        (image_ops.sharpness(image, 1.9), ImageEnhance.Sharpness(pil).enhance(1.9), 2),
    ]
    for ours, theirs, tolerance in checks:
        difference = np.abs(ours.numpy().astype(int) - np.asarray(theirs).astype(int))
        assert difference.max() <= tolerance


def test_cutout_fills_one_grey_square():
    image = np.zeros([64, 64, 3], np.uint8)
    grey = image_ops.cutout(tf.constant(image), 5, tf.constant([3, 4])).numpy()[:, :, 0] == 128
    box = mask_box(grey)
    assert grey.sum() == (box[2] - box[0]) * 64 * (box[3] - box[1]) * 64  # one rectangle
    assert (box[2] - box[0]) * 64 <= 10 and (box[3] - box[1]) * 64 <= 10 and grey.sum() >= 25


# --------------------------------------------------------------------------- the policies

POLICY_NAMES = ["v0", "v1", "v2", "v3", "randaug"]


def distort(policy):
    """A traced distort function for a policy name ('randaug': 2 layers at magnitude 10)."""
    if policy == "randaug":
        function = lambda image, boxes, seed: autoaugment.distort_image_with_randaugment(  # noqa
            image, boxes, 2, 10.0, seed)
    else:
        function = lambda image, boxes, seed: autoaugment.distort_image_with_autoaugment(  # noqa
            image, boxes, policy, seed)
    function = tf.function(function, input_signature=SPEC)
    function.get_concrete_function()  # traced now, with the ops as they are now
    return function


@pytest.fixture(scope="module")
def policies():
    return {policy: distort(policy) for policy in POLICY_NAMES}


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_policies_keep_boxes_on_objects(policy, policies, monkeypatch):
    """Colour ops are made no-ops, so the object channels survive; the draws stay the same,
    so the boxes must equal those of the real policy."""
    for name in set(autoaugment.OPS) - autoaugment.MOVING_OPS:
        monkeypatch.setitem(autoaugment.OPS, name, lambda image, boxes, *args: (image, boxes))
    geometry_only = distort(policy)
    image, boxes = tf.constant(object_image()), tf.constant(OBJECT_BOXES)
    moved = 0
    for seed in range(40):
        out, out_boxes = geometry_only(image, boxes, tf.constant([seed, 0]))
        check_boxes_follow_objects(out.numpy(), out_boxes.numpy(), POLICY_IOU[policy],
                                   POLICY_INSIDE)
        real_boxes = policies[policy](image, boxes, tf.constant([seed, 0]))[1]
        np.testing.assert_allclose(out_boxes.numpy(), real_boxes.numpy(), atol=1e-6)
        moved += not np.allclose(out_boxes.numpy(), OBJECT_BOXES)
    assert moved >= 5, "the boxes moved in only %d of 40 draws" % moved


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_policies_shapes_seeds_and_box_counts(policy, policies):
    run = policies[policy]
    image = tf.constant(noise_image(1))
    rng = np.random.default_rng(2)
    low = rng.uniform(0.0, 0.8, [100, 2])
    many = tf.constant(np.concatenate([low, low + rng.uniform(0.05, 0.2, [100, 2])], 1),
                       tf.float32)
    for boxes in [tf.zeros([0, 4]), many]:
        out, out_boxes = run(image, boxes, tf.constant([9, 9]))
        assert out.shape == image.shape and out.dtype == tf.uint8
        assert out_boxes.shape == boxes.shape
        assert (out_boxes.numpy() >= 0).all() and (out_boxes.numpy() <= 1).all()
    first = run(image, many, tf.constant([11, 3]))
    again = run(image, many, tf.constant([11, 3]))
    np.testing.assert_array_equal(first[0].numpy(), again[0].numpy())
    np.testing.assert_array_equal(first[1].numpy(), again[1].numpy())
    others = [run(image, many, tf.constant([seed, 3]))[0].numpy() for seed in range(5)]
    assert any(not np.array_equal(other, first[0].numpy()) for other in others)


def test_policies_run_inside_dataset_map(policies):
    """Graph mode inside tf.data, with the same results as outside for the same seeds."""
    images = np.stack([object_image(), noise_image(5)])
    boxes = np.stack([OBJECT_BOXES, OBJECT_BOXES[::-1]])
    seeds = np.array([[1, 2], [3, 4]], np.int32)
    dataset = tf.data.Dataset.from_tensor_slices((images, boxes, seeds))

    def augment(image, boxes, seed):
        image, boxes = policies["v1"](image, boxes, seed)
        return autoaugment.distort_image_with_randaugment(image, boxes, 1, 15.0, seed + 1)

    results = list(dataset.map(augment, num_parallel_calls=2).as_numpy_iterator())
    for (image, box), image_in, boxes_in, seed in zip(results, images, boxes, seeds):
        expected = augment(tf.constant(image_in), tf.constant(boxes_in), tf.constant(seed))
        np.testing.assert_array_equal(image, expected[0].numpy())
        np.testing.assert_allclose(box, expected[1].numpy(), atol=1e-6)


def test_bad_arguments_name_the_key():
    image, boxes = tf.zeros([8, 8, 3], tf.uint8), tf.zeros([0, 4])
    with pytest.raises(ValueError, match="autoaugment_policy"):
        autoaugment.distort_image_with_autoaugment(image, boxes, "v9", [1, 2])
    with pytest.raises(ValueError, match="randaugment_magnitude"):
        autoaugment.distort_image_with_randaugment(image, boxes, 1, 31.0, [1, 2])
    with pytest.raises(ValueError, match="randaugment_num_layers"):
        autoaugment.distort_image_with_randaugment(image, boxes, 0, 5.0, [1, 2])
    with pytest.raises(ValueError, match="uint8"):
        autoaugment.distort_image_with_autoaugment(tf.zeros([8, 8, 3]), boxes, "v0", [1, 2])
