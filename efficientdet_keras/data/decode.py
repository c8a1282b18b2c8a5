"""Decoding and checking raw examples as TensorFlow ops, surviving bad data.

Every reader's raw example (see `data.formats.records`) goes through `decode_and_clean`,
which runs as graph ops only (no tf.py_function: a script that stops while an
iterator is alive exits at once, and the input path never takes the GIL).
Bad data never crashes training or evaluation:
- a record that cannot be used (see `data.health.SKIP_KINDS`: bytes that are not a
  tf.Example, mismatched box, label, is_crowd or area lists, no image, an image that
  cannot be read or decoded, boxes that look like pixels where 0..1 values are expected,
  the unreadable rest of a truncated TFRecord file) gets ok=False and is filtered out;
- boxes with NaN or inf, inverted boxes, boxes with a class id outside
  1..num_classes, boxes with no area after clipping: dropped; boxes partly outside
  the image: clipped; more objects than max_instances_per_image: the first N kept (the
  record is warned about and counted once, however many epochs read it; see
  `data.health.Truncation`); these repairs are `data.box_cleaning`'s;
- image/height and image/width that disagree with the decoded image: the decoded
  size is used.
Images are decoded by `data.image_decoding`. Each problem is counted in a `DataHealth`
(`data.health`) and printed to stderr as
"Data: <kind> in record source_id <id> / <file name> (#<n> of <tfrecord>): <detail>"
for the first few records of each kind. With strict=True (config `strict_data`),
a class id outside 1..num_classes stops the run with an error naming the record.
"""

from typing import Dict, Sequence, Tuple

import tensorflow as tf

from efficientdet_keras.data.box_cleaning import clean_annotations
from efficientdet_keras.data.formats.image_ids import image_id_to_int64_graph
from efficientdet_keras.data.formats.records import attempt
from efficientdet_keras.data.health import SKIP_KINDS, DataHealth
from efficientdet_keras.data.image_decoding import decode_unless_oversized, image_format_graph
from efficientdet_keras.data.image_limits import MAX_IMAGE_PIXELS

# Normalised coordinates above this are pixels: clipping them to 0..1 would keep garbage.
PIXEL_COORDINATE_THRESHOLD = 2.0


def record_name(raw: Dict[str, tf.Tensor]) -> tf.Tensor:
    """"record source_id 7 / seven.jpg (#3 of /data/train.tfrecord)", string scalar; parts
    that are empty are left out."""
    source_id, file_name = raw["source_id"], raw["filename"]
    file_name = tf.where(tf.strings.length(file_name) > 0, file_name, raw["path"])
    parts = tf.stack([tf.strings.join(["source_id ", source_id]), file_name])
    parts = tf.boolean_mask(parts, tf.stack([tf.strings.length(source_id) > 0,
                                             tf.strings.length(file_name) > 0]))
    name = tf.strings.reduce_join(parts, separator=" / ")
    origin = raw["origin"]
    name = tf.where(tf.strings.length(origin) > 0, tf.strings.join([name, " (", origin, ")"]),
                    name)
    return tf.strings.join(["record ", tf.strings.strip(name)])


def _first_problem(checks: Sequence[Tuple[str, tf.Tensor]]) -> tf.Tensor:
    """int32 scalar: 1 + the SKIP_KINDS index of the first kind whose condition holds, or 0."""
    code = tf.constant(0)
    for kind, condition in reversed(checks):
        code = tf.where(condition, SKIP_KINDS.index(kind) + 1, code)
    return code


def _annotation_checks(raw: Dict[str, tf.Tensor]):
    """The record-level checks that need no image: [(kind, condition)] and {kind: function
    making the detail}."""
    counts = tf.cast(raw["coordinate_counts"], tf.int64)
    num_boxes = tf.shape(raw["boxes"], out_type=tf.int64)[0]
    num_labels = tf.size(raw["classes"], out_type=tf.int64)
    crowd, area = tf.size(raw["is_crowd"], out_type=tf.int64), tf.size(raw["area"], out_type=tf.int64)
    no_image = tf.logical_and(tf.equal(raw["encoded"], ""), tf.equal(raw["path"], ""))
    checks = [
        ("truncated_files", tf.equal(raw["problem"], "truncated_files")),
        ("unparseable_examples", tf.equal(raw["problem"], "unparseable_examples")),
        ("mismatched_box_lists", tf.reduce_any(tf.not_equal(counts, counts[0]))),
        ("label_box_count_mismatches", tf.not_equal(num_labels, num_boxes)),
        ("mismatched_crowd_or_area",
         tf.logical_or(tf.logical_and(crowd > 0, crowd != num_labels),
                       tf.logical_and(area > 0, area != num_labels))),
        ("missing_images", no_image),
    ]
    details = {
        "truncated_files": lambda: raw["problem_detail"],
        "unparseable_examples": lambda: raw["problem_detail"],
        "mismatched_box_lists": lambda: tf.strings.join(
            ["ymin/xmin/ymax/xmax have ",
             tf.strings.reduce_join(tf.strings.as_string(counts), separator="/"), " values"]),
        "label_box_count_mismatches": lambda: tf.strings.join(
            [tf.strings.as_string(num_labels), " labels for ", tf.strings.as_string(num_boxes),
             " boxes"]),
        "mismatched_crowd_or_area": lambda: tf.strings.join(
            ["is_crowd has ", tf.strings.as_string(crowd), " values and area ",
             tf.strings.as_string(area), " for ", tf.strings.as_string(num_labels), " objects"]),
        "missing_images": lambda: tf.constant("no image/encoded bytes"),
    }
    return checks, details


def _read_and_decode(raw: Dict[str, tf.Tensor], problem: tf.Tensor):
    """Reads (path) and decodes the image unless `problem` is already set.

    Returns image uint8 [H, W, 3] ([0, 0, 3] when unusable), the updated problem code
    and {kind: function making the detail} for the image kinds.
    """
    needs_read = tf.logical_and(tf.equal(problem, 0), tf.not_equal(raw["path"], ""))
    data, read_ok = tf.cond(needs_read, lambda: attempt(tf.io.read_file, raw["path"], ""),
                            lambda: (raw["encoded"], tf.constant(True)))
    image_format = image_format_graph(data)
    problem = _update(problem, [("unreadable_image_files", tf.logical_not(read_ok)),
                                ("undecodable_images", tf.equal(image_format, ""))])
    empty = (tf.zeros([0, 0, 3], tf.uint8), tf.constant(0, tf.int64))
    (image, pixels), decoded = tf.cond(
        tf.equal(problem, 0), lambda: attempt(decode_unless_oversized, data, empty),
        lambda: (empty, tf.constant(False)))
    has_pixels = tf.reduce_prod(tf.shape(image)) > 0
    problem = _update(problem, [("oversized_images", pixels > MAX_IMAGE_PIXELS),
                                ("undecodable_images",
                                 tf.logical_not(tf.logical_and(decoded, has_pixels)))])
    def undecodable():
        return tf.where(
            tf.equal(tf.strings.length(data), 0), "zero bytes",
            tf.where(tf.equal(image_format, ""),
                     tf.strings.join([tf.strings.as_string(tf.strings.length(data)),
                                      " bytes that are not a JPEG, PNG, GIF, BMP or WebP image"]),
                     tf.strings.join(["corrupt or truncated ", image_format, " data"])))

    details = {"unreadable_image_files":
               lambda: tf.constant("the image file is missing or unreadable"),
               "oversized_images": lambda: tf.strings.join([
                   "its header claims ", tf.strings.as_string(pixels), " pixels, more than the ",
                   format(MAX_IMAGE_PIXELS, ","), " an image may have here (tile or downscale "
                   "it)"]),
               "undecodable_images": undecodable}
    return image, problem, details


def _update(problem: tf.Tensor, checks) -> tf.Tensor:
    """The problem code, or the first of `checks` that holds when there was none."""
    return tf.where(tf.equal(problem, 0), _first_problem(checks), problem)


@tf.autograph.experimental.do_not_convert  # Graph ops throughout; converting costs seconds.
def decode_and_clean(raw: Dict[str, tf.Tensor], num_classes: int, max_instances: int,
                     health: DataHealth, strict: bool = False) -> Dict[str, tf.Tensor]:
    """Decodes and checks one raw example (graph ops); use in Dataset.map, then filter on "ok".

    Returns:
      image: uint8 [H, W, 3] (greyscale and RGBA become RGB)
      boxes: float32 [N, 4] normalised [ymin, xmin, ymax, xmax], clipped, non-empty
      classes: int32 [N] in 1..num_classes
      is_crowd: bool [N]; area: float32 [N] (original pixels^2)
      object_index: int32 [N], each kept object's place among the record's objects
      source_id: string; ok: bool (false: skip this example)
      image_id: int64, `data.formats.image_ids.image_id_to_int64(source_id)`
      record: string, the record's name (`record_name`)
      skip_reason: string, "<kind>: <detail>" of the problem that skips it, or "" when ok
    Raises (at run time, strict only): InvalidArgumentError naming the record for a
      class id outside 1..num_classes.
    """
    name = record_name(raw)
    checks, details = _annotation_checks(raw)
    problem = _first_problem(checks)
    image, problem, image_details = _read_and_decode(raw, problem)
    details.update(image_details)
    boxes = tf.cast(raw["boxes"], tf.float32)
    finite = tf.boolean_mask(boxes, tf.math.is_finite(boxes))
    largest = tf.reduce_max(tf.concat([finite, [0.0]], 0))
    problem = _update(problem, [("pixel_boxes", tf.logical_and(
        raw["boxes_normalized"], largest > PIXEL_COORDINATE_THRESHOLD))])
    details["pixel_boxes"] = lambda: tf.strings.join(
        ["box coordinates up to ", tf.strings.as_string(largest, shortest=True),
         " look like pixels, but the records should hold normalised 0..1 values; skipping "
         "such records (warned once)"])
    # The details' strings are made only for a skipped record, inside the branches.
    health.notes(name, [(kind, tf.cast(tf.equal(problem, code), tf.int64), details[kind])
                        for code, kind in enumerate(SKIP_KINDS, 1)])
    ok = tf.equal(problem, 0)
    health.count_good(ok)

    def reason():  # The data check names every skipped record with its reason.
        reasons = tf.stack([tf.strings.join([kind, ": ", details[kind]()])
                            for kind in SKIP_KINDS])
        return tf.gather(reasons, tf.maximum(problem - 1, 0))

    skip_reason = tf.cond(ok, lambda: tf.constant(""), reason)

    def cleaned():
        return clean_annotations(raw, image, num_classes, max_instances, health, strict, name)

    def nothing():
        return (tf.zeros([0, 4]), tf.zeros([0], tf.int32), tf.zeros([0], tf.bool), tf.zeros([0]),
                tf.zeros([0], tf.int32))

    boxes, classes, is_crowd, area, object_index = tf.cond(ok, cleaned, nothing)
    return {"image": image, "boxes": boxes, "classes": classes, "is_crowd": is_crowd,
            "area": area, "object_index": object_index, "source_id": raw["source_id"],
            "image_id": image_id_to_int64_graph(raw["source_id"]), "ok": ok,
            "record": name, "skip_reason": skip_reason}
