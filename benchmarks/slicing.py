"""The slicing benchmark: a detector of the synthetic shapes, trained at 128 px, looks for
20-pixel shapes in a 3000x3000 image, over the whole image and in tiles of 128 px.

The detector is the class-rows benchmark's source model (D0 at 128 px, 240 steps on circles,
squares and crosses). The large image has the training images' kind of background, with
shapes of 20 pixels scattered on it and some laid across the tiles' edges, where neighbouring
tiles each see a part. Each pass is scored by recall (a true shape with a detection of its
class at IoU >= 0.5), by the shapes found more than once, by its detections and by its time.

Used by `python benchmarks/bench.py --what=slicing`; plain functions, no flags.
"""

import dataclasses
import statistics
import time
from typing import List

import numpy as np


@dataclasses.dataclass(frozen=True)
class SlicingSettings:
    """The benchmark's sizes."""
    image_size: int = 3000
    object_size: int = 20
    objects: int = 150
    tile: int = 128
    overlap: float = 0.2
    score_threshold: float = 0.3
    repeats: int = 3
    seed: int = 0


def large_image(settings: SlicingSettings):
    """(image uint8 [S, S, 3], boxes [n, 4], classes [n]): shapes of object_size pixels on a
    synthetic background, a tenth of them laid across the tiles' vertical edges."""
    from benchmarks.class_rows import SOURCE_CLASSES, shapes_style
    from efficientdet_keras.data.synthetic import contrasting_color, make_background, paint_shape
    rng = np.random.default_rng(settings.seed)
    size, side = settings.image_size, settings.object_size
    style = shapes_style(SOURCE_CLASSES)
    image = make_background(rng, size, size)
    step = int(round(settings.tile * (1 - settings.overlap)))
    # A tile's right edge lies at start + tile for each start, a multiple of the step.
    seams = [start + settings.tile for start in range(0, size - settings.tile, step)]
    boxes, classes = [], []
    while len(boxes) < settings.objects:
        top = int(rng.integers(0, size - side))
        if len(boxes) % 10 == 0:
            left = int(rng.choice(seams[:-1])) - side // 2
        else:
            left = int(rng.integers(0, size - side))
        box = np.array([top, left, top + side, left + side], np.float32)
        if any(np.all(box[:2] < other[2:] + 4) and np.all(other[:2] < box[2:] + 4)
               for other in boxes):
            continue
        class_id = int(rng.integers(1, len(SOURCE_CLASSES) + 1))
        under = image[top:top + side, left:left + side][style.mask(class_id, side)]
        paint_shape(image, class_id, top, left, side, contrasting_color(rng, under),
                    style.mask)
        boxes.append(box)
        classes.append(class_id)
    return (np.clip(image, 0, 255).astype(np.uint8), np.array(boxes),
            np.array(classes, np.int64))


def score(found, boxes: np.ndarray, classes: np.ndarray) -> dict:
    """Recall at IoU 0.5 (class-aware), the shapes found more than once, the detections."""
    from efficientdet_keras.detection.wbf import box_iou
    counts = []
    for box, class_id in zip(boxes, classes):
        same = found.class_ids == class_id
        counts.append(int((box_iou(found.boxes[same], box) >= 0.5).sum()))
    counts = np.array(counts)
    return {"recall": float((counts > 0).mean()), "found_twice": int((counts > 1).sum()),
            "detections": len(found)}


def bench_slicing(detector_dir: str, settings: SlicingSettings = SlicingSettings(),
                  log=print) -> List[dict]:
    """Each pass over the large image: its scores and the median seconds of `repeats`
    runs after one untimed run; prints and returns the rows."""
    from efficientdet_keras.detection.slicing import SliceSettings, tile_windows
    from efficientdet_keras.inference.detector import Detector
    image, boxes, classes = large_image(settings)
    slicing = SliceSettings(settings.tile, settings.overlap)
    tiles = len(tile_windows(settings.image_size, settings.image_size, slicing))
    rows = []
    for name, slice_, runs in (("whole image", None, 1),
                               ("tiles of %d px, overlap %g, and the whole image"
                                % (settings.tile, settings.overlap), slicing, tiles + 1)):
        detector = Detector(detector_dir, slice=slice_)
        found = detector.detect(image, score_threshold=settings.score_threshold)
        seconds = []
        for _ in range(settings.repeats):
            start = time.perf_counter()
            detector.detect(image, score_threshold=settings.score_threshold)
            seconds.append(time.perf_counter() - start)
        row = dict(score(found, boxes, classes), name=name, model_runs=runs,
                   seconds=round(statistics.median(seconds), 2))
        rows.append(row)
        log("%-50s recall %.3f, %d found twice, %d detections, %d model runs, %.2f s"
            % (name, row["recall"], row["found_twice"], row["detections"], runs,
               row["seconds"]))
    return rows


def summary(rows: List[dict], settings: SlicingSettings):
    """The table: (columns, one row of cells per pass)."""
    columns = ["%d shapes of %d px in a %dx%d image" % (
        settings.objects, settings.object_size, settings.image_size, settings.image_size),
        "recall (IoU 0.5)", "shapes found twice", "detections", "model runs", "seconds"]
    cells = [[r["name"], "%.3f" % r["recall"], str(r["found_twice"]), str(r["detections"]),
              str(r["model_runs"]), "%.2f" % r["seconds"]] for r in rows]
    return columns, cells
