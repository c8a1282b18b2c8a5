"""Runs a .tflite with MediaPipe Tasks' ObjectDetector, as an app would, and prints JSON.

    python mediapipe_detect.py MODEL.tflite IMAGE.png [IMAGE.png ...]

prints [[{"box": [ymin, xmin, ymax, xmax] pixels, "score", "index", "name"}, ...] per image].
Runs in the clients' environment (MediaPipe pins absl-py 2, which the package's
tensorflow-model-optimization does not allow), so it imports nothing from the package.
"""

import sys

import mediapipe as mp
from mediapipe.tasks.python import BaseOptions
from mediapipe.tasks.python import vision

from detection_rows import print_detections


def main(model_path, image_paths):
    options = vision.ObjectDetectorOptions(
        base_options=BaseOptions(model_asset_path=model_path), max_results=-1,
        running_mode=vision.RunningMode.IMAGE)
    with vision.ObjectDetector.create_from_options(options) as detector:
        print_detections([detector.detect(mp.Image.create_from_file(path)).detections
                          for path in image_paths])


if __name__ == "__main__":
    if sys.argv[1:] != ["--check"]:  # --check: the imports above load.
        main(sys.argv[1], sys.argv[2:])
