"""The input pipeline's images back as the uint8 pixels they were: its normalisation undone.

The pipeline subtracts mean_rgb and divides by stddev_rgb; undoing that and rounding gives the
letterboxed image the network saw, padding as the mean colour. The evaluation of an exported file
feeds it these pixels, and the pictures drawn for people (evaluation images, the augmentation
preview) show them.
"""

import numpy as np


def to_uint8(image) -> np.ndarray:
    """Rounds float pixel values (0..255) to uint8, clipping what resizing overshoots."""
    return np.clip(np.round(np.asarray(image, np.float32)), 0, 255).astype(np.uint8)


def pipeline_images_to_uint8(images, config) -> np.ndarray:
    """Normalised pipeline images [..., 3] (any float dtype) -> uint8 pixels of the same shape:
    x * stddev_rgb + mean_rgb, rounded."""
    mean = np.asarray(config.mean_rgb, np.float32)
    stddev = np.asarray(config.stddev_rgb, np.float32)
    return to_uint8(np.asarray(images, np.float32) * stddev + mean)
