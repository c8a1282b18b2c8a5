"""Image operations of detection AutoAugment and RandAugment, with their box transforms.

Plain TensorFlow ops (no tensorflow-addons), graph-mode safe, for images of any size:
- colour ops on uint8 [H, W, 3] images: autocontrast, equalize, posterize, solarize,
  solarize_add, color, contrast, brightness, sharpness, cutout (PIL's definitions);
- affine ops (rotate, shear, translate) on uint8 or float [H, W, C] images, built on
  tf.raw_ops.ImageProjectiveTransformV3 (the op keras preprocessing layers use), with
  `transform_boxes` moving normalised boxes the same way (the new box is the bounding box of
  the four transformed corners, clipped to the image);
- `apply_inside_boxes`: runs an op on the content of each box alone, each box with its own
  probability (the "_Only_BBoxes" ops), and `box_cutout`.

Coordinates: affine matrices are 3x3 and act on continuous pixel coordinates (x, y, 1), x to the
right and y down, pixel (i, j) covering [j, j + 1) x [i, i + 1); boxes are normalised
[ymin, xmin, ymax, xmax]. Randomness is stateless: functions that draw take a seed pair.
"""

import math

import tensorflow as tf

FILL_VALUE = 128  # grey, for pixels an op uncovers (as the reference AutoAugment did)


# ---------------------------------------------------------------- colour ops (uint8 [H, W, 3])

def blend(image1: tf.Tensor, image2: tf.Tensor, factor) -> tf.Tensor:
    """uint8 image1 + factor * (image2 - image1), clipped; factor 0 gives image1, 1 image2,
    above 1 extrapolates (PIL's ImageEnhance)."""
    image1 = tf.cast(image1, tf.float32)
    blended = image1 + factor * (tf.cast(image2, tf.float32) - image1)
    return tf.cast(tf.clip_by_value(tf.round(blended), 0.0, 255.0), tf.uint8)


def color(image: tf.Tensor, factor) -> tf.Tensor:
    """Saturation: blends with the grey version (PIL ImageEnhance.Color)."""
    grey = tf.image.grayscale_to_rgb(tf.image.rgb_to_grayscale(image))
    return blend(grey, image, factor)


def contrast(image: tf.Tensor, factor) -> tf.Tensor:
    """Blends with a flat image at the mean grey level (PIL ImageEnhance.Contrast)."""
    mean = tf.round(tf.reduce_mean(tf.cast(tf.image.rgb_to_grayscale(image), tf.float32)))
    return blend(tf.fill(tf.shape(image), mean), image, factor)


def brightness(image: tf.Tensor, factor) -> tf.Tensor:
    """Blends with black (PIL ImageEnhance.Brightness)."""
    return blend(tf.zeros_like(image), image, factor)


def sharpness(image: tf.Tensor, factor) -> tf.Tensor:
    """Blends with a 3x3 smoothed version, border pixels kept (PIL ImageEnhance.Sharpness)."""
    kernel = tf.constant([[1.0, 1.0, 1.0], [1.0, 5.0, 1.0], [1.0, 1.0, 1.0]]) / 13.0
    kernel = tf.tile(kernel[:, :, None, None], [1, 1, 3, 1])
    smoothed = tf.nn.depthwise_conv2d(tf.cast(image, tf.float32)[None], kernel,
                                      strides=[1, 1, 1, 1], padding="SAME")[0]
    shape = tf.shape(image)
    interior = _window_mask(shape[0], shape[1], 1, 1, shape[0] - 1, shape[1] - 1)
    smoothed = tf.where(interior, tf.round(smoothed), tf.cast(image, tf.float32))
    return blend(smoothed, image, factor)


def posterize(image: tf.Tensor, bits: int) -> tf.Tensor:
    """Keeps the `bits` high bits of every value."""
    shift = tf.cast(8 - bits, image.dtype)
    return tf.bitwise.left_shift(tf.bitwise.right_shift(image, shift), shift)


def solarize(image: tf.Tensor, threshold) -> tf.Tensor:
    """Inverts values at or above `threshold` (256 or more: no change)."""
    return tf.where(tf.cast(image, tf.int32) < tf.cast(threshold, tf.int32), image, 255 - image)


def solarize_add(image: tf.Tensor, addition, threshold=128) -> tf.Tensor:
    """Adds `addition` to values below `threshold`, clipped to [0, 255]."""
    values = tf.cast(image, tf.int32)
    added = tf.cast(tf.clip_by_value(values + tf.cast(addition, tf.int32), 0, 255), tf.uint8)
    return tf.where(values < threshold, added, image)


def autocontrast(image: tf.Tensor) -> tf.Tensor:
    """Stretches each channel so its lowest value becomes 0 and its highest 255; a flat
    channel is left as it is (PIL ImageOps.autocontrast)."""
    values = tf.cast(image, tf.float32)
    low = tf.reduce_min(values, axis=[0, 1])
    high = tf.reduce_max(values, axis=[0, 1])
    scale = 255.0 / tf.maximum(high - low, 1.0)
    stretched = tf.clip_by_value(tf.floor((values - low) * scale), 0.0, 255.0)
    return tf.cast(tf.where(high > low, stretched, values), tf.uint8)


def equalize(image: tf.Tensor) -> tf.Tensor:
    """Histogram equalisation per channel (PIL ImageOps.equalize). uint8 [H, W, C], H*W > 0."""
    channels = tf.shape(image)[2]
    # One histogram of (channel, value) pairs: value + 256 * channel, no transposes.
    keys = tf.cast(image, tf.int32) + 256 * tf.range(channels)
    histograms = tf.reshape(tf.math.bincount(keys, minlength=256 * channels,
                                             maxlength=256 * channels), [channels, 256])
    highest = 255 - tf.argmax(tf.cast(tf.reverse(histograms, [1]) > 0, tf.int32), axis=1,
                              output_type=tf.int32)
    last_used = tf.gather(histograms, highest, batch_dims=1)
    steps = ((tf.reduce_sum(histograms, axis=1) - last_used) // 255)[:, None]
    luts = (tf.cumsum(histograms, axis=1) + steps // 2) // tf.maximum(steps, 1)
    luts = tf.clip_by_value(tf.pad(luts[:, :-1], [[0, 0], [1, 0]]), 0, 255)
    # step 0: (almost) a single value, which PIL leaves alone.
    luts = tf.where(steps > 0, luts, tf.range(256)[None, :])
    return tf.gather(tf.cast(tf.reshape(luts, [-1]), tf.uint8), keys)


def _window_mask(height, width, top, left, bottom, right) -> tf.Tensor:
    """bool [height, width, 1]: True on rows [top, bottom) and columns [left, right)."""
    rows = tf.range(height)
    cols = tf.range(width)
    in_rows = tf.logical_and(rows >= top, rows < bottom)
    in_cols = tf.logical_and(cols >= left, cols < right)
    return tf.logical_and(in_rows[:, None], in_cols[None, :])[:, :, None]


def random_pixel(seed: tf.Tensor, low: tf.Tensor, high: tf.Tensor) -> tf.Tensor:
    """int32 [2]: a (row, column) drawn uniformly from [low, high) (int32 [2] each; an empty
    range gives low)."""
    extent = tf.cast(tf.maximum(high - low, 1), tf.float32)
    offset = tf.floor(tf.random.stateless_uniform([2], seed) * extent)
    return low + tf.minimum(tf.cast(offset, tf.int32), tf.cast(extent, tf.int32) - 1)


def cutout(image: tf.Tensor, half_size, seed: tf.Tensor, fill_value=FILL_VALUE) -> tf.Tensor:
    """Fills a (2 * half_size)-pixel square, centred on a uniformly drawn pixel, with fill_value."""
    shape = tf.shape(image)
    center = random_pixel(seed, tf.zeros([2], tf.int32), shape[:2])
    half_size = tf.cast(half_size, tf.int32)
    mask = _window_mask(shape[0], shape[1], center[0] - half_size, center[1] - half_size,
                        center[0] + half_size, center[1] + half_size)
    return tf.where(mask, tf.cast(fill_value, image.dtype), image)


# --------------------------------------------------------------- affine ops and their boxes

def rotation_matrix(degrees, height, width) -> tf.Tensor:
    """float32 [3, 3]: rotates content by `degrees` counter-clockwise (as seen) about the
    image centre."""
    radians = tf.cast(degrees, tf.float32) * (math.pi / 180.0)
    cos, sin = tf.cos(radians), tf.sin(radians)
    cy, cx = tf.cast(height, tf.float32) / 2.0, tf.cast(width, tf.float32) / 2.0
    # With y pointing down, (dx, dy) -> (cos dx + sin dy, -sin dx + cos dy) turns counter-clockwise.
    return tf.stack([[cos, sin, cx - cos * cx - sin * cy],
                     [-sin, cos, cy + sin * cx - cos * cy],
                     [0.0, 0.0, 1.0]])


def shear_x_matrix(level) -> tf.Tensor:
    """float32 [3, 3]: x' = x + level * y (about the top-left corner, as the reference)."""
    level = tf.cast(level, tf.float32)
    return tf.stack([[1.0, level, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])


def shear_y_matrix(level) -> tf.Tensor:
    """float32 [3, 3]: y' = y + level * x."""
    level = tf.cast(level, tf.float32)
    return tf.stack([[1.0, 0.0, 0.0], [level, 1.0, 0.0], [0.0, 0.0, 1.0]])


def translation_matrix(dx, dy) -> tf.Tensor:
    """float32 [3, 3]: moves content by (dx, dy) pixels."""
    dx, dy = tf.cast(dx, tf.float32), tf.cast(dy, tf.float32)
    return tf.stack([[1.0, 0.0, dx], [0.0, 1.0, dy], [0.0, 0.0, 1.0]])


def transform(image: tf.Tensor, forward: tf.Tensor, fill_value=FILL_VALUE,
              interpolation: str = "BILINEAR") -> tf.Tensor:
    """Applies the affine map `forward` (float32 [3, 3], input -> output continuous pixel
    coordinates) to image [H, W, C] (uint8 or float); uncovered pixels get fill_value."""
    # The op maps each output pixel index to the input position it samples: the inverse map,
    # conjugated by the half-pixel shift between indices and continuous coordinates.
    half = tf.constant([[1.0, 0.0, 0.5], [0.0, 1.0, 0.5], [0.0, 0.0, 1.0]])
    half_inverse = tf.constant([[1.0, 0.0, -0.5], [0.0, 1.0, -0.5], [0.0, 0.0, 1.0]])
    sampling = half_inverse @ tf.linalg.inv(forward) @ half
    transforms = tf.reshape(sampling, [9])[:8] / sampling[2, 2]
    output = tf.raw_ops.ImageProjectiveTransformV3(
        images=image[None], transforms=transforms[None], output_shape=tf.shape(image)[:2],
        fill_value=tf.cast(fill_value, tf.float32), interpolation=interpolation,
        fill_mode="CONSTANT")
    return output[0]


def transform_boxes(boxes: tf.Tensor, forward: tf.Tensor, height, width) -> tf.Tensor:
    """Boxes float32 [N, 4] normalised -> the bounding boxes of their four corners moved by
    `forward` (as in `transform`), normalised and clipped to [0, 1]; [N, 4]."""
    size = tf.cast(tf.stack([width, height]), tf.float32)
    ymin, xmin, ymax, xmax = tf.unstack(tf.cast(boxes, tf.float32), axis=-1)
    corners_x = tf.stack([xmin, xmax, xmin, xmax], -1) * size[0]
    corners_y = tf.stack([ymin, ymin, ymax, ymax], -1) * size[1]
    moved_x = forward[0, 0] * corners_x + forward[0, 1] * corners_y + forward[0, 2]
    moved_y = forward[1, 0] * corners_x + forward[1, 1] * corners_y + forward[1, 2]
    moved = tf.stack([tf.reduce_min(moved_y, -1) / size[1], tf.reduce_min(moved_x, -1) / size[0],
                      tf.reduce_max(moved_y, -1) / size[1], tf.reduce_max(moved_x, -1) / size[0]],
                     -1)
    return tf.clip_by_value(moved, 0.0, 1.0)


def transform_with_boxes(image: tf.Tensor, boxes: tf.Tensor, forward: tf.Tensor,
                         fill_value=FILL_VALUE):
    """`transform` of the image and `transform_boxes` of its boxes with the same map."""
    shape = tf.shape(image)
    return (transform(image, forward, fill_value),
            transform_boxes(boxes, forward, shape[0], shape[1]))


def rotate(image: tf.Tensor, degrees, fill_value=FILL_VALUE) -> tf.Tensor:
    """Rotates image [H, W, C] counter-clockwise by `degrees` about its centre."""
    shape = tf.shape(image)
    return transform(image, rotation_matrix(degrees, shape[0], shape[1]), fill_value)


def shear_x(image: tf.Tensor, level, fill_value=FILL_VALUE) -> tf.Tensor:
    return transform(image, shear_x_matrix(level), fill_value)


def translate(image: tf.Tensor, dx, dy, fill_value=FILL_VALUE) -> tf.Tensor:
    return transform(image, translation_matrix(dx, dy), fill_value)


# ------------------------------------------------------------------------ ops inside boxes

def box_pixel_windows(boxes: tf.Tensor, height, width) -> tf.Tensor:
    """int32 [N, 4] (top, left, bottom, right): the pixels each normalised box touches,
    rows [top, bottom) and columns [left, right), clipped to the image."""
    size = tf.cast(tf.stack([height, width, height, width]), tf.float32)
    pixels = tf.clip_by_value(tf.cast(boxes, tf.float32), 0.0, 1.0) * size
    low = tf.cast(tf.floor(pixels[:, :2]), tf.int32)
    high = tf.cast(tf.math.ceil(pixels[:, 2:]), tf.int32)
    return tf.concat([low, high], -1)


def apply_inside_boxes(image: tf.Tensor, boxes: tf.Tensor, probability, crop_op,
                       seed: tf.Tensor) -> tf.Tensor:
    """Replaces the content of each box, with probability `probability` per box, by
    crop_op(content uint8 [h, w, 3], seed) (same shape). Boxes are done one after another
    (overlaps see earlier results); the loop runs only over the chosen boxes."""
    shape = tf.shape(image)
    choice_seed, op_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    windows = box_pixel_windows(boxes, shape[0], shape[1])
    has_pixels = tf.logical_and(windows[:, 2] > windows[:, 0], windows[:, 3] > windows[:, 1])
    chosen = tf.random.stateless_uniform(tf.shape(boxes)[:1], choice_seed) < probability
    windows = tf.boolean_mask(windows, tf.logical_and(chosen, has_pixels))

    def one_box(index, image):
        top, left, bottom, right = tf.unstack(windows[index])
        crop = image[top:bottom, left:right]
        new_crop = crop_op(crop, tf.random.experimental.stateless_fold_in(op_seed, index))
        image = tf.raw_ops.TensorStridedSliceUpdate(
            input=image, begin=tf.stack([top, left, 0]), end=tf.stack([bottom, right, shape[2]]),
            strides=[1, 1, 1], value=new_crop)
        return index + 1, image

    _, image = tf.while_loop(lambda index, _: index < tf.shape(windows)[0], one_box,
                             [tf.constant(0), image])
    return image


def box_cutout(image: tf.Tensor, boxes: tf.Tensor, size_fraction, seed: tf.Tensor,
               fill_value=FILL_VALUE) -> tf.Tensor:
    """Cutout centred in one randomly chosen box: a window of `size_fraction` of that box's
    height and width, centred on a random pixel of the box. No boxes: no change."""
    shape = tf.shape(image)
    index_seed, center_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))

    def cut():
        index = tf.random.stateless_uniform([], index_seed, maxval=tf.shape(boxes)[0],
                                            dtype=tf.int32)
        top, left, bottom, right = tf.unstack(
            box_pixel_windows(boxes[index:index + 1], shape[0], shape[1])[0])
        center = random_pixel(center_seed, tf.stack([top, left]), tf.stack([bottom, right]))
        half = tf.cast(size_fraction * tf.cast(tf.stack([bottom - top, right - left]),
                                               tf.float32) / 2.0, tf.int32)
        mask = _window_mask(shape[0], shape[1], center[0] - half[0], center[1] - half[1],
                            center[0] + half[0], center[1] + half[1])
        return tf.where(mask, tf.cast(fill_value, image.dtype), image)

    return tf.cond(tf.shape(boxes)[0] > 0, cut, lambda: image)
