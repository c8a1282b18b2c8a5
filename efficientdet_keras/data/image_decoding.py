"""Image bytes into pixels as graph ops: the format from the file signature, the size the
header claims (read without decoding, so oversized images are never decoded), and decoding."""

import tensorflow as tf

from efficientdet_keras.data.image_limits import MAX_IMAGE_PIXELS

from efficientdet_keras.data.formats.image_signatures import (TENSORFLOW_SIGNATURES,
                                                               tensorflow_decodes_webp)


def image_format_graph(data: tf.Tensor) -> tf.Tensor:
    """The format name ("jpeg", "png", "gif", "bmp", "webp") of image bytes from their
    signature, or "" (string scalar)."""
    name = tf.constant("")
    for signature, format_name in TENSORFLOW_SIGNATURES.items():
        matches = tf.equal(tf.strings.substr(data, 0, len(signature)), signature)
        name = tf.where(matches, format_name, name)
    if tensorflow_decodes_webp():  # RIFF, the file's length, WEBP (padded: substr's
        # position may not pass the end of a shorter string).
        head = tf.strings.join([tf.strings.substr(data, 0, 12), b"\0" * 12])
        webp = tf.logical_and(tf.equal(tf.strings.substr(head, 0, 4), b"RIFF"),
                              tf.equal(tf.strings.substr(head, 8, 4), b"WEBP"))
        name = tf.where(webp, "webp", name)
    return name


def _unsigned(data: tf.Tensor, offset: int, size: int, big_endian: bool) -> tf.Tensor:
    """The unsigned integer of `size` bytes at `offset` of a string scalar (int64; 0 where the
    string is too short)."""
    padded = tf.strings.join([data, b"\0" * (offset + size)])
    raw = tf.io.decode_raw(tf.strings.substr(padded, offset, size), tf.uint8)
    weights = [256 ** (size - 1 - i) if big_endian else 256 ** i for i in range(size)]
    return tf.reduce_sum(tf.cast(raw, tf.int64) * tf.constant(weights, tf.int64))


def _webp_pixels(data: tf.Tensor) -> tf.Tensor:
    """The pixels of a WebP's canvas (VP8X), lossless (VP8L) or lossy (VP8) frame header."""
    chunk = tf.strings.substr(tf.strings.join([data, b"\0" * 16]), 12, 4)
    extended = (_unsigned(data, 24, 3, False) + 1) * (_unsigned(data, 27, 3, False) + 1)
    bits = _unsigned(data, 21, 4, False)
    lossless = (tf.bitwise.bitwise_and(bits, 0x3FFF) + 1) * (
        tf.bitwise.bitwise_and(tf.bitwise.right_shift(bits, 14), 0x3FFF) + 1)
    lossy = tf.bitwise.bitwise_and(_unsigned(data, 26, 2, False), 0x3FFF) * \
        tf.bitwise.bitwise_and(_unsigned(data, 28, 2, False), 0x3FFF)
    return tf.where(tf.equal(chunk, b"VP8X"), extended,
                    tf.where(tf.equal(chunk, b"VP8L"), lossless, lossy))


def header_pixels(data: tf.Tensor, image_format: tf.Tensor) -> tf.Tensor:
    """The pixel count the image's header claims (int64 scalar), read without decoding: the
    JPEG frame header (an error when it has none), PNG's IHDR, GIF's logical screen, BMP's
    info header, WebP's frame or canvas header; 0 for other bytes."""
    def jpeg():
        shape = tf.cast(tf.image.extract_jpeg_shape(data), tf.int64)
        return shape[0] * shape[1]
    png = _unsigned(data, 16, 4, True) * _unsigned(data, 20, 4, True)
    gif = _unsigned(data, 6, 2, False) * _unsigned(data, 8, 2, False)
    bmp_height = _unsigned(data, 22, 4, False)  # Negative (top-down rows) as two's complement.
    bmp_height = tf.where(bmp_height >= 2 ** 31, 2 ** 32 - bmp_height, bmp_height)
    bmp = _unsigned(data, 18, 4, False) * bmp_height
    known = tf.where(tf.equal(image_format, "png"), png, tf.where(
        tf.equal(image_format, "gif"), gif, tf.where(tf.equal(image_format, "bmp"), bmp, tf.where(
            tf.equal(image_format, "webp"), _webp_pixels(data), 0))))
    return tf.cond(tf.equal(image_format, "jpeg"), jpeg, lambda: known)


def decode_unless_oversized(data: tf.Tensor):
    """(uint8 [H, W, 3] image, the pixels its header claims): the image is [0, 0, 3], not
    decoded, when the header claims more than MAX_IMAGE_PIXELS."""
    pixels = header_pixels(data, image_format_graph(data))
    image = tf.cond(pixels > MAX_IMAGE_PIXELS, lambda: tf.zeros([0, 0, 3], tf.uint8),
                    lambda: _decode_image(data))
    return image, pixels


def _decode_image(data: tf.Tensor) -> tf.Tensor:
    """uint8 [H, W, 3]: greyscale and RGBA become RGB, CMYK JPEG RGB, 16-bit PNG 8-bit; a
    WebP's alpha (which its decoder keeps whatever channels are asked for) is dropped."""
    def webp():
        return tf.io.decode_image(data, channels=0, expand_animations=False,
                                  dtype=tf.uint8)[:, :, :3]
    image = tf.cond(tf.equal(image_format_graph(data), "webp"), webp,
                    lambda: tf.io.decode_image(data, channels=3, expand_animations=False,
                                               dtype=tf.uint8))
    image.set_shape([None, None, 3])
    return image
