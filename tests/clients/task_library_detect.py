"""Runs a .tflite with the LiteRT (TFLite) Task Library's ObjectDetector and prints JSON.

    python task_library_detect.py MODEL.tflite IMAGE.png [IMAGE.png ...]

prints what mediapipe_detect.py prints. The Task Library's wheel (tflite-support) links
libusb-1.0 without shipping it; the libusb-package wheel does ship it, and loading it
first lets the Task Library find it on machines without the system library.
"""

import ctypes
import sys

try:
    import libusb_package
    ctypes.CDLL(str(libusb_package.get_library_path()), mode=ctypes.RTLD_GLOBAL)
except ImportError:  # The system's libusb-1.0, if any.
    pass

from tflite_support.task import core, processor, vision  # noqa: E402

from detection_rows import print_detections  # noqa: E402


def main(model_path, image_paths):
    options = vision.ObjectDetectorOptions(
        base_options=core.BaseOptions(file_name=model_path),
        detection_options=processor.DetectionOptions(max_results=-1))
    detector = vision.ObjectDetector.create_from_options(options)
    print_detections([detector.detect(vision.TensorImage.create_from_file(path)).detections
                      for path in image_paths])


if __name__ == "__main__":
    if sys.argv[1:] != ["--check"]:  # --check: the imports above load.
        main(sys.argv[1], sys.argv[2:])
