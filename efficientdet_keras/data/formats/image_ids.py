"""One rule that turns any image id a dataset can have into an exact int64.

Datasets name images by integers (COCO), numeric strings ("000123", VOC and
TFRecord source ids) or other strings (file names, UUIDs). Evaluation needs one
int64 per image, the same for the TFRecord / image-folder side and for the
ground-truth JSON side, and never a float (float64 is exact only up to 2^53):

- an int in the int64 range is itself (2^63 - 1 stays 2^63 - 1);
- a string of decimal digits whose value fits int64 is that value ("000123" -> 123,
  so a TFRecord source id "123" matches a JSON id 123);
- any other string is hashed (TensorFlow's FarmHash Fingerprint64 modulo 2^63 - 1,
  `tf.strings.to_hash_bucket_fast`): stable across runs, machines and versions, and
  the same op in Python and in input pipelines (`image_id_to_int64_graph`), so a JSON
  id "img_a.jpg" and a TFRecord source id "img_a.jpg" get the same number.

Two different ids of one dataset that map to the same number (e.g. "0123" and
123) are reported as duplicates where a dataset's ids are read.
"""

import re
from typing import Union

import numpy as np

INT64_MIN, INT64_MAX = -2 ** 63, 2 ** 63 - 1
_DIGITS = re.compile(r"[0-9]+")

ImageId = Union[int, str, bytes]


def image_id_to_int64(image_id: ImageId) -> int:
    """The int64 (as a Python int) that stands for `image_id` everywhere in evaluation.

    Raises:
      ValueError naming the id when it is an int outside int64, or not an int or a string.
    """
    if isinstance(image_id, (bytes, np.bytes_)):
        image_id = image_id.decode("utf-8", errors="surrogateescape")
    if isinstance(image_id, (int, np.integer)) and not isinstance(image_id, (bool, np.bool_)):
        value = int(image_id)
        if not INT64_MIN <= value <= INT64_MAX:
            raise ValueError("Image id %d does not fit in int64" % value)
        return value
    if not isinstance(image_id, str):
        raise ValueError("Image id %r is neither an integer nor a string" % (image_id,))
    if _DIGITS.fullmatch(image_id) and int(image_id) <= INT64_MAX:
        return int(image_id)
    import tensorflow as tf
    text = image_id.encode("utf-8", errors="surrogateescape")
    return int(tf.strings.to_hash_bucket_fast(text, INT64_MAX).numpy())


def image_id_to_int64_graph(source_id):
    """`image_id_to_int64` of a string scalar tensor, as TensorFlow ops (int64 scalar)."""
    import tensorflow as tf
    digits = tf.strings.regex_full_match(source_id, "[0-9]+")
    # Leading zeros do not count; 19 digits fit int64 when the first 18, times 10,
    # plus the last stay within INT64_MAX.
    stripped = tf.strings.regex_replace(source_id, "^0+([0-9])", "\\1")
    length = tf.strings.length(stripped)
    safe = tf.where(digits, stripped, "0")
    head = tf.strings.to_number(tf.strings.substr(safe, 0, 18), tf.int64)
    last = tf.strings.to_number(tf.strings.substr(tf.strings.join(["0", safe]), -1, 1), tf.int64)
    fits = tf.logical_or(length <= 18, tf.logical_and(
        tf.equal(length, 19), head <= (INT64_MAX - last) // 10))
    number = tf.where(length <= 18, head, head * 10 + last)
    hashed = tf.strings.to_hash_bucket_fast(source_id, INT64_MAX)
    return tf.where(tf.logical_and(digits, fits), number, hashed)
