"""Pictures of detections: labelled boxes on an image, two pictures side by side, a grid.

Used by the Python Detector (`Detector.draw`), efficientdet-infer, the evaluation
images of training and efficientdet-eval, and the data check (and its augmentation
preview). Pillow draws; images go in and come out as uint8 numpy arrays [H, W, 3].

Boxes are [ymin, xmin, ymax, xmax] in pixels of the image they are drawn on.
"""

from typing import Mapping, Optional, Sequence

import numpy as np

# One colour per class id, cycled (RGB); class id 1 gets the first.
PALETTE = ((230, 57, 70), (42, 157, 143), (69, 123, 230), (244, 162, 97), (181, 82, 205),
           (38, 198, 218), (233, 196, 106), (120, 200, 80), (255, 120, 180), (150, 150, 150))


def class_colour(class_id: int):
    """The RGB colour of a class id (1-based ids; the palette repeats)."""
    return PALETTE[(int(class_id) - 1) % len(PALETTE)]


def class_name(class_id: int, label_map: Optional[Mapping[int, str]]) -> str:
    """The label map's name of a class id, or the id as text."""
    if label_map and int(class_id) in label_map:
        return str(label_map[int(class_id)])
    return str(int(class_id))


def as_uint8_image(image) -> np.ndarray:
    """A uint8 [H, W, 3] array from a numpy array, a tensor or a PIL image."""
    array = np.asarray(image)
    if array.ndim == 2:
        array = np.stack([array] * 3, axis=-1)
    if array.ndim != 3 or array.shape[-1] not in (3, 4):
        raise ValueError("expected an image of shape [H, W, 3], got %s" % (list(array.shape),))
    array = array[..., :3]
    if array.dtype != np.uint8:
        array = np.clip(np.round(array.astype(np.float32)), 0, 255).astype(np.uint8)
    return array


def draw_boxes(image, boxes, classes, scores=None,
               label_map: Optional[Mapping[int, str]] = None,
               score_threshold: float = 0.0, line_width: int = 2,
               labels: Optional[Sequence[str]] = None) -> np.ndarray:
    """Draws boxes coloured by class, each labelled "name" or "name 0.87".

    Args:
      image: uint8 [H, W, 3] (numpy, tensor or PIL image); not modified.
      boxes: [n, 4] ymin, xmin, ymax, xmax in pixels of `image`.
      classes: [n] class ids 1..num_classes; ids < 1 (padding) are skipped.
      scores: [n] or None (ground truth: names only).
      label_map: {class id: name}; ids are written as numbers without it.
      score_threshold: boxes scoring below it are not drawn.
      labels: [n] each box's text instead of its class name (a tracked object's id).

    Returns:
      uint8 [H, W, 3], a new array.
    """
    from PIL import Image, ImageDraw

    picture = Image.fromarray(as_uint8_image(image))
    canvas = ImageDraw.Draw(picture)
    boxes = np.asarray(boxes, np.float32).reshape(-1, 4)
    classes = np.asarray(classes).reshape(-1).astype(np.int64)
    shown = classes >= 1
    if scores is not None:
        scores = np.asarray(scores, np.float32).reshape(-1)
        shown &= scores >= score_threshold
    for i in np.flatnonzero(shown):
        ymin, xmin, ymax, xmax = (float(v) for v in boxes[i])
        colour = class_colour(classes[i])
        canvas.rectangle([xmin, ymin, xmax, ymax], outline=colour, width=line_width)
        label = labels[i] if labels is not None else class_name(classes[i], label_map)
        if scores is not None:
            label += " %.2f" % scores[i]
        left, top, right, bottom = canvas.textbbox((xmin, ymin), label)
        # The label sits above the box when there is room, else inside its top edge.
        shift = bottom - top + 2 if top - (bottom - top + 2) >= 0 else 0
        canvas.rectangle([left, top - shift, right + 2, bottom - shift], fill=colour)
        canvas.text((xmin + 1, ymin - shift), label, fill=(0, 0, 0))
    return np.asarray(picture)


def side_by_side(left, right, titles: Sequence[str] = (), gap: int = 4) -> np.ndarray:
    """Two images next to each other on a white background, with optional titles above.

    Args:
      left, right: uint8 [H1, W1, 3] and [H2, W2, 3]; heights may differ.
      titles: () or two strings drawn above the images.
      gap: white pixels between them.

    Returns:
      uint8 [max(H1, H2) + title height, W1 + gap + W2, 3].
    """
    from PIL import Image, ImageDraw

    left, right = as_uint8_image(left), as_uint8_image(right)
    title_height = 14 if titles else 0
    height = max(left.shape[0], right.shape[0]) + title_height
    width = left.shape[1] + gap + right.shape[1]
    picture = Image.new("RGB", (width, height), (255, 255, 255))
    picture.paste(Image.fromarray(left), (0, title_height))
    picture.paste(Image.fromarray(right), (left.shape[1] + gap, title_height))
    if titles:
        canvas = ImageDraw.Draw(picture)
        for x, title in zip((0, left.shape[1] + gap), titles):
            canvas.text((x + 2, 1), title, fill=(0, 0, 0))
    return np.asarray(picture)


def image_grid(images: Sequence, columns: Optional[int] = None, gap: int = 4) -> np.ndarray:
    """Images of one size in rows of `columns` (default: a near-square grid), left to right
    then top to bottom, on a white background.

    Args:
      images: n >= 1 uint8 [H, W, 3] images of the same size.
      columns: tiles per row; default ceil(sqrt(n)).
      gap: white pixels between tiles.

    Returns:
      uint8 [rows * (H + gap) - gap, columns * (W + gap) - gap, 3], rows = ceil(n / columns).
    """
    tiles = [as_uint8_image(image) for image in images]
    if not tiles:
        raise ValueError("image_grid needs at least one image")
    height, width = tiles[0].shape[:2]
    if any(tile.shape[:2] != (height, width) for tile in tiles):
        raise ValueError("image_grid needs images of one size, got %s"
                         % sorted({tile.shape[:2] for tile in tiles}))
    columns = columns or int(np.ceil(np.sqrt(len(tiles))))
    rows = -(-len(tiles) // columns)
    grid = np.full([rows * (height + gap) - gap, columns * (width + gap) - gap, 3], 255, np.uint8)
    for i, tile in enumerate(tiles):
        top, left = (i // columns) * (height + gap), (i % columns) * (width + gap)
        grid[top:top + height, left:left + width] = tile
    return grid


def encode_png(image) -> bytes:
    """PNG bytes of a uint8 [H, W, 3] image (to write with fileio.write_bytes_atomically)."""
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(as_uint8_image(image)).save(buffer, format="PNG")
    return buffer.getvalue()
