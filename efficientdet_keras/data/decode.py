"""Decoding and checking raw examples as TensorFlow ops, surviving bad data.

Every reader's raw example (see `data.formats.records`) goes through `decode_and_clean`,
which runs as graph ops only (no tf.py_function: a script that stops while an
iterator is alive exits at once, and the input path never takes the GIL).
Bad data never crashes training or evaluation:
- a record that cannot be used (see `SKIP_KINDS`: bytes that are not a tf.Example,
  mismatched box, label, is_crowd or area lists, no image, an image that cannot be
  read or decoded, boxes that look like pixels where 0..1 values are expected, the
  unreadable rest of a truncated TFRecord file) gets ok=False and is filtered out;
- boxes with NaN or inf, inverted boxes, boxes with a class id outside
  1..num_classes, boxes with no area after clipping: dropped; boxes partly outside
  the image: clipped; more objects than max_instances_per_image: the first N kept (the
  record is warned about and counted once, however many epochs read it; see `Truncation`);
- image/height and image/width that disagree with the decoded image: the decoded
  size is used.
Each problem is counted in a `DataHealth` and printed to stderr as
"Data: <kind> in record source_id <id> / <file name> (#<n> of <tfrecord>): <detail>"
for the first few records of each kind. With strict=True (config `strict_data`),
a class id outside 1..num_classes stops the run with an error naming the record.
"""

import collections
import dataclasses
import sys
from typing import Dict, Sequence, Tuple

import tensorflow as tf
from absl import logging

from efficientdet_keras.data.formats.image_ids import image_id_to_int64_graph
from efficientdet_keras.data.formats.records import attempt
from efficientdet_keras.data.image_limits import MAX_IMAGE_PIXELS

# Record-level problems: the record is skipped. The order is the order of the checks.
SKIP_KINDS = ("truncated_files", "unparseable_examples", "mismatched_box_lists",
              "label_box_count_mismatches", "mismatched_crowd_or_area", "missing_images",
              "unreadable_image_files", "oversized_images", "undecodable_images", "pixel_boxes")
# Box-level repairs and other warnings: the record is kept.
REPAIR_KINDS = ("nan_boxes_dropped", "inverted_boxes_dropped", "bad_class_boxes_dropped",
                "boxes_clipped", "empty_boxes_dropped", "instances_truncated", "size_mismatches")
# Kinds that are warned about once: every record of such a dataset usually has them.
_WARN_ONCE = ("pixel_boxes",)
# Normalised coordinates above this are pixels: clipping them to 0..1 would keep garbage.
PIXEL_COORDINATE_THRESHOLD = 2.0
# File signatures of the formats tf.io.decode_image reads.
IMAGE_SIGNATURES = {b"\xff\xd8\xff": "jpeg", b"\x89PNG\r\n\x1a\n": "png", b"GIF87a": "gif",
                    b"GIF89a": "gif", b"BM": "bmp"}


@dataclasses.dataclass
class Truncation:
    """The records that had more objects than max_instances_per_image, each counted once:
    how many, the objects beyond the limit they lost, the most objects one had, the limit."""
    records: int = 0
    objects_dropped: int = 0
    most_objects: int = 0
    max_instances: int = 0

    def describe(self) -> str:
        """"2 records have more objects than max_instances_per_image=100 (up to 130): 57
        objects dropped; raise max_instances_per_image to 130 to keep them all", or ""."""
        if not self.records:
            return ""
        return ("%d %s more objects than max_instances_per_image=%d (up to %d): %d objects "
                "dropped; raise max_instances_per_image to %d to keep them all"
                % (self.records, "record has" if self.records == 1 else "records have",
                   self.max_instances, self.most_objects, self.objects_dropped,
                   self.most_objects))


class DataHealth:
    """Counters of what decoding skipped or repaired, kept in tf.Variables so graph-mode
    input pipelines update them; `summary()` and `log_summary()` read them in Python.

    The first `warnings_per_kind` records of each kind are printed (to stderr) with the
    record's name; the rest are only counted. Also counts the records used ("good_records").
    Records over max_instances_per_image are remembered by name (`note_truncation`), so
    each is warned about and counted once however many epochs read it.
    """

    KINDS = SKIP_KINDS + REPAIR_KINDS

    def __init__(self, warnings_per_kind: int = 5):
        self.warnings_per_kind = warnings_per_kind
        # Entries the source itself skipped before any decoding (COCO JSON checks).
        self.source_problems = collections.Counter()
        # Lifted out of any tf.function; on the CPU, where tf.data runs.
        with tf.init_scope(), tf.device("/cpu:0"):
            self._counts = {kind: tf.Variable(0, dtype=tf.int64, trainable=False,
                                              name="data_" + kind)
                            for kind in self.KINDS + ("good_records",)}
            # Record name -> [objects, objects kept] of the records over the limit.
            self._truncated = tf.lookup.experimental.MutableHashTable(
                tf.string, tf.int64, default_value=[-1, -1], name="data_truncated_records")

    def note(self, kind: str, record: tf.Tensor, detail, count=1) -> None:
        """Counts `count` (int scalar tensor, may be 0) events of `kind` in `record`
        (string scalar) and prints a warning for the first few."""
        count = tf.cast(count, tf.int64)
        limit = 1 if kind in _WARN_ONCE else self.warnings_per_kind
        label = kind.replace("_", " ")
        # One cond rather than nested ones: each cond is a graph of its own to build, and
        # every pipeline builds this for every kind. Adding a count of 0 changes nothing.
        seen = self._counts[kind].assign_add(count) - count

        def warn():  # The message is only put together for the few records warned about.
            return _warn(tf.reshape(tf.where(  # A scalar, or tf.print quotes it as a tensor.
                seen < limit, tf.strings.join(["Data: ", label, " in ", record, ": ", detail]),
                "Data: more %s; counting without further warnings." % label), []))

        tf.cond(tf.logical_and(count > 0, seen <= limit), warn, lambda: tf.constant(False))

    def note_truncation(self, record: tf.Tensor, num_objects: tf.Tensor,
                        max_instances: int) -> None:
        """Counts "instances_truncated" and warns (the first few) when `num_objects` (int
        scalar tensor) exceeds `max_instances`, the first time `record` (string scalar) does."""
        num_objects = tf.cast(num_objects, tf.int64)
        first_time = tf.cond(num_objects > max_instances,
                             lambda: self._remember_truncation(record, num_objects, max_instances),
                             lambda: tf.constant(False))
        self.note("instances_truncated", record, tf.strings.join(
            [_text(num_objects), " objects; the first %d are kept, " % max_instances,
             _text(num_objects - max_instances), " dropped (max_instances_per_image)"]),
            tf.cast(first_time, tf.int64))

    def _remember_truncation(self, record, num_objects, max_instances) -> tf.Tensor:
        """True (bool scalar) when `record` was not remembered yet; remembers it."""
        is_new = tf.equal(self._truncated.lookup(record)[0], -1)
        # The look-up must see the table as it was before this record's insert.
        with tf.control_dependencies([is_new]):
            inserted = self._truncated.insert(
                record, tf.stack([num_objects, tf.constant(max_instances, tf.int64)]))
        with tf.control_dependencies([inserted]):
            return tf.identity(is_new)

    def truncation(self) -> Truncation:
        """The records that had more objects than max_instances_per_image so far."""
        counts = self._truncated.export()[1].numpy()
        if not len(counts):
            return Truncation()
        objects, kept = counts[:, 0], counts[:, 1]
        return Truncation(records=len(counts), objects_dropped=int((objects - kept).sum()),
                          most_objects=int(objects.max()), max_instances=int(kept.max()))

    def count_good(self, ok: tf.Tensor) -> None:
        self._counts["good_records"].assign_add(tf.cast(ok, tf.int64))

    def good_records(self) -> tf.Tensor:
        return self._counts["good_records"].read_value()

    def summary(self) -> Dict[str, int]:
        """{kind: count} for every problem kind (zeros included)."""
        return {kind: int(self._counts[kind].numpy()) for kind in self.KINDS}

    def log_summary(self) -> None:
        """Logs the data report: the problem counts that are not zero, and the records
        over max_instances_per_image with the objects they lost."""
        counts = {k: v for k, v in self.summary().items() if v}
        counts.update((kind, n) for kind, n in self.source_problems.items() if n)
        parts = [", ".join("%s=%d" % kv for kv in counts.items()), self.truncation().describe()]
        if counts:
            logging.warning("Data report: %d records used; %s",
                            int(self._counts["good_records"].numpy()),
                            "; ".join(filter(None, parts)))


def _warn(message) -> tf.Tensor:
    tf.print(message, output_stream=sys.stderr)
    return tf.constant(True)


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


def image_format_graph(data: tf.Tensor) -> tf.Tensor:
    """The format name ("jpeg", "png", "gif", "bmp") of image bytes from their signature,
    or "" (string scalar)."""
    name = tf.constant("")
    for signature, format_name in IMAGE_SIGNATURES.items():
        matches = tf.equal(tf.strings.substr(data, 0, len(signature)), signature)
        name = tf.where(matches, format_name, name)
    return name


def _unsigned(data: tf.Tensor, offset: int, size: int, big_endian: bool) -> tf.Tensor:
    """The unsigned integer of `size` bytes at `offset` of a string scalar (int64; 0 where the
    string is too short)."""
    padded = tf.strings.join([data, b"\0" * (offset + size)])
    raw = tf.io.decode_raw(tf.strings.substr(padded, offset, size), tf.uint8)
    weights = [256 ** (size - 1 - i) if big_endian else 256 ** i for i in range(size)]
    return tf.reduce_sum(tf.cast(raw, tf.int64) * tf.constant(weights, tf.int64))


def header_pixels(data: tf.Tensor, image_format: tf.Tensor) -> tf.Tensor:
    """The pixel count the image's header claims (int64 scalar), read without decoding: the
    JPEG frame header (an error when it has none), PNG's IHDR, GIF's logical screen, BMP's
    info header; 0 for other bytes."""
    def jpeg():
        shape = tf.cast(tf.image.extract_jpeg_shape(data), tf.int64)
        return shape[0] * shape[1]
    png = _unsigned(data, 16, 4, True) * _unsigned(data, 20, 4, True)
    gif = _unsigned(data, 6, 2, False) * _unsigned(data, 8, 2, False)
    bmp_height = _unsigned(data, 22, 4, False)  # Negative (top-down rows) as two's complement.
    bmp_height = tf.where(bmp_height >= 2 ** 31, 2 ** 32 - bmp_height, bmp_height)
    bmp = _unsigned(data, 18, 4, False) * bmp_height
    known = tf.where(tf.equal(image_format, "png"), png, tf.where(
        tf.equal(image_format, "gif"), gif, tf.where(tf.equal(image_format, "bmp"), bmp, 0)))
    return tf.cond(tf.equal(image_format, "jpeg"), jpeg, lambda: known)


def _decode_unless_oversized(data: tf.Tensor):
    """(uint8 [H, W, 3] image, the pixels its header claims): the image is [0, 0, 3], not
    decoded, when the header claims more than MAX_IMAGE_PIXELS."""
    pixels = header_pixels(data, image_format_graph(data))
    image = tf.cond(pixels > MAX_IMAGE_PIXELS, lambda: tf.zeros([0, 0, 3], tf.uint8),
                    lambda: _decode_image(data))
    return image, pixels


def _decode_image(data: tf.Tensor) -> tf.Tensor:
    """uint8 [H, W, 3]: greyscale and RGBA become RGB, CMYK JPEG RGB, 16-bit PNG 8-bit."""
    image = tf.io.decode_image(data, channels=3, expand_animations=False, dtype=tf.uint8)
    image.set_shape([None, None, 3])
    return image


def _first_problem(checks: Sequence[Tuple[str, tf.Tensor]]) -> tf.Tensor:
    """int32 scalar: 1 + the SKIP_KINDS index of the first kind whose condition holds, or 0."""
    code = tf.constant(0)
    for kind, condition in reversed(checks):
        code = tf.where(condition, SKIP_KINDS.index(kind) + 1, code)
    return code


def _text(value) -> tf.Tensor:
    return tf.strings.as_string(value)


def _annotation_checks(raw: Dict[str, tf.Tensor]):
    """The record-level checks that need no image: [(kind, condition)] and {kind: detail}."""
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
        "truncated_files": raw["problem_detail"], "unparseable_examples": raw["problem_detail"],
        "mismatched_box_lists": tf.strings.join(
            ["ymin/xmin/ymax/xmax have ", tf.strings.reduce_join(_text(counts), separator="/"),
             " values"]),
        "label_box_count_mismatches": tf.strings.join(
            [_text(num_labels), " labels for ", _text(num_boxes), " boxes"]),
        "mismatched_crowd_or_area": tf.strings.join(
            ["is_crowd has ", _text(crowd), " values and area ", _text(area), " for ",
             _text(num_labels), " objects"]),
        "missing_images": tf.constant("no image/encoded bytes"),
    }
    return checks, details


def _read_and_decode(raw: Dict[str, tf.Tensor], problem: tf.Tensor):
    """Reads (path) and decodes the image unless `problem` is already set.

    Returns image uint8 [H, W, 3] ([0, 0, 3] when unusable), the updated problem code
    and {kind: detail} for the image kinds.
    """
    needs_read = tf.logical_and(tf.equal(problem, 0), tf.not_equal(raw["path"], ""))
    data, read_ok = tf.cond(needs_read, lambda: attempt(tf.io.read_file, raw["path"], ""),
                            lambda: (raw["encoded"], tf.constant(True)))
    image_format = image_format_graph(data)
    problem = _update(problem, [("unreadable_image_files", tf.logical_not(read_ok)),
                                ("undecodable_images", tf.equal(image_format, ""))])
    empty = (tf.zeros([0, 0, 3], tf.uint8), tf.constant(0, tf.int64))
    (image, pixels), decoded = tf.cond(
        tf.equal(problem, 0), lambda: attempt(_decode_unless_oversized, data, empty),
        lambda: (empty, tf.constant(False)))
    has_pixels = tf.reduce_prod(tf.shape(image)) > 0
    problem = _update(problem, [("oversized_images", pixels > MAX_IMAGE_PIXELS),
                                ("undecodable_images",
                                 tf.logical_not(tf.logical_and(decoded, has_pixels)))])
    undecodable = tf.where(
        tf.equal(tf.strings.length(data), 0), "zero bytes",
        tf.where(tf.equal(image_format, ""),
                 tf.strings.join([_text(tf.strings.length(data)),
                                  " bytes that are not a JPEG, PNG, GIF or BMP image"]),
                 tf.strings.join(["corrupt or truncated ", image_format, " data"])))
    details = {"unreadable_image_files": tf.constant("the image file is missing or unreadable"),
               "oversized_images": tf.strings.join([
                   "its header claims ", _text(pixels), " pixels, more than the ",
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
    details["pixel_boxes"] = tf.strings.join(
        ["box coordinates up to ", tf.strings.as_string(largest, shortest=True),
         " look like pixels, but the records should hold normalised 0..1 values; skipping "
         "such records (warned once)"])
    for code, kind in enumerate(SKIP_KINDS, 1):
        health.note(kind, name, details[kind], tf.cast(tf.equal(problem, code), tf.int64))
    ok = tf.equal(problem, 0)
    health.count_good(ok)
    # The data check names every skipped record with its reason (the warnings stop after a few).
    reasons = tf.stack([tf.strings.join([kind, ": ", details[kind]]) for kind in SKIP_KINDS])
    skip_reason = tf.where(ok, "", tf.gather(reasons, tf.maximum(problem - 1, 0)))

    def cleaned():
        return _clean_annotations(raw, image, num_classes, max_instances, health, strict, name)

    def nothing():
        return (tf.zeros([0, 4]), tf.zeros([0], tf.int32), tf.zeros([0], tf.bool), tf.zeros([0]),
                tf.zeros([0], tf.int32))

    boxes, classes, is_crowd, area, object_index = tf.cond(ok, cleaned, nothing)
    return {"image": image, "boxes": boxes, "classes": classes, "is_crowd": is_crowd,
            "area": area, "object_index": object_index, "source_id": raw["source_id"],
            "image_id": image_id_to_int64_graph(raw["source_id"]), "ok": ok,
            "record": name, "skip_reason": skip_reason}


def _clean_annotations(raw, image, num_classes, max_instances, health, strict, name):
    """Normalised, finite, upright, in-range, clipped, non-empty boxes of a usable record.

    Returns boxes float32 [N, 4], classes int32 [N], is_crowd bool [N], area float32 [N]
    and the kept objects' places among the record's, int32 [N].
    """
    height, width = tf.shape(image, out_type=tf.int64)[0], tf.shape(image, out_type=tf.int64)[1]
    fields = tf.stack([raw["height"], raw["width"]])
    size_differs = tf.logical_and(tf.reduce_all(fields > 0),
                                  tf.reduce_any(fields != tf.stack([height, width])))
    health.note("size_mismatches", name, tf.strings.join(
        ["image/height, image/width say ", _text(raw["height"]), "x", _text(raw["width"]),
         ", the image is ", _text(height), "x", _text(width), "; using the image's size"]),
        tf.cast(size_differs, tf.int64))

    boxes = tf.cast(raw["boxes"], tf.float32)
    classes = tf.cast(raw["classes"], tf.int64)
    num = tf.size(classes)
    is_crowd = tf.cond(tf.size(raw["is_crowd"]) > 0, lambda: tf.cast(raw["is_crowd"], tf.bool),
                       lambda: tf.zeros([num], tf.bool))
    area = tf.cond(tf.size(raw["area"]) > 0, lambda: tf.cast(raw["area"], tf.float32),
                   lambda: tf.zeros([num], tf.float32))
    scale = tf.cast(tf.stack([height, width, height, width]), tf.float32)
    boxes = tf.cond(raw["boxes_normalized"], lambda: boxes, lambda: boxes / scale)
    objects = (boxes, classes, is_crowd, area, tf.range(num, dtype=tf.int32))

    def _bad_class(c):
        return tf.logical_or(c < 1, c > num_classes)

    if strict:
        bad_class = _bad_class(classes)
        tf.debugging.Assert(tf.logical_not(tf.reduce_any(bad_class)), [tf.strings.join(
            [name, " has class id ", _text(_first(tf.boolean_mask(classes, bad_class))),
             " outside 1..%d" % num_classes,
             " (strict_data is on; check num_classes and the label map)"])])
    # Each check sees the objects the previous ones kept.
    not_finite = tf.logical_not(tf.reduce_all(tf.math.is_finite(objects[0]), axis=1))
    objects = _drop(objects, not_finite, "nan_boxes_dropped", " box(es) with NaN or inf",
                    health, name)
    boxes = objects[0]
    inverted = tf.logical_or(boxes[:, 0] > boxes[:, 2], boxes[:, 1] > boxes[:, 3])
    objects = _drop(objects, inverted, "inverted_boxes_dropped", " box(es) with min above max",
                    health, name)
    bad_class = _bad_class(objects[1])
    objects = _drop(objects, bad_class, "bad_class_boxes_dropped", tf.strings.join(
        [" box(es) with class ids outside 1..%d, e.g. " % num_classes,
         _text(_first(tf.boolean_mask(objects[1], bad_class)))]), health, name)
    boxes = objects[0]
    outside = tf.reduce_any(tf.logical_or(boxes < 0.0, boxes > 1.0), axis=1)
    _note_count(health, "boxes_clipped", name, outside, " box(es) partly outside the image")
    objects = (tf.clip_by_value(boxes, 0.0, 1.0),) + objects[1:]
    boxes = objects[0]
    no_area = tf.logical_or(boxes[:, 2] <= boxes[:, 0], boxes[:, 3] <= boxes[:, 1])
    objects = _drop(objects, no_area, "empty_boxes_dropped", " box(es) with no area", health, name)
    health.note_truncation(name, tf.size(objects[1]), max_instances)
    boxes, classes, is_crowd, area, object_index = (t[:max_instances] for t in objects)
    pixel_area = ((boxes[:, 2] - boxes[:, 0]) * tf.cast(height, tf.float32)
                  * (boxes[:, 3] - boxes[:, 1]) * tf.cast(width, tf.float32))
    area = tf.where(area > 0, area, pixel_area)
    return boxes, tf.cast(classes, tf.int32), is_crowd, area, object_index


def _first(values: tf.Tensor) -> tf.Tensor:
    """values[0] of a 1-D tensor, or 0 when it is empty."""
    return tf.concat([values, tf.zeros([1], values.dtype)], 0)[0]


def _note_count(health, kind, name, mask, detail):
    count = tf.reduce_sum(tf.cast(mask, tf.int64))
    health.note(kind, name, tf.strings.join([_text(count), detail]), count)


def _drop(objects, drop, kind, detail, health, name):
    """objects (boxes, classes, is_crowd, area, object_index) without those where `drop`
    (bool [N])."""
    _note_count(health, kind, name, drop, detail)
    keep = tf.reshape(tf.where(tf.logical_not(drop)), [-1])  # One index list for all five.
    return tuple(tf.gather(t, keep) for t in objects)
