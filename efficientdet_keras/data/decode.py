"""Decoding raw examples into images and clean annotations, surviving bad data.

Every reader's raw example (see `data.records`) goes through `decode_and_clean`.
Bad data never crashes training with a bare TensorFlow stack trace:
- an image that cannot be read or decoded: the example is skipped, with a
  warning naming it, and counted;
- NaN boxes, boxes with no area after clipping to the image: dropped and counted;
  boxes partly outside the image: clipped and counted;
- more objects than max_instances_per_image: the first N are kept, with a warning;
- a class id outside 1..num_classes: the run stops with an error naming the
  record and the id (a wrong label map is not something to train through).
"""

import collections
import re
import threading
from typing import Dict

import numpy as np
import tensorflow as tf
from absl import logging

from efficientdet_keras.data.image_ids import image_id_to_int64


class DataHealth:
    """Thread-safe counters of what decoding skipped or repaired.

    The first `warnings_per_kind` events of each kind are logged with the
    record's name; the rest are only counted. `summary()` returns the counts.
    """

    KINDS = ("undecodable_images", "nan_boxes_dropped", "boxes_clipped", "empty_boxes_dropped",
             "instances_truncated")

    def __init__(self, warnings_per_kind: int = 5):
        self._lock = threading.Lock()
        self._counts = collections.Counter()
        self.warnings_per_kind = warnings_per_kind

    def note(self, kind: str, record: str, detail: str, count: int = 1) -> None:
        with self._lock:
            seen = self._counts[kind]
            self._counts[kind] += count
        if seen < self.warnings_per_kind:
            logging.warning("Data: %s in %s: %s", kind.replace("_", " "), record, detail)
        elif seen == self.warnings_per_kind:
            logging.warning("Data: more %s; counting without further warnings.",
                            kind.replace("_", " "))

    def summary(self) -> Dict[str, int]:
        with self._lock:
            return {kind: int(self._counts[kind]) for kind in self.KINDS}

    def log_summary(self) -> None:
        counts = {k: v for k, v in self.summary().items() if v}
        if counts:
            logging.warning("Data problems so far: %s", ", ".join("%s=%d" % kv for kv in counts.items()))


def _short_error(error: Exception) -> str:
    """The readable part of a TensorFlow op error (no function-node or op prefixes)."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    text = re.sub(r"^\{\{function_node [^}]*\}\}\s*", "", text)
    return re.sub(r"\s*\[Op:\w+\]$", "", text)[:200]


def _record_name(source_id: bytes, filename: bytes, path: bytes) -> str:
    parts = []
    if source_id:
        parts.append("source_id %s" % source_id.decode(errors="replace"))
    if filename or path:
        parts.append((filename or path).decode(errors="replace"))
    return "record " + (" / ".join(parts) if parts else "<unnamed>")


def _clean_numpy(encoded, path, source_id, filename, boxes, boxes_normalized, classes, is_crowd,
                 area, num_classes: int, max_instances: int, health: DataHealth):
    """The Python body of `decode_and_clean` (runs inside tf.py_function)."""
    name = _record_name(source_id.numpy(), filename.numpy(), path.numpy())
    image_id = np.int64(image_id_to_int64(source_id.numpy()))
    empty = (np.zeros([0, 0, 3], np.uint8), np.zeros([0, 4], np.float32), np.zeros([0], np.int32),
             np.zeros([0], bool), np.zeros([0], np.float32), image_id, False)
    try:
        data = encoded.numpy() or tf.io.read_file(path).numpy()
        image = tf.io.decode_image(data, channels=3, expand_animations=False).numpy()
    except (tf.errors.OpError, OSError, ValueError) as e:
        health.note("undecodable_images", name, _short_error(e))
        return empty
    height, width = image.shape[:2]
    if image.size == 0:
        health.note("undecodable_images", name, "image has no pixels")
        return empty

    boxes = boxes.numpy().astype(np.float32).reshape(-1, 4)
    classes = classes.numpy().astype(np.int64).reshape(-1)
    is_crowd = is_crowd.numpy().astype(bool).reshape(-1)
    area = area.numpy().astype(np.float32).reshape(-1)
    bad = (classes < 1) | (classes > num_classes)
    if bad.any():
        raise ValueError("%s has class id %d outside 1..%d (check num_classes and the label map)"
                         % (name, int(classes[bad][0]), num_classes))
    if not boxes_normalized.numpy():
        boxes = boxes / np.array([height, width, height, width], np.float32)

    finite = np.isfinite(boxes).all(axis=1)
    if not finite.all():
        health.note("nan_boxes_dropped", name, "%d box(es) with NaN or inf" % (~finite).sum(),
                    int((~finite).sum()))
    boxes, classes, is_crowd, area = boxes[finite], classes[finite], is_crowd[finite], area[finite]
    outside = ((boxes < 0) | (boxes > 1)).any(axis=1)
    if outside.any():
        health.note("boxes_clipped", name, "%d box(es) partly outside the image" % outside.sum(),
                    int(outside.sum()))
        boxes = np.clip(boxes, 0.0, 1.0)
    has_area = (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])
    if not has_area.all():
        health.note("empty_boxes_dropped", name, "%d box(es) with no area" % (~has_area).sum(),
                    int((~has_area).sum()))
    boxes, classes, is_crowd, area = boxes[has_area], classes[has_area], is_crowd[has_area], area[has_area]
    if len(classes) > max_instances:
        health.note("instances_truncated", name, "%d objects, keeping the first %d"
                    % (len(classes), max_instances))
        boxes, classes = boxes[:max_instances], classes[:max_instances]
        is_crowd, area = is_crowd[:max_instances], area[:max_instances]
    pixel_area = (boxes[:, 2] - boxes[:, 0]) * height * (boxes[:, 3] - boxes[:, 1]) * width
    area = np.where(area > 0, area, pixel_area).astype(np.float32)
    return image, boxes, classes.astype(np.int32), is_crowd, area, image_id, True


def decode_and_clean(raw: Dict[str, tf.Tensor], num_classes: int, max_instances: int,
                     health: DataHealth) -> Dict[str, tf.Tensor]:
    """Decodes one raw example; use inside Dataset.map, then filter on "ok".

    Returns:
      image: uint8 [H, W, 3] (greyscale and RGBA become RGB)
      boxes: float32 [N, 4] normalised [ymin, xmin, ymax, xmax], clipped, non-empty
      classes: int32 [N] in 1..num_classes
      is_crowd: bool [N]; area: float32 [N] (original pixels^2)
      source_id: string; ok: bool (false: skip this example)
      image_id: int64, `data.image_ids.image_id_to_int64(source_id)` (computed in Python:
        the same rule the evaluator applies to ground-truth JSON ids)
    """
    outputs = tf.py_function(
        lambda *args: _clean_numpy(*args, num_classes=num_classes, max_instances=max_instances,
                                   health=health),
        [raw["encoded"], raw["path"], raw["source_id"], raw["filename"], raw["boxes"],
         raw["boxes_normalized"], raw["classes"], raw["is_crowd"], raw["area"]],
        [tf.uint8, tf.float32, tf.int32, tf.bool, tf.float32, tf.int64, tf.bool])
    image, boxes, classes, is_crowd, area, image_id, ok = outputs
    image.set_shape([None, None, 3])
    boxes.set_shape([None, 4])
    for tensor in (classes, is_crowd, area):
        tensor.set_shape([None])
    image_id.set_shape([])
    ok.set_shape([])
    return {"image": image, "boxes": boxes, "classes": classes, "is_crowd": is_crowd,
            "area": area, "source_id": raw["source_id"],
            "image_id": image_id, "ok": ok}
