"""The large-inputs benchmark: a detector of the synthetic shapes, trained at 128 px, on what
users point it at beyond single photos.

- Slicing: shapes of 20 and of 32 pixels in a 3000x3000 image, over the whole image and in
  tiles of 128 px. The large image has the training images' kind of background, with the shapes
  scattered on it and some laid across the tiles' edges, where neighbouring tiles each see a
  part. Each pass is scored by recall (a true shape with a detection of its class at
  IoU >= 0.5), by the shapes found more than once, by its detections and by its time.
- Video: a clip of moving shapes through Detector.detect_video, frames per second end to end
  (decoding, the model, drawing, encoding, the JSON lines), without and with tracking.

The detector is the class-rows benchmark's source model (D0 at 128 px on circles, squares and
crosses), trained SOURCE_STEPS steps. Used by `python benchmarks/bench.py --what=large_inputs`; plain
functions, no flags.
"""

import dataclasses
import functools
import os
import statistics
import time
from typing import List

import numpy as np

# Three times the class-rows benchmark's source training: shapes found in their own tiles with
# the right class, so that what the table shows is the slicing, not a weak model.
SOURCE_STEPS = 720


@dataclasses.dataclass(frozen=True)
class SlicingSettings:
    """The benchmark's sizes."""
    image_size: int = 3000
    object_sizes: tuple = (20, 32)  # One image for each: shapes of that side.
    objects: int = 150
    tile: int = 128
    overlap: float = 0.2
    score_threshold: float = 0.3
    repeats: int = 3
    seed: int = 0


def large_image(settings: SlicingSettings, object_size: int):
    """(image uint8 [S, S, 3], boxes [n, 4], classes [n]): shapes of object_size pixels on a
    synthetic background, a tenth of them laid across the tiles' vertical edges."""
    from benchmarks.class_rows import SOURCE_CLASSES, shapes_style
    from efficientdet_keras.data.synthetic import contrasting_color, make_background, paint_shape
    rng = np.random.default_rng(settings.seed)
    size, side = settings.image_size, object_size
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
    """Each object size, each pass over its large image: the scores and the median seconds of
    `repeats` runs after one untimed run; prints and returns the rows."""
    from efficientdet_keras.detection.slicing import SliceSettings, tile_windows
    from efficientdet_keras.inference.detector import Detector
    slicing = SliceSettings(settings.tile, settings.overlap)
    tiles = len(tile_windows(settings.image_size, settings.image_size, slicing))
    passes = (("whole image", None, 1),
              ("tiles of %d px, overlap %g, and the whole image"
               % (settings.tile, settings.overlap), slicing, tiles + 1))
    detectors = {name: Detector(detector_dir, slice=slice_) for name, slice_, _ in passes}
    rows = []
    for object_size in settings.object_sizes:
        image, boxes, classes = large_image(settings, object_size)
        for name, _, runs in passes:
            detect = functools.partial(detectors[name].detect,
                                       score_threshold=settings.score_threshold)
            found = detect(image)
            seconds = []
            for _ in range(settings.repeats):
                start = time.perf_counter()
                detect(image)
                seconds.append(time.perf_counter() - start)
            row = dict(score(found, boxes, classes), name=name, object_size=object_size,
                       model_runs=runs, seconds=round(statistics.median(seconds), 2))
            rows.append(row)
            log("%d px: %-48s recall %.3f, %d found twice, %d detections, %d model runs, "
                "%.2f s" % (object_size, name, row["recall"], row["found_twice"],
                            row["detections"], runs, row["seconds"]))
    return rows


def slicing_summary(rows: List[dict], settings: SlicingSettings):
    """The table: (columns, one row of cells per object size and pass)."""
    columns = ["%d shapes in a %dx%d image" % (settings.objects, settings.image_size,
                                              settings.image_size),
               "shape side (px)", "recall (IoU 0.5)", "shapes found twice", "detections",
               "model runs", "seconds"]
    cells = [[r["name"], str(r["object_size"]), "%.3f" % r["recall"], str(r["found_twice"]),
              str(r["detections"]), str(r["model_runs"]), "%.2f" % r["seconds"]] for r in rows]
    return columns, cells


@dataclasses.dataclass(frozen=True)
class VideoSettings:
    """The benchmark clip: frames of height x width at fps, shapes moving across them."""
    frames: int = 120
    height: int = 360
    width: int = 640
    fps: int = 30
    shapes: int = 6
    shape_size: int = 40
    score_threshold: float = 0.3
    repeats: int = 3
    seed: int = 0


def write_clip(path: str, settings: VideoSettings) -> None:
    """A clip of shapes moving at constant speeds over a synthetic background (H.264)."""
    import av
    from benchmarks.class_rows import SOURCE_CLASSES, shapes_style
    from efficientdet_keras.data.synthetic import contrasting_color, make_background, paint_shape
    rng = np.random.default_rng(settings.seed)
    style = shapes_style(SOURCE_CLASSES)
    background = make_background(rng, settings.height, settings.width)
    size = settings.shape_size
    starts = rng.uniform([0, 0], [settings.height - size, settings.width - size],
                         [settings.shapes, 2])
    speeds = rng.uniform(-2.0, 2.0, [settings.shapes, 2])
    classes = rng.integers(1, len(SOURCE_CLASSES) + 1, settings.shapes)
    colours = [contrasting_color(rng, background.reshape(-1, 3)[::97]) for _ in classes]
    with av.open(path, "w") as container:
        stream = container.add_stream("libx264", rate=settings.fps)
        stream.width, stream.height, stream.pix_fmt = settings.width, settings.height, "yuv420p"
        for index in range(settings.frames):
            frame = background.copy()
            for start, speed, class_id, colour in zip(starts, speeds, classes, colours):
                top, left = np.clip(start + speed * index, 0,
                                    [settings.height - size, settings.width - size]).astype(int)
                paint_shape(frame, int(class_id), int(top), int(left), size, colour, style.mask)
            picture = np.clip(frame, 0, 255).astype(np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(picture, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def bench_video(detector_path: str, folder: str, settings: VideoSettings = VideoSettings(),
                log=print) -> List[dict]:
    """Frames per second of detect_video on the clip, without and with tracking: the median
    of `repeats` runs after one untimed run; prints and returns the rows."""
    from efficientdet_keras.inference.detector import Detector
    clip = os.path.join(folder, "clip.mp4")
    write_clip(clip, settings)
    detector = Detector(detector_path)
    rows = []
    for name, track in (("detections drawn and written", False), ("with --track", True)):
        seconds = []
        for run in range(settings.repeats + 1):
            start = time.perf_counter()
            result = detector.detect_video(clip, os.path.join(folder, "out-%d" % run),
                                           score_threshold=settings.score_threshold,
                                           track=track, report=lambda line: None)
            if run:  # The first run traces the model.
                seconds.append(time.perf_counter() - start)
        fps = result.frames / statistics.median(seconds)
        rows.append({"name": name, "frames": result.frames, "fps": round(fps, 1)})
        log("%-30s %d frames, %.1f frames/s" % (name, result.frames, fps))
    return rows


def video_summary(rows: List[dict], settings: VideoSettings):
    """The table: (columns, one row of cells per way)."""
    columns = ["a %dx%d clip of %d frames, D0 at 128 px" % (
        settings.width, settings.height, settings.frames), "frames/s"]
    return columns, [[r["name"], "%.1f" % r["fps"]] for r in rows]
