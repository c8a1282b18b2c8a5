"""What the Detector accepts as images: numpy arrays, PIL images and file paths."""

import os
from typing import List, Tuple

import numpy as np

from efficientdet_keras.data.image_limits import MAX_IMAGE_PIXELS, oversized_message
from efficientdet_keras.utils.drawing import as_uint8_image


def load_image(image) -> np.ndarray:
    """One image as uint8 [H, W, 3].

    Args:
      image: a file path (str or os.PathLike), a PIL image (any mode), or an array / tensor
        [H, W], [H, W, 1], [H, W, 3] or [H, W, 4] (grayscale repeated, alpha dropped;
        float values taken as 0..255).

    Raises:
      FileNotFoundError naming a missing file; ValueError naming a file that is not a
      decodable image, or describing an array of another shape.
    """
    from PIL import Image
    if isinstance(image, (str, os.PathLike)):
        return _read_image_file(os.fspath(image))
    if isinstance(image, Image.Image):
        return np.asarray(image.convert("RGB"))
    array = np.asarray(image)
    if array.ndim == 3 and array.shape[-1] == 1:
        array = array[..., 0]
    array = as_uint8_image(array)
    if array.shape[0] == 0 or array.shape[1] == 0:
        raise ValueError("expected an image with pixels, got shape %s" % (list(array.shape),))
    return array


def _read_image_file(path: str) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError
    if not os.path.isfile(path):
        raise FileNotFoundError("%s: no such image file" % path)
    try:
        with Image.open(path) as opened:  # Reads the header only.
            width, height = opened.size
            if width * height > MAX_IMAGE_PIXELS:
                raise _Oversized(height, width)
            return np.asarray(opened.convert("RGB"))
    except _Oversized as e:
        raise ValueError("%s: %s" % (path, oversized_message(e.height, e.width))) from None
    except Image.DecompressionBombError as e:  # Pillow's own bound, met before ours.
        raise ValueError("%s: %s" % (path, e)) from None
    except (UnidentifiedImageError, OSError, SyntaxError) as e:
        raise ValueError("%s is not a decodable image (%s)" % (path, e)) from None


class _Oversized(Exception):
    def __init__(self, height: int, width: int):
        super().__init__()
        self.height, self.width = height, width


def image_list(images) -> Tuple[List[np.ndarray], bool]:
    """(uint8 [H, W, 3] images, whether `images` was one image).

    A list or tuple is a list of images, and so is an array [B, H, W, 3]; anything else is
    one image.
    """
    if isinstance(images, (list, tuple)):
        return [load_image(image) for image in images], False
    if not isinstance(images, (str, os.PathLike)) and getattr(images, "ndim", 0) == 4:
        return [load_image(image) for image in images], False
    return [load_image(images)], True


def group_by_shape(images: List[np.ndarray]) -> List[List[int]]:
    """Indices of `images` in groups of one shape (first appearance order), to run as batches."""
    groups = {}
    for index, image in enumerate(images):
        groups.setdefault(image.shape, []).append(index)
    return list(groups.values())
