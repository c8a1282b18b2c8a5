"""What decoding skipped or repaired, counted while tf.data runs: the kinds of problem, the
`DataHealth` counters and warnings, and the records over max_instances_per_image (`Truncation`).

Warnings read "Data: <kind> in record source_id <id> / <file name> (#<n> of <tfrecord>):
<detail>" for the first few records of each kind (see `data.decode`, which finds the problems).
"""

import collections
import dataclasses
import sys
from typing import Dict, Sequence, Tuple

import tensorflow as tf
from absl import logging

# Record-level problems: the record is skipped. The order is the order of the checks.
SKIP_KINDS = ("truncated_files", "unparseable_examples", "mismatched_box_lists",
              "label_box_count_mismatches", "mismatched_crowd_or_area", "missing_images",
              "unreadable_image_files", "oversized_images", "undecodable_images", "pixel_boxes")
# Box-level repairs and other warnings: the record is kept.
REPAIR_KINDS = ("nan_boxes_dropped", "inverted_boxes_dropped", "bad_class_boxes_dropped",
                "boxes_clipped", "empty_boxes_dropped", "instances_truncated", "size_mismatches")
# Kinds that are warned about once: every record of such a dataset usually has them.
_WARN_ONCE = ("pixel_boxes",)


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
        (string scalar) and prints a warning for the first few. `detail` is a string
        tensor, or a function making one (only called for a record warned about)."""
        count = tf.cast(count, tf.int64)
        limit = 1 if kind in _WARN_ONCE else self.warnings_per_kind
        label = kind.replace("_", " ")
        # One cond rather than nested ones: each cond is a graph of its own to build, and
        # every pipeline builds this for every kind. Adding a count of 0 changes nothing.
        seen = self._counts[kind].assign_add(count) - count

        def warn():  # The message is only put together for the few records warned about.
            text = detail() if callable(detail) else detail
            return _warn(tf.reshape(tf.where(  # A scalar, or tf.print quotes it as a tensor.
                seen < limit, tf.strings.join(["Data: ", label, " in ", record, ": ", text]),
                "Data: more %s; counting without further warnings." % label), []))

        tf.cond(tf.logical_and(count > 0, seen <= limit), warn, lambda: tf.constant(False))

    def notes(self, record: tf.Tensor, entries: Sequence[Tuple[str, tf.Tensor, object]]) -> None:
        """`note` for each (kind, count, detail) of `entries`, behind one cond: a record
        with nothing to note (nearly all of them) costs the input pipeline one branch,
        not a counter update and a branch per kind."""
        counts = tf.stack([tf.cast(count, tf.int64) for _, count, _ in entries])

        def note_each():
            for (kind, _, detail), count in zip(entries, tf.unstack(counts)):
                self.note(kind, record, detail, count)
            return tf.constant(True)

        tf.cond(tf.reduce_any(counts > 0), note_each, lambda: tf.constant(False))

    def note_truncation(self, record: tf.Tensor, num_objects: tf.Tensor,
                        max_instances: int) -> None:
        """Counts "instances_truncated" and warns (the first few) when `num_objects` (int
        scalar tensor) exceeds `max_instances`, the first time `record` (string scalar) does."""
        num_objects = tf.cast(num_objects, tf.int64)
        first_time = tf.cond(num_objects > max_instances,
                             lambda: self._remember_truncation(record, num_objects, max_instances),
                             lambda: tf.constant(False))
        self.note("instances_truncated", record, tf.strings.join(
            [tf.strings.as_string(num_objects), " objects; the first %d are kept, " % max_instances,
             tf.strings.as_string(num_objects - max_instances),
             " dropped (max_instances_per_image)"]),
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
        """Counts a record that decoding kept when `ok` (bool scalar tensor) is true."""
        self._counts["good_records"].assign_add(tf.cast(ok, tf.int64))

    def good_records(self) -> tf.Tensor:
        """The records decoding kept so far (int64 scalar tensor)."""
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
