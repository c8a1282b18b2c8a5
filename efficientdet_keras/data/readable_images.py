"""Images TensorFlow's decoders cannot read, made readable once before training: a TIFF (or,
on a TensorFlow without a WebP decoder, a WebP) is decoded by Pillow into a PNG of the same
stored pixels, kept in a cache folder keyed by the file's path, size and time, so the input
pipeline reads it as any other image. Images in a known format that neither reads (HEIC,
AVIF, JPEG 2000 or JPEG XL without their Pillow plugins) stop the run before it starts, with
their count; bytes that are no image at all are left to the pipeline, which names and skips
each."""

import dataclasses
import hashlib
import logging
import os
from typing import List, Optional, Sequence

import numpy as np

from efficientdet_keras.data.formats.image_signatures import (known_format, tensorflow_reads,
                                                               unreadable_formats_line)
from efficientdet_keras.data.formats.records import ImageRecord

def tensorflow_readable(records: Sequence[ImageRecord],
                        cache_dir: Optional[str] = None) -> List[ImageRecord]:
    """The records, those whose image TensorFlow cannot decode pointing at a PNG Pillow made
    of it (made once; cache_dir: where, by default the package's cache folder).

    Raises:
      ValueError with the count and one file, when images in a known format neither
        TensorFlow nor Pillow reads are among them.
    """
    readable, unread = [], []
    for record in records:
        head = _head(record.path)
        if head is None or tensorflow_reads(head):
            readable.append(record)  # A missing file is the pipeline's to name.
            continue
        converted = _converted(record.path, cache_dir or _default_cache_dir())
        if converted is None and known_format(head):
            unread.append((record.path, known_format(head)))
        readable.append(dataclasses.replace(record, path=converted) if converted else record)
    if unread:
        raise ValueError(unreadable_formats_line(unread, len(records)))
    return readable


def _head(path: str) -> Optional[bytes]:
    try:
        with open(path, "rb") as f:
            return f.read(16)
    except OSError:
        return None


def _default_cache_dir() -> str:
    from efficientdet_keras.checkpoint.download import cache_dir
    return os.path.join(cache_dir(), "converted_images")


def _converted(path: str, cache_dir: str) -> Optional[str]:
    """The PNG of `path`'s stored pixels (8-bit RGB), made unless there; None when Pillow
    cannot decode the file."""
    stat = os.stat(path)
    key = "%s\0%d\0%d" % (os.path.realpath(path), stat.st_size, stat.st_mtime_ns)
    folder = os.path.join(cache_dir, hashlib.sha1(key.encode()).hexdigest()[:16])
    target = os.path.join(folder, os.path.splitext(os.path.basename(path))[0] + ".png")
    if os.path.isfile(target):
        return target
    from PIL import Image, UnidentifiedImageError
    try:
        with Image.open(path) as image:
            pixels = _rgb8(image)
    except (OSError, ValueError, UnidentifiedImageError, Image.DecompressionBombError) as e:
        logging.debug("Pillow cannot read %s: %s", path, e)
        return None
    from efficientdet_keras.utils.fileio import write_atomically
    os.makedirs(folder, exist_ok=True)
    write_atomically(target, lambda f: Image.fromarray(pixels).save(f, format="PNG"),
                     binary=True)
    logging.info("%s: read by Pillow once into %s (TensorFlow does not decode it)", path, target)
    return target


def _rgb8(image) -> np.ndarray:
    """uint8 [H, W, 3] of a Pillow image's first frame: 16-bit samples to their high byte."""
    if image.mode.startswith("I;16") or image.mode == "I":
        samples = np.asarray(image, np.int64)
        if image.mode != "I" or samples.max() > 255:
            samples = samples >> 8
        grey = np.clip(samples, 0, 255)
        return np.repeat(grey.astype(np.uint8)[:, :, None], 3, axis=2)
    return np.asarray(image.convert("RGB"), np.uint8)
