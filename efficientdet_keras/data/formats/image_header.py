"""What an image file's header says, read without decoding its pixels: the stored size and the
EXIF orientation, and how boxes drawn on the image as displayed (turned by that orientation, as
labelling tools show it) map onto the stored pixels, which this package decodes unturned."""

from typing import Tuple

import numpy as np

# The image files a dataset folder is searched for (compared in lower case): Ultralytics'
# list, which leaves GIF out. TIFF is read through Pillow (`data.readable_images`); HEIC is
# listed to be refused in one line when Pillow has no plugin for it.
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".heic")
# The same, as a file beside an annotation may spell them (compared as they are).
IMAGE_EXTENSIONS_EITHER_CASE = IMAGE_EXTENSIONS + tuple(e.upper() for e in IMAGE_EXTENSIONS)

# The EXIF orientations that turn the image a quarter (with a mirror for 5 and 7): the
# displayed width is the stored height.
QUARTER_TURNS = (5, 6, 7, 8)


def stored_size_and_orientation(image_path: str) -> Tuple[int, int, int]:
    """(height, width, EXIF orientation 1..8) from the header.

    Raises:
      OSError, ValueError, SyntaxError or PIL's DecompressionBombError when PIL cannot open
      the file (callers name it).
    """
    from PIL import Image
    with Image.open(image_path) as image:
        width, height = image.size
        # getexif() of a PNG without an eXIf chunk before its pixels decodes them to look
        # further: only ask when the header held EXIF.
        orientation = image.getexif().get(0x0112, 1) if "exif" in image.info else 1
    return height, width, orientation if orientation in range(1, 9) else 1


def displayed_to_stored(boxes: np.ndarray, orientation: int) -> np.ndarray:
    """[x1, y1, x2, y2] normalised boxes of the displayed image onto the stored one."""
    x1, y1, x2, y2 = boxes.T
    if orientation in QUARTER_TURNS:  # Axes swap.
        x1, y1, x2, y2 = y1, x1, y2, x2
    # The stored axes that run backwards in the displayed image.
    flip_x = orientation in (2, 3, 7, 8)
    flip_y = orientation in (3, 4, 6, 7)
    if flip_x:
        x1, x2 = 1.0 - x2, 1.0 - x1
    if flip_y:
        y1, y2 = 1.0 - y2, 1.0 - y1
    return np.stack([x1, y1, x2, y2], axis=1)
