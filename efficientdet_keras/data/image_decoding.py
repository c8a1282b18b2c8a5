"""Image bytes into pixels as graph ops: the format from the file signature, the size the
header claims (read without decoding, so oversized images are never decoded), and decoding."""

import tensorflow as tf

from efficientdet_keras.data.image_limits import MAX_IMAGE_PIXELS

# File signatures of the formats tf.io.decode_image reads.
IMAGE_SIGNATURES = {b"\xff\xd8\xff": "jpeg", b"\x89PNG\r\n\x1a\n": "png", b"GIF87a": "gif",
                    b"GIF89a": "gif", b"BM": "bmp"}


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


def decode_unless_oversized(data: tf.Tensor):
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
