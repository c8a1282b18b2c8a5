"""AutoAugment detection policies v0-v3 and RandAugment, box-aware, in TensorFlow ops.

The policies are the sub-policy tables published with Zoph et al. 2019, "Learning Data
Augmentation Strategies for Object Detection": each call picks one sub-policy uniformly and
applies its ops in order, each with its probability, at its magnitude level (0-10). The image
operations are in data/augmentation/image_ops.py (no tensorflow-addons).

Level -> argument (as the reference code; "signed": the sign is drawn at random; pixel amounts
are for a 640-pixel image and scale with the image's longer side, so small images get the same
relative shifts):

  AutoContrast, Equalize, Flip_Only_BBoxes, Equalize_Only_BBoxes   no argument
  Posterize                         bits = int(level / 10 * 4)
  Solarize, Solarize_Only_BBoxes    threshold = int(level / 10 * 256)
  SolarizeAdd                       addition = int(level / 10 * 110), below threshold 128
  Color, Contrast, Brightness, Sharpness   factor = level / 10 * 1.8 + 0.1
  Cutout                            half size = level / 10 * 100 px
  BBox_Cutout                       size = level / 10 * 0.75 of one random box
  Cutout_Only_BBoxes                half size = level / 10 * 50 px
  Rotate_BBox, Rotate_Only_BBoxes   signed level / 10 * 30 degrees
  ShearX/Y_BBox, ShearX/Y_Only_BBoxes   signed level / 10 * 0.3
  TranslateX/Y_BBox                 signed level / 10 * 250 px
  TranslateX/Y_Only_BBoxes          signed level / 10 * 120 px

"_BBox" ops move the whole image and its boxes (new box: the bounding box of the moved corners,
clipped). "_Only_BBoxes" ops change only the content inside boxes, each box with a third of the
op's probability, and leave boxes and all other pixels alone. Uncovered pixels are grey (128).
"""

import functools

import tensorflow as tf

from efficientdet_keras.data.augmentation import image_ops

MAX_LEVEL = 10.0
# Pixel amounts of the reference hold for COCO-sized images; they scale with the longer side.
REFERENCE_IMAGE_SIZE = 640.0

POLICIES = {
    "v0": [
        [("TranslateX_BBox", 0.6, 4), ("Equalize", 0.8, 10)],
        [("TranslateY_Only_BBoxes", 0.2, 2), ("Cutout", 0.8, 8)],
        [("Sharpness", 0.0, 8), ("ShearX_BBox", 0.4, 0)],
        [("ShearY_BBox", 1.0, 2), ("TranslateY_Only_BBoxes", 0.6, 6)],
        [("Rotate_BBox", 0.6, 10), ("Color", 1.0, 6)],
    ],
    "v1": [
        [("TranslateX_BBox", 0.6, 4), ("Equalize", 0.8, 10)],
        [("TranslateY_Only_BBoxes", 0.2, 2), ("Cutout", 0.8, 8)],
        [("Sharpness", 0.0, 8), ("ShearX_BBox", 0.4, 0)],
        [("ShearY_BBox", 1.0, 2), ("TranslateY_Only_BBoxes", 0.6, 6)],
        [("Rotate_BBox", 0.6, 10), ("Color", 1.0, 6)],
        [("Color", 0.0, 0), ("ShearX_Only_BBoxes", 0.8, 4)],
        [("ShearY_Only_BBoxes", 0.8, 2), ("Flip_Only_BBoxes", 0.0, 10)],
        [("Equalize", 0.6, 10), ("TranslateX_BBox", 0.2, 2)],
        [("Color", 1.0, 10), ("TranslateY_Only_BBoxes", 0.4, 6)],
        [("Rotate_BBox", 0.8, 10), ("Contrast", 0.0, 10)],
        [("Cutout", 0.2, 2), ("Brightness", 0.8, 10)],
        [("Color", 1.0, 6), ("Equalize", 1.0, 2)],
        [("Cutout_Only_BBoxes", 0.4, 6), ("TranslateY_Only_BBoxes", 0.8, 2)],
        [("Color", 0.2, 8), ("Rotate_BBox", 0.8, 10)],
        [("Sharpness", 0.4, 4), ("TranslateY_Only_BBoxes", 0.0, 4)],
        [("Sharpness", 1.0, 4), ("SolarizeAdd", 0.4, 4)],
        [("Rotate_BBox", 1.0, 8), ("Sharpness", 0.2, 8)],
        [("ShearY_BBox", 0.6, 10), ("Equalize_Only_BBoxes", 0.6, 8)],
        [("ShearX_BBox", 0.2, 6), ("TranslateY_Only_BBoxes", 0.2, 10)],
        [("SolarizeAdd", 0.6, 8), ("Brightness", 0.8, 10)],
    ],
    "v2": [
        [("Color", 0.0, 6), ("Cutout", 0.6, 8), ("Sharpness", 0.4, 8)],
        [("Rotate_BBox", 0.4, 8), ("Sharpness", 0.4, 2), ("Rotate_BBox", 0.8, 10)],
        [("TranslateY_BBox", 1.0, 8), ("AutoContrast", 0.8, 2)],
        [("AutoContrast", 0.4, 6), ("ShearX_BBox", 0.8, 8), ("Brightness", 0.0, 10)],
        [("SolarizeAdd", 0.2, 6), ("Contrast", 0.0, 10), ("AutoContrast", 0.6, 0)],
        [("Cutout", 0.2, 0), ("Solarize", 0.8, 8), ("Color", 1.0, 4)],
        [("TranslateY_BBox", 0.0, 4), ("Equalize", 0.6, 8), ("Solarize", 0.0, 10)],
        [("TranslateY_BBox", 0.2, 2), ("ShearY_BBox", 0.8, 8), ("Rotate_BBox", 0.8, 8)],
        [("Cutout", 0.8, 8), ("Brightness", 0.8, 8), ("Cutout", 0.2, 2)],
        [("Color", 0.8, 4), ("TranslateY_BBox", 1.0, 6), ("Rotate_BBox", 0.6, 6)],
        [("Rotate_BBox", 0.6, 10), ("BBox_Cutout", 1.0, 4), ("Cutout", 0.2, 8)],
        [("Rotate_BBox", 0.0, 0), ("Equalize", 0.6, 6), ("ShearY_BBox", 0.6, 8)],
        [("Brightness", 0.8, 8), ("AutoContrast", 0.4, 2), ("Brightness", 0.2, 2)],
        [("TranslateY_BBox", 0.4, 8), ("Solarize", 0.4, 6), ("SolarizeAdd", 0.2, 10)],
        [("Contrast", 1.0, 10), ("SolarizeAdd", 0.2, 8), ("Equalize", 0.2, 4)],
    ],
    "v3": [
        [("Posterize", 0.8, 2), ("TranslateX_BBox", 1.0, 8)],
        [("BBox_Cutout", 0.2, 10), ("Sharpness", 1.0, 8)],
        [("Rotate_BBox", 0.6, 8), ("Rotate_BBox", 0.8, 10)],
        [("Equalize", 0.8, 10), ("AutoContrast", 0.2, 10)],
        [("SolarizeAdd", 0.2, 2), ("TranslateY_BBox", 0.2, 8)],
        [("Sharpness", 0.0, 2), ("Color", 0.4, 8)],
        [("Equalize", 1.0, 8), ("TranslateY_BBox", 1.0, 8)],
        [("Posterize", 0.6, 2), ("Rotate_BBox", 0.0, 10)],
        [("AutoContrast", 0.6, 0), ("Rotate_BBox", 1.0, 6)],
        [("Equalize", 0.0, 4), ("Cutout", 0.8, 10)],
        [("Brightness", 1.0, 2), ("TranslateY_BBox", 1.0, 6)],
        [("Contrast", 0.0, 2), ("ShearY_BBox", 0.8, 0)],
        [("AutoContrast", 0.8, 10), ("Contrast", 0.2, 10)],
        [("Rotate_BBox", 1.0, 10), ("Cutout", 1.0, 10)],
        [("SolarizeAdd", 0.8, 6), ("Equalize", 0.8, 8)],
    ],
}

# The RandAugment list for detection (as the older trainer): colour ops and whole-image box ops.
RANDAUGMENT_OPS = ("Equalize", "Solarize", "Color", "Cutout", "SolarizeAdd", "TranslateX_BBox",
                   "TranslateY_BBox", "ShearX_BBox", "ShearY_BBox", "Rotate_BBox")
# RandAugment applies each drawn op with a probability drawn from this range.
RANDAUGMENT_PROBABILITY_RANGE = (0.2, 0.8)


# ------------------------------------------------------------------ level -> argument

def _fraction(level):
    return level / MAX_LEVEL


def _whole(value) -> tf.Tensor:
    """int32, rounded towards zero (the reference's int())."""
    return tf.cast(value, tf.int32)


def _enhance_factor(level):
    return _fraction(level) * 1.8 + 0.1


def _pixels(image: tf.Tensor, level, pixels_at_640: float) -> tf.Tensor:
    """float32 scalar: level / 10 * pixels_at_640, scaled to the image's longer side."""
    longer_side = tf.cast(tf.reduce_max(tf.shape(image)[:2]), tf.float32)
    return _fraction(level) * pixels_at_640 * longer_side / REFERENCE_IMAGE_SIZE


def _signed(value, seed: tf.Tensor) -> tf.Tensor:
    """value or -value, with even odds."""
    negate = tf.random.stateless_uniform([], seed) < 0.5
    value = tf.cast(value, tf.float32)
    return tf.where(negate, -value, value)


# ------------------------------------------------------------------------------ the ops
# Every op: op(image uint8 [H, W, 3], boxes float32 [N, 4], level float32 scalar,
# box_probability, seed) -> (image, boxes). box_probability is used only by the ops inside boxes
# (PER_BOX_OPS).

def _colour_op(function):
    """An op from a function of the image alone (boxes pass through)."""
    return lambda image, boxes, level, box_probability, seed: (function(image, level, seed),
                                                                boxes)


def _moving_op(matrix_for, amount):
    """A whole-image affine op: matrix_for(image, signed amount) is the forward matrix, with
    amount(image, level) drawn with a random sign."""
    def op(image, boxes, level, box_probability, seed):
        matrix = matrix_for(image, _signed(amount(image, level), seed))
        return image_ops.transform_with_boxes(image, boxes, matrix)
    return op


def _inside_boxes_op(crop_op_for):
    """An op on each box's content; crop_op_for(image, level, seed) gives crop_op(crop, seed),
    its arguments drawn once per call (e.g. one rotation angle for all boxes of the image)."""
    def op(image, boxes, level, box_probability, seed):
        argument_seed, boxes_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
        crop_op = crop_op_for(image, level, argument_seed)
        return image_ops.apply_inside_boxes(image, boxes, box_probability, crop_op,
                                            boxes_seed), boxes
    return op


def _moving_inside_boxes_op(matrix_for, amount):
    """An affine op on each box's content, about the box (pixel amounts scale with the whole
    image, as the reference's fixed pixel amounts did)."""
    def crop_op_for(image, level, seed):
        signed_amount = _signed(amount(image, level), seed)
        return lambda crop, crop_seed: image_ops.transform(crop, matrix_for(crop, signed_amount))
    return _inside_boxes_op(crop_op_for)


def _degrees(image, level):
    return _fraction(level) * 30.0


def _shear(image, level):
    return _fraction(level) * 0.3


def _translation_pixels(pixels_at_640):
    return lambda image, level: _pixels(image, level, pixels_at_640)


def _rotation(image, degrees):
    shape = tf.shape(image)
    return image_ops.rotation_matrix(degrees, shape[0], shape[1])


def _shear_x(image, level):
    return image_ops.shear_x_matrix(level)


def _shear_y(image, level):
    return image_ops.shear_y_matrix(level)


def _translation_x(image, pixels):
    return image_ops.translation_matrix(pixels, 0.0)


def _translation_y(image, pixels):
    return image_ops.translation_matrix(0.0, pixels)


def _crop_op(function):
    """crop_op_for of an op whose argument does not depend on the draw: function(crop, level)."""
    return lambda image, level, seed: lambda crop, crop_seed: function(crop, level)


OPS = {
    "AutoContrast": _colour_op(lambda image, level, seed: image_ops.autocontrast(image)),
    "Equalize": _colour_op(lambda image, level, seed: image_ops.equalize(image)),
    "Posterize": _colour_op(
        lambda image, level, seed: image_ops.posterize(image, _whole(_fraction(level) * 4))),
    "Solarize": _colour_op(
        lambda image, level, seed: image_ops.solarize(image, _whole(_fraction(level) * 256))),
    "SolarizeAdd": _colour_op(
        lambda image, level, seed: image_ops.solarize_add(image, _whole(_fraction(level) * 110))),
    "Color": _colour_op(lambda image, level, seed: image_ops.color(image, _enhance_factor(level))),
    "Contrast": _colour_op(
        lambda image, level, seed: image_ops.contrast(image, _enhance_factor(level))),
    "Brightness": _colour_op(
        lambda image, level, seed: image_ops.brightness(image, _enhance_factor(level))),
    "Sharpness": _colour_op(
        lambda image, level, seed: image_ops.sharpness(image, _enhance_factor(level))),
    "Cutout": _colour_op(
        lambda image, level, seed: image_ops.cutout(image, _pixels(image, level, 100.0), seed)),
    "BBox_Cutout": lambda image, boxes, level, box_probability, seed: (
        image_ops.box_cutout(image, boxes, _fraction(level) * 0.75, seed), boxes),
    "Rotate_BBox": _moving_op(_rotation, _degrees),
    "ShearX_BBox": _moving_op(_shear_x, _shear),
    "ShearY_BBox": _moving_op(_shear_y, _shear),
    "TranslateX_BBox": _moving_op(_translation_x, _translation_pixels(250.0)),
    "TranslateY_BBox": _moving_op(_translation_y, _translation_pixels(250.0)),
    "Rotate_Only_BBoxes": _moving_inside_boxes_op(_rotation, _degrees),
    "ShearX_Only_BBoxes": _moving_inside_boxes_op(_shear_x, _shear),
    "ShearY_Only_BBoxes": _moving_inside_boxes_op(_shear_y, _shear),
    "TranslateX_Only_BBoxes": _moving_inside_boxes_op(_translation_x, _translation_pixels(120.0)),
    "TranslateY_Only_BBoxes": _moving_inside_boxes_op(_translation_y, _translation_pixels(120.0)),
    "Flip_Only_BBoxes": _inside_boxes_op(_crop_op(lambda crop, level: tf.reverse(crop, [1]))),
    "Solarize_Only_BBoxes": _inside_boxes_op(_crop_op(
        lambda crop, level: image_ops.solarize(crop, _whole(_fraction(level) * 256)))),
    "Equalize_Only_BBoxes": _inside_boxes_op(
        _crop_op(lambda crop, level: image_ops.equalize(crop))),
    "Cutout_Only_BBoxes": _inside_boxes_op(
        lambda image, level, seed: functools.partial(
            _cutout_crop, half_size=_pixels(image, level, 50.0))),
}
PER_BOX_OPS = frozenset(name for name in OPS if name.endswith("_Only_BBoxes"))
MOVING_OPS = frozenset(name for name in OPS if name.endswith("_BBox"))


def _cutout_crop(crop, crop_seed, half_size):
    return image_ops.cutout(crop, half_size, crop_seed)


def _apply_ops(image, boxes, names, op_indices, probabilities, levels, seed):
    """Applies ops names[op_indices[k]] for k = 0, 1, ..., each with probabilities[k] at
    levels[k] (float32 [K] each; index len(names) is no op). An op inside boxes always runs, with
    a third of its probability per box. Each name is built into the graph once, however many
    steps or sub-policies use it (a small graph traces and starts quickly)."""
    no_op = len(names)
    per_box = tf.constant([name in PER_BOX_OPS for name in names] + [False])

    def step(k, image, boxes):
        gate_seed, op_seed = tf.unstack(tf.random.experimental.stateless_split(
            tf.random.experimental.stateless_fold_in(seed, k), 2))
        index, probability, level = op_indices[k], probabilities[k], levels[k]
        run = tf.logical_or(tf.gather(per_box, index),
                            tf.random.stateless_uniform([], gate_seed) < probability)
        branches = [functools.partial(OPS[name], image, boxes, level, probability / 3.0, op_seed)
                    for name in names] + [lambda: (image, boxes)]
        image, boxes = tf.switch_case(tf.where(run, index, no_op), branches)
        return k + 1, image, boxes

    _, image, boxes = tf.while_loop(
        lambda k, image, boxes: k < tf.shape(op_indices)[0], step, [tf.constant(0), image, boxes],
        shape_invariants=[tf.TensorShape([]), tf.TensorShape([None, None, image.shape[-1]]),
                          tf.TensorShape([None, 4])])
    return image, boxes


def apply_op(name: str, probability, level, image: tf.Tensor, boxes: tf.Tensor,
             seed: tf.Tensor):
    """Applies OPS[name] at `level` (a number, 0-10 in the policies) with `probability` (a
    number; per box, a third of it, for the _Only_BBoxes ops, which always run) to image uint8
    [H, W, 3] and boxes [N, 4]. Returns (image, boxes)."""
    return _apply_ops(image, tf.cast(boxes, tf.float32), [name], tf.constant([0]),
                      tf.constant([probability], tf.float32), tf.constant([level], tf.float32),
                      seed)


def _policy_tables(sub_policies):
    """The op names a policy uses and its sub-policies as int32 op indices, float32
    probabilities and float32 levels, each [sub-policies, longest]; ops that never run
    (probability 0) and the padding are no-ops."""
    names = sorted({name for sub_policy in sub_policies for name, probability, _ in sub_policy
                    if probability > 0})
    longest = max(len(sub_policy) for sub_policy in sub_policies)
    rows = [[(names.index(name), probability, level) for name, probability, level in sub_policy
             if probability > 0] for sub_policy in sub_policies]
    rows = [row + [(len(names), 0.0, 0.0)] * (longest - len(row)) for row in rows]
    indices, probabilities, levels = zip(*[zip(*row) for row in rows])
    return (names, tf.constant(indices, tf.int32), tf.constant(probabilities, tf.float32),
            tf.constant(levels, tf.float32))


def _check_inputs(image: tf.Tensor, boxes: tf.Tensor):
    if image.dtype != tf.uint8:
        raise ValueError("autoaugment_policy: the image must be uint8 (decoded, before "
                         "normalisation), got %s" % image.dtype.name)
    return tf.cast(boxes, tf.float32)


def _finish(image: tf.Tensor, boxes: tf.Tensor, input_image: tf.Tensor, input_boxes: tf.Tensor):
    """Restores the static shapes the loop loses; boxes clipped to [0, 1]."""
    image = tf.ensure_shape(image, input_image.shape)
    boxes = tf.ensure_shape(tf.clip_by_value(boxes, 0.0, 1.0), input_boxes.shape)
    return image, boxes


def distort_image_with_autoaugment(image, boxes, policy: str, seed):
    """Applies one uniformly drawn sub-policy of detection AutoAugment `policy`.

    Args:
      image: uint8 [H, W, 3], any size (dynamic shape).
      boxes: float32 [N, 4] normalised [ymin, xmin, ymax, xmax]; N may be 0.
      policy: 'v0', 'v1', 'v2' or 'v3'.
      seed: int [2], stateless: the same seed gives the same result.

    Returns:
      (image uint8, same shape; boxes float32 [N, 4] normalised, clipped to [0, 1]; a box
      pushed out of the image becomes empty, and the pipeline drops empty boxes).
    """
    if policy not in POLICIES:
        raise ValueError("autoaugment_policy: %r is not one of %s"
                         % (policy, ", ".join(sorted(POLICIES))))
    input_image, input_boxes = image, _check_inputs(image, boxes)
    choice_seed, ops_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    names, indices, probabilities, levels = _policy_tables(POLICIES[policy])
    choice = tf.random.stateless_uniform([], choice_seed, maxval=indices.shape[0],
                                         dtype=tf.int32)
    image, boxes = _apply_ops(input_image, input_boxes, names, indices[choice],
                              probabilities[choice], levels[choice], ops_seed)
    return _finish(image, boxes, input_image, input_boxes)


def distort_image_with_randaugment(image, boxes, num_layers: int, magnitude: float, seed):
    """RandAugment for detection: `num_layers` ops, each drawn uniformly from RANDAUGMENT_OPS
    and applied at level `magnitude` with a probability drawn from [0.2, 0.8].

    `magnitude` is on the policies' level scale (10 is their largest level; the config allows up
    to 30, larger values extrapolate: 15 rotates by up to 45 degrees; Solarize from 10 up
    changes nothing). Arguments and returns as distort_image_with_autoaugment.
    """
    if int(num_layers) != num_layers or num_layers < 1:
        raise ValueError("randaugment_num_layers: must be a positive integer, got %r"
                         % (num_layers,))
    if not 0.0 <= float(magnitude) <= 30.0:
        raise ValueError("randaugment_magnitude: must be in [0, 30], got %r" % (magnitude,))
    input_image, input_boxes = image, _check_inputs(image, boxes)
    choice_seed, probability_seed, ops_seed = tf.unstack(
        tf.random.experimental.stateless_split(seed, 3))
    num_layers = int(num_layers)
    indices = tf.random.stateless_uniform([num_layers], choice_seed,
                                          maxval=len(RANDAUGMENT_OPS), dtype=tf.int32)
    probabilities = tf.random.stateless_uniform([num_layers], probability_seed,
                                                *RANDAUGMENT_PROBABILITY_RANGE)
    image, boxes = _apply_ops(input_image, input_boxes, RANDAUGMENT_OPS, indices, probabilities,
                              tf.fill([num_layers], float(magnitude)), ops_seed)
    return _finish(image, boxes, input_image, input_boxes)
