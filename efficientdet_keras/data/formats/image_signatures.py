"""What image files hold by their first bytes: the formats TensorFlow's decoders read (the
input pipeline's), told apart from those only Pillow reads (TIFF; WebP on a TensorFlow
without its decoder), which are converted once before training (`data.readable_images`)."""

import functools
from typing import Optional, Sequence, Tuple

# File signatures of the formats tf.io.decode_image reads, WebP aside (RIFF....WEBP).
TENSORFLOW_SIGNATURES = {b"\xff\xd8\xff": "jpeg", b"\x89PNG\r\n\x1a\n": "png", b"GIF87a": "gif",
                         b"GIF89a": "gif", b"BM": "bmp"}
# Signatures of image formats a camera or an editor writes, to name them when no reader can.
_KNOWN_FORMATS = ((4, b"ftypheic", "HEIC"), (4, b"ftypheix", "HEIC"), (4, b"ftypmif1", "HEIF"),
                  (4, b"ftypavif", "AVIF"), (0, b"\x00\x00\x00\x0cjP  ", "JPEG 2000"),
                  (0, b"\xff\x4f\xff\x51", "JPEG 2000"), (0, b"\xff\x0a", "JPEG XL"),
                  (0, b"\x00\x00\x00\x0cJXL ", "JPEG XL"), (0, b"II*\x00", "TIFF"),
                  (0, b"MM\x00*", "TIFF"))


def known_format(head: bytes) -> Optional[str]:
    """The name of the image format a file's first 16 bytes show, among those TensorFlow does
    not decode; None for bytes of no known format."""
    return next((name for offset, signature, name in _KNOWN_FORMATS
                 if head[offset:offset + len(signature)] == signature), None)


@functools.lru_cache(maxsize=None)
def tensorflow_decodes_webp() -> bool:
    """TensorFlow 2.18 and later: tf.io.decode_image reads WebP too."""
    import tensorflow as tf
    return hasattr(tf.io, "decode_webp")


def signature_format(head: bytes) -> Optional[str]:
    """"jpeg", "png", "gif", "bmp", "webp", or None, from a file's first 12 bytes."""
    for signature, name in TENSORFLOW_SIGNATURES.items():
        if head.startswith(signature):
            return name
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp"
    return None


def tensorflow_reads(head: bytes) -> bool:
    """Whether the running TensorFlow decodes an image that starts with `head`."""
    found = signature_format(head)
    return found is not None and (found != "webp" or tensorflow_decodes_webp())


def unreadable_formats_line(unread: Sequence[Tuple[str, str]], total: int) -> str:
    """The refusal of images in known formats no reader here decodes ((path, format name)
    each), out of `total`."""
    formats = sorted({name for _, name in unread})
    return ("%d of the %d images are %s, which neither TensorFlow nor Pillow reads here, such "
            "as %s: convert them to JPEG or PNG (or install Pillow's plugin for %s)" % (
                len(unread), total, " or ".join(formats), unread[0][0], " and ".join(formats)))
