"""One image's scale as factors of its boxes, in numpy alone (the file runners import no
TensorFlow); `postprocess.box_scale_factors` is the batched graph form."""

import numpy as np


def image_box_factors(image_scale) -> np.ndarray:
    """One image's scale, original pixels per input pixel (a number, or [y, x] with
    resize_mode stretch), as float32 [4] factors of its [ymin, xmin, ymax, xmax] boxes."""
    scale = np.asarray(image_scale, np.float32).reshape(-1)
    return np.tile(scale, 4 // scale.size)


def plain_scale(image_scale):
    """A scale tensor or array as a float (one scale) or float32 numpy [y, x] (stretch)."""
    scale = np.asarray(image_scale, np.float32)
    return float(scale) if scale.ndim == 0 else scale
