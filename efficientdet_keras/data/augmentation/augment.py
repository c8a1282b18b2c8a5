"""Box-aware geometric augmentation and resizing, in graph mode.

Boxes come in normalised [ymin, xmin, ymax, xmax] and leave in pixels of the
network input. Randomness is stateless: each op takes a seed pair, so a fixed
seed gives the same augmentation on every run.
"""

from typing import Callable, Optional, Sequence, Tuple

import tensorflow as tf


def random_horizontal_flip(image: tf.Tensor, boxes: tf.Tensor, seed: tf.Tensor):
    """Mirrors the image and its normalised boxes with probability 0.5."""
    flip = tf.random.stateless_uniform([], seed) < 0.5

    def flipped():
        ymin, xmin, ymax, xmax = tf.unstack(boxes, axis=-1)
        return tf.image.flip_left_right(image), tf.stack([ymin, 1.0 - xmax, ymax, 1.0 - xmin], -1)

    return tf.cond(flip, flipped, lambda: (image, boxes))


def resize_crop_pad(image: tf.Tensor, boxes: tf.Tensor, target_size: Sequence[int],
                    scale_range: Tuple[float, float] = (1.0, 1.0), seed: tf.Tensor = None,
                    normalize: Optional[Callable[[tf.Tensor], tf.Tensor]] = None,
                    stretch: bool = False):
    """Scale jitter, random crop and padding to `target_size` (height, width).

    The image is resized, keeping its aspect ratio, so it fits a box of
    `target_size * s` with s drawn from `scale_range`; a random window of
    target_size is cut from it (when it is larger) and the rest is padded at
    the bottom and right. With scale_range (1, 1) this is the plain
    aspect-preserving resize-and-pad used for evaluation. With `stretch` the image
    is resized to exactly `target_size * s`, each axis on its own (config key
    resize_mode: stretch), so at s = 1 nothing is padded.

    Args:
      image: [H, W, 3] any real or integer dtype.
      boxes: [N, 4] normalised.
      seed: stateless seed pair; needed when scale_range is not (1, 1).
      normalize: applied to the image content before padding, so padding stays 0.

    Returns:
      image: float32 [target_h, target_w, 3], zeros where padded.
      boxes: float32 [N, 4] in output pixels, clipped to the output (may now be empty).
      image_scale: float32 scalar, original pixels per output pixel; with `stretch`
        float32 [2], that of the y and the x axis.
      valid_size: int32 [2], the (height, width) of real image content in the output.
    """
    target_h, target_w = float(target_size[0]), float(target_size[1])
    shape = tf.cast(tf.shape(image)[:2], tf.float32)
    if scale_range[0] == scale_range[1]:
        scale_factor = tf.constant(float(scale_range[0]))
        crop_fraction = tf.zeros([2])
    else:
        seeds = tf.random.experimental.stateless_split(seed, 2)
        scale_factor = tf.random.stateless_uniform([], seeds[0], scale_range[0], scale_range[1])
        crop_fraction = tf.random.stateless_uniform([2], seeds[1])
    scale = tf.stack([target_h, target_w]) * scale_factor / shape
    if not stretch:
        scale = tf.reduce_min(scale)
    scaled_size = tf.maximum(tf.round(shape * scale), 1.0)
    offset = tf.floor(tf.maximum(scaled_size - [target_h, target_w], 0.0) * crop_fraction)

    resized = tf.image.resize(tf.cast(image, tf.float32), tf.cast(scaled_size, tf.int32))
    offset_int = tf.cast(offset, tf.int32)
    window = tf.cast(tf.minimum(scaled_size - offset, [target_h, target_w]), tf.int32)
    cropped = resized[offset_int[0]:offset_int[0] + window[0], offset_int[1]:offset_int[1] + window[1]]
    if normalize is not None:
        cropped = normalize(cropped)
    padded = tf.image.pad_to_bounding_box(cropped, 0, 0, int(target_size[0]), int(target_size[1]))

    pixel_boxes = boxes * tf.concat([scaled_size, scaled_size], 0) - tf.concat([offset, offset], 0)
    pixel_boxes = tf.clip_by_value(pixel_boxes, 0.0,
                                   tf.cast(tf.concat([window, window], 0), tf.float32))
    if stretch:
        return padded, pixel_boxes, shape / scaled_size, window
    # scale_factor rounding makes the true scale per axis slightly different; use the y axis.
    image_scale = shape[0] / scaled_size[0]
    return padded, pixel_boxes, image_scale, window


def non_empty_boxes(boxes: tf.Tensor) -> tf.Tensor:
    """bool [N]: boxes that still have area (after a crop)."""
    return tf.logical_and(boxes[:, 2] > boxes[:, 0], boxes[:, 3] > boxes[:, 1])
