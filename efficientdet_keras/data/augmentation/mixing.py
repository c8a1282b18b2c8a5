"""Mosaic of four images and mixup of two, as graph-mode TensorFlow ops.

Mosaic (the idea of Ultralytics' YOLO trainers; written here from the description): a
canvas of the training size is split at a random centre into four quadrants; image q is
resized, keeping its aspect ratio, to fit the canvas, and placed with its corner at the
centre (image 0 ends at the centre from the top left, 1 from the top right, 2 from the
bottom left, 3 from the bottom right), so each shows the part of it nearest the centre
that fits its quadrant. Boxes are moved with their images and clipped to their quadrant;
a clipped box is dropped as a remnant when a side is under MIN_REMNANT_SIDE pixels or it
keeps under MIN_REMNANT_AREA_FRACTION of its area on the canvas before clipping. Areas
outside the four images take `fill_value` (the pipeline passes the mean colour, which
normalises to 0 like the padding).

Mixup: two training images at the input size are blended, weight * first + (1 - weight) *
second, with the weight drawn from Beta(MIXUP_BETA, MIXUP_BETA) (32, 32 as Ultralytics:
close to 0.5); the boxes and classes of both are kept, the first image's first.

Examples are dicts with "image", the instance fields INSTANCE_KEYS (boxes [N, 4], classes
[N], is_crowd [N], area [N]) and "image_id"; padded examples (fixed N, for batching and
tf.data state) also carry "num_boxes", the number of real instances at the front.
"""

from typing import Dict, Sequence

import tensorflow as tf

INSTANCE_KEYS = ("boxes", "classes", "is_crowd", "area")
# The mosaic centre's range, as fractions of the canvas height and width.
CENTRE_RANGE = (0.25, 0.75)
# A box clipped by its quadrant is dropped when a side is shorter than this (canvas pixels)...
MIN_REMNANT_SIDE = 2.0
# ... or when less than this fraction of its area (on the canvas, before clipping) is left.
MIN_REMNANT_AREA_FRACTION = 0.2
# Both parameters of the Beta distribution of the mixup weight.
MIXUP_BETA = 32.0
_PAD_VALUES = {"boxes": 0.0, "classes": -1, "is_crowd": False, "area": 0.0}


def pad_instances(example: Dict[str, tf.Tensor], max_instances: int) -> Dict[str, tf.Tensor]:
    """The example with its instances cut to the first `max_instances` and padded to exactly
    that many (boxes [max_instances, 4], classes -1 pads), and "num_boxes" (int32) added."""
    padded = dict(example)
    count = tf.minimum(tf.shape(example["classes"])[0], max_instances)
    for key in INSTANCE_KEYS:
        values = example[key][:count]
        inner = [[0, 0]] * (len(values.shape) - 1)
        values = tf.pad(values, [[0, max_instances - count]] + inner,
                        constant_values=_PAD_VALUES[key])
        padded[key] = tf.ensure_shape(values, [max_instances] + values.shape[1:].as_list())
    padded["num_boxes"] = count
    return padded


def unpad_instances(example: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
    """Inverse of pad_instances: the first num_boxes instances, without "num_boxes"."""
    unpadded = {key: value for key, value in example.items() if key != "num_boxes"}
    for key in INSTANCE_KEYS:
        unpadded[key] = example[key][:example["num_boxes"]]
    return unpadded


def mosaic_centre(canvas_size: Sequence[int], seed: tf.Tensor) -> tf.Tensor:
    """int32 [2]: a random (y, x) centre in CENTRE_RANGE of the canvas (at least 1 px in)."""
    canvas = tf.constant(canvas_size[:2], tf.float32)
    fraction = tf.random.stateless_uniform([2], seed, CENTRE_RANGE[0], CENTRE_RANGE[1])
    centre = tf.cast(tf.round(fraction * canvas), tf.int32)
    return tf.clip_by_value(centre, 1, tf.cast(canvas, tf.int32) - 1)


def mosaic(group: Dict[str, tf.Tensor], canvas_size: Sequence[int], centre: tf.Tensor,
           fill_value: Sequence[float], max_instances: int) -> Dict[str, tf.Tensor]:
    """One mosaic from four images.

    Args:
      group: four padded examples stacked: image uint8 [4, H, W, 3] (image q's real
        content in its top-left size[q]), size int32 [4, 2] (height, width), boxes [4, N, 4]
        normalised to each image, classes, is_crowd, area [4, N], num_boxes [4], image_id [4].
      canvas_size: (height, width) of the mosaic.
      centre: int32 [2], where the four images meet (see mosaic_centre).
      fill_value: [3] colour (0..255) where no image reaches.
      max_instances: at most this many boxes are kept (quadrant order).

    Returns:
      an example: image uint8 [height, width, 3], boxes [M, 4] normalised to the canvas,
      classes, is_crowd [M], area [M] (canvas pixels^2, after clipping), image_id of image 0.
    """
    height, width = int(canvas_size[0]), int(canvas_size[1])
    canvas = tf.zeros([height, width, 3])
    covered = tf.zeros([height, width, 1])
    instances = {key: [] for key in INSTANCE_KEYS}
    for quadrant in range(4):
        image = group["image"][quadrant][:group["size"][quadrant][0], :group["size"][quadrant][1]]
        placement = _placement(group["size"][quadrant], (height, width), centre, quadrant)
        layer, mask = _paint(image, placement, (height, width))
        canvas, covered = canvas + layer, covered + mask
        boxes, keep = _placed_boxes(group["boxes"][quadrant], group["num_boxes"][quadrant],
                                    placement)
        instances["boxes"].append(tf.boolean_mask(boxes, keep))
        instances["area"].append(tf.boolean_mask(_box_area(boxes), keep))
        for key in ("classes", "is_crowd"):
            instances[key].append(tf.boolean_mask(group[key][quadrant], keep))
    fill = tf.broadcast_to(tf.cast(fill_value, tf.float32), [3])
    canvas = canvas + (1.0 - covered) * fill  # The quadrants never overlap.
    scale = tf.constant([height, width, height, width], tf.float32)
    result = {key: tf.concat(values, 0)[:max_instances] for key, values in instances.items()}
    result["boxes"] = result["boxes"] / scale
    result["image"] = tf.cast(tf.clip_by_value(tf.round(canvas), 0.0, 255.0), tf.uint8)
    result["image_id"] = group["image_id"][0]
    return result


def _placement(size: tf.Tensor, canvas_size, centre: tf.Tensor, quadrant: int):
    """Where image `quadrant` of a mosaic goes: (resized size [2], origin [2] of its top-left
    corner on the canvas, visible window [4] y0, x0, y1, x1 on the canvas), float32."""
    canvas = tf.constant(canvas_size, tf.float32)
    size = tf.cast(size, tf.float32)
    scale = tf.reduce_min(canvas / size)
    resized = tf.maximum(tf.round(size * scale), 1.0)
    centre = tf.cast(centre, tf.float32)
    before = tf.constant([quadrant // 2 == 0, quadrant % 2 == 0])  # Above / left of the centre.
    origin = tf.where(before, centre - resized, centre)
    region_start = tf.where(before, tf.zeros([2]), centre)
    region_end = tf.where(before, centre, canvas)
    window = tf.concat([tf.maximum(origin, region_start),
                        tf.minimum(origin + resized, region_end)], 0)
    return resized, origin, window


def _paint(image: tf.Tensor, placement, canvas_size):
    """(layer float32 [H, W, 3], mask float32 [H, W, 1]): the image's visible part on an
    otherwise empty canvas, and 1 where it is."""
    resized, origin, window = placement
    pixels = tf.image.resize(tf.cast(image, tf.float32), tf.cast(resized, tf.int32))
    start = tf.cast(window[:2] - origin, tf.int32)
    extent = tf.cast(window[2:] - window[:2], tf.int32)
    patch = pixels[start[0]:start[0] + extent[0], start[1]:start[1] + extent[1]]
    top, left = tf.cast(window[0], tf.int32), tf.cast(window[1], tf.int32)
    layer = tf.image.pad_to_bounding_box(patch, top, left, canvas_size[0], canvas_size[1])
    mask = tf.image.pad_to_bounding_box(tf.ones_like(patch[:, :, :1]), top, left,
                                        canvas_size[0], canvas_size[1])
    return layer, mask


def _placed_boxes(boxes: tf.Tensor, num_boxes: tf.Tensor, placement):
    """(canvas pixel boxes [N, 4] clipped to the image's window, keep bool [N]): keep is
    False for padding and for remnants (see MIN_REMNANT_SIDE, MIN_REMNANT_AREA_FRACTION)."""
    resized, origin, window = placement
    placed = boxes * tf.tile(resized, [2]) + tf.tile(origin, [2])
    clipped = tf.clip_by_value(placed, tf.tile(window[:2], [2]), tf.tile(window[2:], [2]))
    sides = clipped[:, 2:] - clipped[:, :2]
    big_enough = tf.reduce_all(sides >= MIN_REMNANT_SIDE, axis=1)
    enough_left = _box_area(clipped) >= MIN_REMNANT_AREA_FRACTION * _box_area(placed)
    real = tf.range(tf.shape(boxes)[0]) < num_boxes
    return clipped, real & big_enough & enough_left


def _box_area(boxes: tf.Tensor) -> tf.Tensor:
    return (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])


def beta_sample(seed: tf.Tensor, alpha: float, beta: float, shape=()) -> tf.Tensor:
    """float32 `shape` draws from Beta(alpha, beta), as X / (X + Y) of two Gamma draws."""
    alpha_seed, beta_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    x = tf.random.stateless_gamma(shape, alpha_seed, alpha)
    y = tf.random.stateless_gamma(shape, beta_seed, beta)
    return x / (x + y)


def mixup(first: Dict[str, tf.Tensor], second: Dict[str, tf.Tensor], weight: tf.Tensor,
          max_instances: int) -> Dict[str, tf.Tensor]:
    """Blends two padded examples of the same input size (see pad_instances).

    Args:
      first, second: image float32 [H, W, 3] (normalised), boxes [max_instances, 4] in
        input pixels, classes, is_crowd, area, num_boxes, image_scale (original pixels per
        input pixel; [y, x] with resize_mode stretch), image_id.
      weight: float32 scalar, the first image's share.

    Returns:
      a padded example: weight * first + (1 - weight) * second, the instances of first then
      second (cut to max_instances), second's areas in first's original pixels; the
      image_scale and image_id of first.
    """
    mixed = dict(first)
    mixed["image"] = weight * first["image"] + (1.0 - weight) * second["image"]
    second = unpad_instances(second)
    # One scale per image, or [y, x] with resize_mode stretch: areas scale by their product.
    ratio = first["image_scale"] / second["image_scale"] * tf.ones([2])
    second["area"] = second["area"] * tf.reduce_prod(ratio)
    first = unpad_instances(first)
    for key in INSTANCE_KEYS:
        mixed[key] = tf.concat([first[key], second[key]], 0)
    return pad_instances(mixed, max_instances)
