"""detect: a model run over image files, each written with its boxes drawn, and the detections
of all of them in one JSON file; or over a video, a stream or a camera (inference/video.py).

    from efficientdet_keras import Detector
    from efficientdet_keras.workflows.detect import detect_images, detect_inputs
    result = detect_images(Detector("efficientdet-d0"), "photos/", "out/")
    result.detections["street.jpg"]       # boxes, scores, class ids and names of one file
    detect_inputs(Detector("efficientdet-d0"), "clip.mp4", "out/", track=True)  # a video
"""

import dataclasses
import glob
import os
from typing import Callable, Dict, List

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif")
DETECTIONS_FILE = "detections.json"


@dataclasses.dataclass
class DetectResult:
    """The output folder, the detections of each image file by its name (boxes [ymin, xmin,
    ymax, xmax] in pixels, scores, class ids and names), and the files skipped as not
    decodable images."""
    output_dir: str
    detections: Dict[str, list]
    skipped: List[str]


def list_images(pattern: str) -> List[str]:
    """The image files of a file, a folder or a glob pattern, sorted; FileNotFoundError
    naming the pattern when there are none."""
    if os.path.isdir(pattern):
        paths = [os.path.join(pattern, n) for n in sorted(os.listdir(pattern))]
    else:
        paths = sorted(glob.glob(pattern))
    paths = [p for p in paths if p.lower().endswith(IMAGE_SUFFIXES)]
    if not paths:
        raise FileNotFoundError("no image files match %s" % pattern)
    return paths


def detect_images(detector, inputs: str, output_dir: str, *, score_threshold: float = 0.3,
                  max_boxes: int = 20, report: Callable[[str], None] = print) -> DetectResult:
    """Runs `detector` (an efficientdet_keras.Detector) on each image of `inputs` (a file,
    folder or glob pattern); writes each image with its detections drawn as
    <output_dir>/<name>.png and all detections as <output_dir>/detections.json.

    report: called with a line per image (its detection count, or why it was skipped).
    """
    from efficientdet_keras.inference.images import load_image
    from efficientdet_keras.utils.drawing import encode_png
    from efficientdet_keras.utils.fileio import write_bytes_atomically, write_json_atomically
    paths = list_images(inputs)
    os.makedirs(output_dir, exist_ok=True)
    result = DetectResult(output_dir, {}, [])
    for path in paths:
        try:
            image = load_image(path)
        except ValueError:
            report("Skipping %s: not a decodable image" % path)
            result.skipped.append(path)
            continue
        found = detector.detect(image, score_threshold=score_threshold,
                                max_detections=max_boxes)
        name = os.path.splitext(os.path.basename(path))[0] + ".png"
        write_bytes_atomically(os.path.join(output_dir, name),
                               encode_png(detector.draw(image, found)))
        result.detections[os.path.basename(path)] = found.records()
        report("%s: %d detection(s)" % (path, len(found)))
    write_json_atomically(os.path.join(output_dir, DETECTIONS_FILE), result.detections)
    return result


def check_video_options(inputs: str, track: bool, max_frames) -> bool:
    """Whether `inputs` is a video (a file, a stream URL or a camera index); ValueError when
    track or max_frames are given for images."""
    from efficientdet_keras.inference.video import is_video_source
    video = is_video_source(inputs)
    if (track or max_frames) and not video:
        raise ValueError("--track and --max_frames are for a video input (a video file, a "
                         "stream URL or a camera index), not %s" % inputs)
    return video


def detect_inputs(detector, inputs: str, output_dir: str, *, score_threshold: float = 0.3,
                  max_boxes: int = 20, track: bool = False, max_frames=None,
                  report: Callable[[str], None] = print):
    """What efficientdet-infer does with --input: a video file, stream URL or camera index
    through Detector.detect_video (its VideoResult), anything else as images through
    detect_images (its DetectResult).

    Raises:
      ValueError: track or max_frames given for images.
    """
    if not check_video_options(inputs, track, max_frames):
        return detect_images(detector, inputs, output_dir, score_threshold=score_threshold,
                             max_boxes=max_boxes, report=report)
    return detector.detect_video(inputs, output_dir, score_threshold=score_threshold,
                                 max_boxes=max_boxes, track=track, max_frames=max_frames,
                                 report=report)
