"""A built-in synthetic detection dataset: coloured shapes on textured backgrounds.

(`ShapeStyle` lets another dataset reuse the drawing and writing: the short-run benchmark's
striped glyphs, benchmarks/synthetic_glyphs.py in the repository, are one.)

Four classes (circle, square, triangle, cross) are drawn with pure numpy onto a
smooth colour gradient with faint texture, noise, lines and blobs. Colours are
drawn independently of the class, so a detector has to learn shape. Everything
is deterministic given the seed: image `i` is drawn from its own generator
seeded with (seed, image_id), so train and val never share an image.

`write_synthetic_dataset` writes JPEG folders, COCO instances JSON and
TFRecords (the layouts of `data.formats.coco_json` and `data.formats.tf_example`), and reuses a complete dataset
already written with the same parameters (see `manifest.json`).
"""

import dataclasses
import json
import os
import shutil
from typing import Callable, Dict, Iterator, List, Optional, Tuple, Union

import numpy as np
import tensorflow as tf

from efficientdet_keras.data.formats.coco_json import records_to_coco
from efficientdet_keras.data.formats.records import ImageRecord
from efficientdet_keras.data.tfrecord_writer import write_tfrecords
from efficientdet_keras.utils.fileio import (write_bytes_atomically, write_json_atomically,
                                       write_text_atomically)
from efficientdet_keras.utils.progress import ProgressBar

SYNTHETIC_LABEL_MAP = {1: "circle", 2: "square", 3: "triangle", 4: "cross"}
CIRCLE, SQUARE, TRIANGLE, CROSS = 1, 2, 3, 4

MIN_SIZE_FRACTION = 0.12  # object side, as a fraction of the image's shorter side
MAX_SIZE_FRACTION = 0.45
MAX_OBJECTS = 5
MAX_OVERLAP = 0.3  # of the smaller box's area; keeps every object mostly visible
MIN_CONTRAST = 60.0  # RGB distance between an object's colour and every pixel under it

# Bump when the drawing changes, so that cached datasets are regenerated.
GENERATOR_VERSION = 1
MANIFEST_NAME = "manifest.json"


# --- Drawing -----------------------------------------------------------------

def shape_mask(class_id: int, size: int) -> np.ndarray:
    """The filled shape of a class in a size x size window: bool [size, size].

    Every shape touches all four sides of its window, so its tight box is the
    window. Pixel centres are at (i + 0.5).
    """
    centres = np.arange(size, dtype=np.float32) + 0.5
    y, x = centres[:, None], centres[None, :]
    half = size / 2.0
    if class_id == CIRCLE:
        return (y - half) ** 2 + (x - half) ** 2 <= half ** 2
    if class_id == SQUARE:
        return np.ones([size, size], bool)
    if class_id == TRIANGLE:  # apex at the top centre, base along the bottom row
        # The +0.5 widens the apex to a pixel, so the top row is never empty.
        return np.abs(x - half) <= y * (half / size) + 0.5
    if class_id == CROSS:  # a plus sign; bars a third of the size thick
        half_bar = max(size / 6.0, 0.5)
        return (np.abs(x - half) <= half_bar) | (np.abs(y - half) <= half_bar)
    raise ValueError("class_id must be one of %s, got %r" % (sorted(SYNTHETIC_LABEL_MAP), class_id))


def paint_shape(image: np.ndarray, class_id: int, top: int, left: int, size: int,
                color, mask_fn: Callable[[int, int], np.ndarray] = shape_mask) -> np.ndarray:
    """Paints a shape onto `image` [H, W, 3] in place; returns its tight box.

    The shape's window must lie inside the image. `color` is one colour [3] or one per
    pixel of the window [size, size, 3]; `mask_fn(class_id, size)` gives the shape.

    Returns:
      float32 [4], [ymin, xmin, ymax, xmax] in pixels around the painted pixels.
    """
    mask = mask_fn(class_id, size)
    color = np.asarray(color, np.float32)
    window = image[top:top + size, left:left + size]
    window[mask] = color[mask] if color.ndim == 3 else color
    rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
    return np.array([top + rows[0], left + cols[0], top + rows[-1] + 1, left + cols[-1] + 1],
                    np.float32)


def _interpolation_matrix(length: int, cells: int) -> np.ndarray:
    """[length, cells] weights that linearly interpolate `cells` control points over `length`."""
    positions = np.linspace(0.0, cells - 1, length)
    lower = np.minimum(np.floor(positions).astype(int), cells - 2)
    frac = positions - lower
    weights = np.zeros([length, cells], np.float32)
    weights[np.arange(length), lower] = 1.0 - frac
    weights[np.arange(length), lower + 1] = frac
    return weights


def make_background(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """A textured background, float32 [H, W, 3] in 0..255.

    A gradient between four corner colours with a coarse texture on top, a few
    faint lines and blobs (distractors with edges), then low-amplitude noise.
    """
    cells = 6
    corners = rng.uniform(20.0, 235.0, size=[3, 2, 2]).astype(np.float32)
    to_cells = _interpolation_matrix(cells, 2)
    grid = to_cells @ corners @ to_cells.T  # [3, cells, cells], the gradient sampled on a grid
    grid += rng.uniform(-20.0, 20.0, size=grid.shape).astype(np.float32)
    # Bilinear upsampling as two matrix products: [3, H, cells] @ [cells, W].
    field = _interpolation_matrix(height, cells) @ grid @ _interpolation_matrix(width, cells).T
    image = np.ascontiguousarray(field.transpose(1, 2, 0))

    y = np.arange(height, dtype=np.float32)[:, None]
    x = np.arange(width, dtype=np.float32)[None, :]

    def blend(alpha):  # alpha float32 [H, W]: mix a random colour in
        color = rng.uniform(0.0, 255.0, size=3).astype(np.float32)
        image[...] += alpha[..., None] * (color - image)

    for _ in range(rng.integers(1, 4)):  # faint straight lines, 1 to 4 pixels wide
        angle = rng.uniform(0.0, np.pi)
        y0, x0 = rng.uniform(0, height), rng.uniform(0, width)
        sin, cos = np.float32(np.sin(angle)), np.float32(np.cos(angle))
        distance = np.abs((x - x0) * sin - (y - y0) * cos)
        on_line = distance <= np.float32(rng.uniform(0.5, 2.0))
        blend(on_line * np.float32(rng.uniform(0.1, 0.3)))
    for _ in range(rng.integers(0, 3)):  # faint soft blobs
        y0, x0 = rng.uniform(0, height), rng.uniform(0, width)
        radius = rng.uniform(0.05, 0.2) * min(height, width)
        falloff = np.exp(((y - y0) ** 2 + (x - x0) ** 2) * np.float32(-0.5 / radius ** 2))
        blend(falloff * np.float32(rng.uniform(0.1, 0.3)))
    image += rng.standard_normal(size=image.shape, dtype=np.float32) * np.float32(4.0)
    return np.clip(image, 0.0, 255.0)


def _too_close(box: np.ndarray, boxes: List[np.ndarray]) -> bool:
    """True when `box` covers more than MAX_OVERLAP of itself or of another box.

    Measuring against the smaller box (not IoU) also rejects a small object
    inside a big one, which the big one would then hide.
    """
    for other in boxes:
        inter_h = min(box[2], other[2]) - max(box[0], other[0])
        inter_w = min(box[3], other[3]) - max(box[1], other[1])
        if inter_h > 0 and inter_w > 0:
            smaller = min((box[2] - box[0]) * (box[3] - box[1]),
                          (other[2] - other[0]) * (other[3] - other[1]))
            if inter_h * inter_w > MAX_OVERLAP * smaller:
                return True
    return False


def contrasting_color(rng: np.random.Generator, under: np.ndarray, tries: int = 20) -> np.ndarray:
    """A random colour (independent of the class) far from every pixel in `under` [K, 3].

    Falls back to the best of `tries` candidates when none reaches MIN_CONTRAST.
    """
    best, best_distance = None, -1.0
    for _ in range(tries):
        color = rng.integers(0, 256, size=3).astype(np.float32)
        distance = float(np.sqrt(((under - color) ** 2).sum(axis=1)).min())
        if distance >= MIN_CONTRAST:
            return color
        if distance > best_distance:
            best, best_distance = color, distance
    return best


def solid_fill(rng: np.random.Generator, under: np.ndarray, size: int) -> np.ndarray:
    """One colour for a whole shape, contrasting with the pixels `under` it: float32 [3]."""
    del size
    return contrasting_color(rng, under)


@dataclasses.dataclass(frozen=True)
class ShapeStyle:
    """What a synthetic dataset draws: its classes, their masks and how they are filled.

    mask(class_id, size) -> bool [size, size], touching all four sides of the window;
    fill(rng, under [K, 3], size) -> float32 [3] or [size, size, 3] colours;
    background(rng, height, width) -> float32 [H, W, 3] in 0..255, drawn first;
    finish(rng, image float32 [H, W, 3]) -> the final image (0..255) once the objects
    are painted (lighting, noise).
    """
    label_map: Dict[int, str]
    mask: Callable[[int, int], np.ndarray]
    fill: Callable[[np.random.Generator, np.ndarray, int], np.ndarray] = solid_fill
    background: Callable[[np.random.Generator, int, int], np.ndarray] = make_background
    finish: Optional[Callable[[np.random.Generator, np.ndarray], np.ndarray]] = None
    name: str = "shapes"  # Recorded in manifest.json: another style is another dataset.


SHAPES = ShapeStyle(SYNTHETIC_LABEL_MAP, shape_mask)


def draw_example(rng: np.random.Generator, height: int, width: int,
                 style: ShapeStyle = SHAPES) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Draws one image with 1 to MAX_OBJECTS shapes of `style`.

    The background is `style.background(rng, height, width)` (make_background for
    SHAPES), drawn first from `rng` (so a copy of the generator reproduces it). Later
    objects may cover up to MAX_OVERLAP of an earlier one; boxes are the full shape's
    tight box. `style.finish`, when set, then changes the whole image.

    Returns:
      image: uint8 [H, W, 3].
      boxes: float32 [N, 4], [ymin, xmin, ymax, xmax] in pixels, 1 <= N <= MAX_OBJECTS.
      classes: int64 [N], ids 1..len(style.label_map) (SYNTHETIC_LABEL_MAP by default).
    """
    short_side = min(height, width)
    if short_side < 16:
        raise ValueError("synthetic images need sides >= 16 pixels, got %dx%d" % (height, width))
    image = style.background(rng, height, width)
    min_size = max(4, int(round(MIN_SIZE_FRACTION * short_side)))
    max_size = max(min_size, int(round(MAX_SIZE_FRACTION * short_side)))
    boxes, classes = [], []
    for _ in range(rng.integers(1, MAX_OBJECTS + 1)):
        class_id = int(rng.integers(1, len(style.label_map) + 1))
        size = int(rng.integers(min_size, max_size + 1))
        for _attempt in range(30):  # give up on this object when the image is too crowded
            top = int(rng.integers(0, height - size + 1))
            left = int(rng.integers(0, width - size + 1))
            window = np.array([top, left, top + size, left + size], np.float32)
            if not _too_close(window, boxes):
                break
        else:
            continue
        mask = style.mask(class_id, size)
        colours = style.fill(rng, image[top:top + size, left:left + size][mask], size)
        boxes.append(paint_shape(image, class_id, top, left, size, colours, style.mask))
        classes.append(class_id)
    if style.finish is not None:
        image = style.finish(rng, image)
    image = np.round(np.clip(image, 0.0, 255.0)).astype(np.uint8)
    return image, np.stack(boxes).astype(np.float32), np.array(classes, np.int64)


def generate_examples(num_images: int, height: int = 256, width: int = 256, seed: int = 0,
                      start_id: int = 1, image_dir: str = "",
                      style: ShapeStyle = SHAPES) -> Iterator[Tuple[ImageRecord, np.ndarray]]:
    """Yields (ImageRecord, image uint8 [H, W, 3]) for image ids start_id, start_id + 1, ...

    Image `i` depends only on (seed, i), not on how many images come before it.
    The record's path is `image_dir/<id as 6 digits>.jpg`; nothing is written.
    """
    for image_id in range(start_id, start_id + num_images):
        rng = np.random.default_rng([seed, image_id])
        image, boxes, classes = draw_example(rng, height, width, style)
        area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
        record = ImageRecord(image_id, os.path.join(image_dir, "%06d.jpg" % image_id), height,
                             width, boxes, classes, np.zeros(len(classes), bool),
                             area.astype(np.float32))
        yield record, image


# --- Writing a dataset folder --------------------------------------------------

@dataclasses.dataclass
class SyntheticDataset:
    """Paths of a written synthetic dataset (tfrecord patterns are None when not written)."""
    root: str
    train_images: str
    val_images: str
    train_json: str
    val_json: str
    train_tfrecord: Optional[str]
    val_tfrecord: Optional[str]
    label_map: Dict[int, str]
    num_train: int
    num_val: int


def _layout(out_dir: str, num_train: int, num_val: int, tfrecord: bool,
            num_shards: int, label_map: Dict[int, str]) -> SyntheticDataset:
    pattern = os.path.join(out_dir, "tfrecords", "%s-*-of-" + "%05d.tfrecord" % num_shards)
    return SyntheticDataset(
        root=out_dir,
        train_images=os.path.join(out_dir, "train"), val_images=os.path.join(out_dir, "val"),
        train_json=os.path.join(out_dir, "annotations", "instances_train.json"),
        val_json=os.path.join(out_dir, "annotations", "instances_val.json"),
        train_tfrecord=pattern % "train" if tfrecord else None,
        val_tfrecord=pattern % "val" if tfrecord else None,
        label_map=dict(label_map), num_train=num_train, num_val=num_val)


def _is_complete(dataset: SyntheticDataset, manifest: dict, num_shards: int) -> bool:
    """True when the manifest matches and the files it promises are there."""
    path = os.path.join(dataset.root, MANIFEST_NAME)
    try:
        with open(path) as f:
            if json.load(f) != manifest:
                return False
    except (OSError, ValueError):
        return False
    for image_dir, json_file, pattern, count in (
            (dataset.train_images, dataset.train_json, dataset.train_tfrecord, dataset.num_train),
            (dataset.val_images, dataset.val_json, dataset.val_tfrecord, dataset.num_val)):
        if not os.path.isfile(json_file) or not os.path.isdir(image_dir):
            return False
        if len([n for n in os.listdir(image_dir) if n.endswith(".jpg")]) != count:
            return False
        if pattern and count and len(tf.io.gfile.glob(pattern)) != num_shards:
            return False
    return True


def _write_split(records_and_images, image_dir: str, json_file: str,
                 tfrecord_pattern: Optional[str], num_shards: int, label_map: Dict[int, str],
                 progress: Optional[ProgressBar] = None) -> None:
    """Writes one split's JPEGs and COCO JSON, then its TFRecords from those JPEGs.
    `progress` counts the JPEGs; the TFRecord writing then shows its own bar."""
    os.makedirs(image_dir, exist_ok=True)
    records = []
    for record, image in records_and_images:
        write_bytes_atomically(record.path, tf.io.encode_jpeg(image, quality=95).numpy())
        records.append(record)
        if progress is not None:
            progress.update(len(records))
    write_json_atomically(json_file, records_to_coco(records, label_map), indent=None)
    if tfrecord_pattern and records:
        prefix = tfrecord_pattern.split("-*")[0]
        if progress is not None:
            print("Writing them to TFRecords %s" % tfrecord_pattern)
        write_tfrecords(records, prefix, num_shards, label_map,
                        show_progress=progress is not None)


def write_synthetic_dataset(out_dir: str, num_train: int = 1000, num_val: int = 200,
                            image_size: Union[int, Tuple[int, int]] = 256, seed: int = 0,
                            tfrecord: bool = True, num_shards: int = 1,
                            show_progress: bool = False,
                            style: ShapeStyle = SHAPES) -> SyntheticDataset:
    """Writes (or reuses) a synthetic dataset under `out_dir`.

    Layout: train/ and val/ (JPEG files named by image id), annotations/
    instances_{train,val}.json (COCO), tfrecords/{train,val}-NNNNN-of-MMMMM.tfrecord
    (when `tfrecord`), and manifest.json with the parameters, written last.
    Train image ids are 1..num_train, val ids num_train + 1..num_train + num_val.

    When manifest.json matches these parameters and the files are present,
    nothing is written. Otherwise this module's subfolders are deleted and the
    dataset is regenerated; other files in `out_dir` are left alone.

    Args:
      image_size: an int (square) or (height, width).
      seed: a non-negative int; the same seed gives byte-identical JSON and images.
      num_shards: TFRecord files per split (examples are dealt round-robin).
      show_progress: progress bars while writing (a large dataset takes a while).
      style: what to draw: SHAPES (the demo's) or another ShapeStyle (e.g. the glyphs of
        benchmarks/synthetic_glyphs.py).
    """
    height, width = (image_size, image_size) if isinstance(image_size, int) else image_size
    height, width = int(height), int(width)
    if num_train < 0 or num_val < 0 or num_shards < 1 or seed < 0:
        raise ValueError("need num_train, num_val, seed >= 0 and num_shards >= 1; got %r" %
                         dict(num_train=num_train, num_val=num_val, seed=seed,
                              num_shards=num_shards))
    dataset = _layout(out_dir, num_train, num_val, tfrecord, num_shards, style.label_map)
    manifest = {"generator_version": GENERATOR_VERSION, "num_train": num_train,
                "num_val": num_val, "height": height, "width": width, "seed": seed,
                "tfrecord": bool(tfrecord), "num_shards": num_shards}
    if style.name != SHAPES.name:  # The demo's manifests stay as they were written.
        manifest["style"] = style.name
    if _is_complete(dataset, manifest, num_shards):
        return dataset

    # Remove the manifest first: an interrupted run must never look complete.
    manifest_path = os.path.join(out_dir, MANIFEST_NAME)
    if os.path.exists(manifest_path):
        os.remove(manifest_path)
    for folder in ("train", "val", "annotations", "tfrecords"):
        shutil.rmtree(os.path.join(out_dir, folder), ignore_errors=True)
    os.makedirs(os.path.join(out_dir, "annotations"))
    if tfrecord:
        os.makedirs(os.path.join(out_dir, "tfrecords"))

    for split, count, first_id in (("train", num_train, 1), ("val", num_val, num_train + 1)):
        image_dir = getattr(dataset, split + "_images")
        progress = None
        if show_progress:
            print("Writing %d synthetic %s images to %s" % (count, split, image_dir))
            progress = ProgressBar(count, unit_name="image")
        _write_split(generate_examples(count, height, width, seed, first_id, image_dir, style),
                     image_dir, getattr(dataset, split + "_json"),
                     getattr(dataset, split + "_tfrecord"), num_shards, style.label_map,
                     progress)

    write_text_atomically(manifest_path, json.dumps(manifest, indent=2, sort_keys=True))
    return dataset
