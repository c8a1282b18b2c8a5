"""The boxes of a usable record made fit for training: normalised, finite, upright, with
class ids in range, clipped to the image and non-empty, and at most max_instances_per_image
of them; each repair counted in the `DataHealth`."""

from typing import Dict

import tensorflow as tf

from efficientdet_keras.data.health import DataHealth

# Stated and decoded sizes of one shape within this fraction: a resized image.
_SAME_SHAPE = 0.01


def clean_annotations(raw: Dict[str, tf.Tensor], image: tf.Tensor, num_classes: int,
                      max_instances: int, health: DataHealth, strict: bool, name: tf.Tensor):
    """Normalised, finite, upright, in-range, clipped, non-empty boxes of a usable record.

    `raw` is the record's raw example (`data.formats.records`), `image` its decoded pixels
    (uint8 [H, W, 3]) and `name` its name in warnings (`data.decode.record_name`).

    Returns boxes float32 [N, 4], classes int32 [N], is_crowd bool [N], area float32 [N]
    and the kept objects' places among the record's, int32 [N].
    Raises (at run time, strict only): InvalidArgumentError naming the record for a class id
      outside 1..num_classes.
    """
    height, width = tf.shape(image, out_type=tf.int64)[0], tf.shape(image, out_type=tf.int64)[1]
    fields = tf.stack([raw["height"], raw["width"]])
    size_differs = tf.logical_and(tf.reduce_all(fields > 0),
                                  tf.reduce_any(fields != tf.stack([height, width])))
    # A stated size of the image's shape (the image resized after labelling) is the frame its
    # pixel boxes are in; another shape says nothing of where they are.
    stated = tf.cast(fields, tf.float32)
    actual = tf.cast(tf.stack([height, width]), tf.float32)
    resized = tf.logical_and(size_differs, tf.abs(stated[0] * actual[1] - stated[1] * actual[0])
                             <= _SAME_SHAPE * stated[0] * actual[1])
    swapped = tf.logical_and(size_differs, tf.reduce_all(fields == tf.stack([width, height])))
    remedy = tf.where(resized, "; boxes read in the stated size's pixels (resized after "
                               "labelling)",
                      tf.where(swapped, "; width and height swapped: labelled as displayed under "
                                        "its EXIF rotation? boxes read in the image's pixels, "
                                        "which may misplace them",
                               "; using the image's size"))
    # What to count and warn about, noted at the end behind one branch (DataHealth.notes).
    notes = [("size_mismatches", tf.cast(size_differs, tf.int64), lambda: tf.strings.join(
        ["image/height, image/width say ", tf.strings.as_string(raw["height"]), "x",
         tf.strings.as_string(raw["width"]), ", the image is ", tf.strings.as_string(height), "x",
         tf.strings.as_string(width), remedy]))]
    frame = tf.where(resized, stated, actual)

    boxes = tf.cast(raw["boxes"], tf.float32)
    classes = tf.cast(raw["classes"], tf.int64)
    num = tf.size(classes)
    is_crowd = tf.cond(tf.size(raw["is_crowd"]) > 0, lambda: tf.cast(raw["is_crowd"], tf.bool),
                       lambda: tf.zeros([num], tf.bool))
    area = tf.cond(tf.size(raw["area"]) > 0, lambda: tf.cast(raw["area"], tf.float32),
                   lambda: tf.zeros([num], tf.float32))
    scale = tf.stack([frame[0], frame[1], frame[0], frame[1]])
    boxes = tf.cond(raw["boxes_normalized"], lambda: boxes, lambda: boxes / scale)
    objects = (boxes, classes, is_crowd, area, tf.range(num, dtype=tf.int32))

    def _bad_class(c):
        return tf.logical_or(c < 1, c > num_classes)

    if strict:
        bad_class = _bad_class(classes)
        tf.debugging.Assert(tf.logical_not(tf.reduce_any(bad_class)), [tf.strings.join(
            [name, " has class id ",
             tf.strings.as_string(_first(tf.boolean_mask(classes, bad_class))),
             " outside 1..%d" % num_classes,
             " (strict_data is on; check num_classes and the label map)"])])
    # Each check sees the objects the previous ones kept.
    not_finite = tf.logical_not(tf.reduce_all(tf.math.is_finite(objects[0]), axis=1))
    objects = _drop(objects, not_finite, "nan_boxes_dropped", " box(es) with NaN or inf",
                    notes)
    boxes = objects[0]
    inverted = tf.logical_or(boxes[:, 0] > boxes[:, 2], boxes[:, 1] > boxes[:, 3])
    objects = _drop(objects, inverted, "inverted_boxes_dropped", " box(es) with min above max",
                    notes)
    bad_class = _bad_class(objects[1])
    bad_classes = objects[1]
    objects = _drop(objects, bad_class, "bad_class_boxes_dropped", lambda: tf.strings.join(
        [" box(es) with class ids outside 1..%d, e.g. " % num_classes,
         tf.strings.as_string(_first(tf.boolean_mask(bad_classes, bad_class)))]), notes)
    boxes = objects[0]
    outside = tf.reduce_any(tf.logical_or(boxes < 0.0, boxes > 1.0), axis=1)
    _note_count(notes, "boxes_clipped", outside, " box(es) partly outside the image")
    objects = (tf.clip_by_value(boxes, 0.0, 1.0),) + objects[1:]
    boxes = objects[0]
    no_area = tf.logical_or(boxes[:, 2] <= boxes[:, 0], boxes[:, 3] <= boxes[:, 1])
    objects = _drop(objects, no_area, "empty_boxes_dropped", " box(es) with no area", notes)
    health.notes(name, notes)
    health.note_truncation(name, tf.size(objects[1]), max_instances)
    boxes, classes, is_crowd, area, object_index = (t[:max_instances] for t in objects)
    pixel_area = ((boxes[:, 2] - boxes[:, 0]) * tf.cast(height, tf.float32)
                  * (boxes[:, 3] - boxes[:, 1]) * tf.cast(width, tf.float32))
    area = tf.where(area > 0, area, pixel_area)
    return boxes, tf.cast(classes, tf.int32), is_crowd, area, object_index


def _first(values: tf.Tensor) -> tf.Tensor:
    """values[0] of a 1-D tensor, or 0 when it is empty."""
    return tf.concat([values, tf.zeros([1], values.dtype)], 0)[0]


def _note_count(notes, kind, mask, detail):
    """Adds (kind, the count of `mask`, "<count><detail>") to `notes`; `detail` is a string
    or a function making one."""
    count = tf.reduce_sum(tf.cast(mask, tf.int64))
    notes.append((kind, count, lambda: tf.strings.join(
        [tf.strings.as_string(count), detail() if callable(detail) else detail])))


def _drop(objects, drop, kind, detail, notes):
    """objects (boxes, classes, is_crowd, area, object_index) without those where `drop`
    (bool [N]), the drop added to `notes`."""
    _note_count(notes, kind, drop, detail)
    keep = tf.reshape(tf.where(tf.logical_not(drop)), [-1])  # One index list for all five.
    return tuple(tf.gather(t, keep) for t in objects)
