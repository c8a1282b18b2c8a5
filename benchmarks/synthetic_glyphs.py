"""A second synthetic dataset, harder than the demo's: striped glyphs in poor light.

Four classes the demo never draws (ring, diamond, hourglass, bars), each filled with
diagonal stripes of two random colours instead of one flat colour, on the demo's
gradient backgrounds with striped rectangles that are not objects. Each finished image
gets its own contrast (0.35-1x) and brightness (+-50) and strong pixel noise, so images
differ in their statistics as photos do. Object sides are 12-45% of the image side,
1-5 objects per image, as in the demo. It measures what a recipe does on
data it was not tuned on (the short-run benchmark, `python benchmarks/bench.py
--what=short_runs`). A client of the library's ShapeStyle:

    from benchmarks.synthetic_glyphs import GLYPHS
    from efficientdet_keras.data.synthetic import write_synthetic_dataset
    data = write_synthetic_dataset("data/glyphs", 512, 96, image_size=128, style=GLYPHS)
"""

import numpy as np

from efficientdet_keras.data.synthetic import ShapeStyle, contrasting_color, make_background

GLYPHS_LABEL_MAP = {1: "ring", 2: "diamond", 3: "hourglass", 4: "bars"}
RING, DIAMOND, HOURGLASS, BARS = 1, 2, 3, 4
# Standard deviation of the pixel noise added over the finished image (the demo: 4).
PIXEL_NOISE = 16.0
# Stripe width as a fraction of the object's side.
STRIPE_FRACTION = 0.2
# Striped rectangles that are not objects: the stripes alone must not mean "object".
MAX_DISTRACTORS = 3
# Each image's contrast is scaled by a factor in this range and its brightness shifted
# by up to this much, as lighting differs between photos.
CONTRAST_RANGE = (0.35, 1.0)
MAX_BRIGHTNESS_SHIFT = 50.0


def glyph_mask(class_id: int, size: int) -> np.ndarray:
    """The filled glyph of a class in a size x size window: bool [size, size].

    Every glyph touches all four sides of its window, so its tight box is the window.
    """
    centres = np.arange(size, dtype=np.float32) + 0.5
    y, x = centres[:, None], centres[None, :]
    half = size / 2.0
    if class_id == RING:  # an annulus whose hole is 0.55 of its radius
        distance = np.sqrt((y - half) ** 2 + (x - half) ** 2)
        return (distance <= half) & (distance >= 0.55 * half)
    if class_id == DIAMOND:
        return np.abs(y - half) + np.abs(x - half) <= half
    if class_id == HOURGLASS:  # two triangles meeting at the centre, bases top and bottom
        return np.abs(x - half) <= np.abs(y - half) + 0.5
    if class_id == BARS:  # three horizontal bars, the gaps between them as wide as a bar
        band = np.floor(y * 5.0 / size).astype(int)
        return np.broadcast_to(band % 2 == 0, (size, size)).copy()
    raise ValueError("class_id must be one of %s, got %r" % (sorted(GLYPHS_LABEL_MAP), class_id))


def striped_fill(rng: np.random.Generator, under: np.ndarray, size: int) -> np.ndarray:
    """Diagonal stripes of two colours, each contrasting with the pixels `under` the glyph.

    Returns float32 [size, size, 3].
    """
    first, second = contrasting_color(rng, under), contrasting_color(rng, under)
    period = max(2.0, 2.0 * STRIPE_FRACTION * size)
    diagonal = np.arange(size)[:, None] + np.arange(size)[None, :] * rng.choice([-1, 1])
    stripes = (np.floor(diagonal / (period / 2.0)) % 2).astype(bool)
    return np.where(stripes[..., None], first, second).astype(np.float32)


def glyph_background(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """The demo's gradient background with up to MAX_DISTRACTORS striped rectangles on it.

    Returns float32 [H, W, 3] in 0..255.
    """
    image = make_background(rng, height, width)
    short_side = min(height, width)
    for _ in range(rng.integers(0, MAX_DISTRACTORS + 1)):
        patch_h, patch_w = (int(v) for v in rng.integers(short_side // 10, short_side // 3, 2))
        top = int(rng.integers(0, height - patch_h + 1))
        left = int(rng.integers(0, width - patch_w + 1))
        window = image[top:top + patch_h, left:left + patch_w]
        stripes = striped_fill(rng, window.reshape(-1, 3), max(patch_h, patch_w))
        window[...] = stripes[:patch_h, :patch_w]
    return image


def change_lighting(rng: np.random.Generator, image: np.ndarray) -> np.ndarray:
    """Scales the contrast about the image's mean, shifts its brightness, adds pixel noise."""
    contrast = np.float32(rng.uniform(*CONTRAST_RANGE))
    shift = np.float32(rng.uniform(-MAX_BRIGHTNESS_SHIFT, MAX_BRIGHTNESS_SHIFT))
    mean = image.mean(axis=(0, 1), keepdims=True)
    image = mean + (image - mean) * contrast + shift
    return image + rng.standard_normal(size=image.shape, dtype=np.float32) * np.float32(PIXEL_NOISE)


GLYPHS = ShapeStyle(GLYPHS_LABEL_MAP, glyph_mask, striped_fill, glyph_background,
                    change_lighting, "glyphs")
