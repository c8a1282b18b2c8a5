"""GridMask (Chen et al. 2020, "GridMask Data Augmentation"), as graph-mode TensorFlow ops.

A grid of square holes is cut from the (resized, normalised) training image: the grid's
unit d is drawn uniformly in UNIT_RANGE x the image's shorter side, each unit keeps a
band of KEEP_RATIO x d along each axis and loses a (1 - KEEP_RATIO) d square hole (so
1 - (1 - KEEP_RATIO)^2 = 75% of the image stays), the grid is shifted by a random offset
in [0, d) along each axis and rotated by a random angle in [0, 90) degrees about the image
centre (a square grid repeats every 90 degrees). Holes are set to 0, which after
normalisation is the mean colour, like the padding. Boxes are unchanged.

The mask is computed directly from each pixel's coordinates in the rotated grid's frame,
so it is exact at any angle and needs no rotated mask image larger than the input.
"""

import math

import tensorflow as tf

# The grid unit d, as fractions of the image's shorter side.
UNIT_RANGE = (0.1, 0.3)
# The side of the kept band in each unit, as a fraction of d: the hole's side is (1 - this) d.
KEEP_RATIO = 0.5


def grid_hole_mask(height, width, unit, hole, angle, offset) -> tf.Tensor:
    """bool [height, width]: True in the holes of a square grid.

    Pixel centres (y + 0.5, x + 0.5) are rotated by -angle about the image centre into
    the grid's frame (u along the grid's x axis, v along its y axis); a pixel is in a
    hole when (u - offset_x) mod unit < hole and (v - offset_y) mod unit < hole.

    Args:
      height, width: int32 scalars.
      unit: float32 scalar, the grid period d in pixels.
      hole: float32 scalar, the side of each square hole in pixels (< unit).
      angle: float32 scalar, the grid's rotation in radians.
      offset: float32 [2], the grid's (y, x) shift in pixels.
    """
    ys = tf.cast(tf.range(height), tf.float32) + 0.5 - tf.cast(height, tf.float32) / 2.0
    xs = tf.cast(tf.range(width), tf.float32) + 0.5 - tf.cast(width, tf.float32) / 2.0
    y, x = ys[:, None], xs[None, :]
    cos, sin = tf.cos(angle), tf.sin(angle)
    u = cos * x + sin * y
    v = cos * y - sin * x
    in_hole_u = tf.math.floormod(u - offset[1], unit) < hole
    in_hole_v = tf.math.floormod(v - offset[0], unit) < hole
    return tf.logical_and(in_hole_u, in_hole_v)


def grid_mask(image: tf.Tensor, seed: tf.Tensor, unit_range=UNIT_RANGE,
              keep_ratio: float = KEEP_RATIO) -> tf.Tensor:
    """Cuts a randomly placed, rotated grid of square holes from `image`.

    Args:
      image: [H, W, C] any dtype (H, W may be dynamic); holes become 0.
      seed: stateless seed pair: the unit, offset and angle are drawn from it.
      unit_range: (low, high) fractions of the shorter side for the grid unit d.
      keep_ratio: kept band per unit as a fraction of d; holes are (1 - keep_ratio) d wide.

    Returns:
      the image with the holes zeroed, same shape and dtype.
    """
    height, width = tf.shape(image)[0], tf.shape(image)[1]
    shorter = tf.cast(tf.minimum(height, width), tf.float32)
    unit_seed, offset_seed, angle_seed = tf.unstack(
        tf.random.experimental.stateless_split(seed, 3))
    unit = shorter * tf.random.stateless_uniform([], unit_seed, unit_range[0], unit_range[1])
    unit = tf.maximum(unit, 2.0)  # A hole at least one pixel wide even in tiny images.
    offset = tf.random.stateless_uniform([2], offset_seed) * unit
    angle = tf.random.stateless_uniform([], angle_seed, 0.0, math.pi / 2.0)
    holes = grid_hole_mask(height, width, unit, (1.0 - keep_ratio) * unit, angle, offset)
    return tf.where(holes[:, :, None], tf.zeros_like(image), image)
