"""Running an exported .onnx detector with ONNX Runtime.

    detector = ONNXDetector("exported/model.onnx")
    found = detector.detect(image)  # image: uint8 [h, w, 3], any size
    found["boxes"]    # float32 [n, 4] ymin, xmin, ymax, xmax in pixels of `image`
    found["scores"]   # float32 [n], high to low
    found["classes"]  # int64 [n], class ids 1..num_classes
    outputs = detector.run(batch)   # uint8 [B, H, W, 3]: the file's four outputs by name

The file comes from `efficientdet-export --format=onnx` (export/onnx.py, which describes its
input and outputs) with its sidecar `<file>.onnx.json`. Pre-processing and NMS are inside
the file: images of any size go in as they are, a batch of one size at a time. onnxruntime is
imported when a detector is made: it is an extra (`pip install "efficientdet_keras[onnx]"`).
"""

import os
from typing import Dict, List, Optional, Sequence

import numpy as np

from efficientdet_keras.detection.box_scales import image_box_factors
from efficientdet_keras.inference.sidecar import config_from_sidecar, read_sidecar

INSTALL_HINT = 'pip install "efficientdet_keras[onnx]"'
INPUT_NAME = "images"


class ONNXMissingError(ImportError, ValueError):
    """onnxruntime or tf2onnx is not installed (a ValueError too, so the tools print one
    line)."""


def _onnxruntime():
    try:
        import onnxruntime
    except ImportError as e:
        raise ONNXMissingError("running an .onnx file needs onnxruntime (%s): %s"
                               % (e, INSTALL_HINT)) from None
    return onnxruntime


def split_outputs(outputs: Dict[str, np.ndarray]) -> List[Dict[str, np.ndarray]]:
    """A batch's outputs as one dict per image, each with a batch dimension of 1."""
    count = len(outputs["num_detections"])
    return [{name: value[i:i + 1] for name, value in outputs.items()} for i in range(count)]


class ONNXDetector:
    """One exported .onnx detector (see the module doc).

    Args:
      path: the .onnx file (its sidecar `<path>.json` must sit next to it).
      num_threads: ONNX Runtime's intra-op threads (None: the runtime's default).
      providers: ONNX Runtime execution providers, best first (None: every available one,
        in ONNX Runtime's order of preference).
      config_overrides: applied to the config built from the sidecar (class names, say);
        the NMS is fixed inside the file.

    Attributes:
      info: the sidecar dict. config: the Config built from it. runtime: the
      onnxruntime.InferenceSession.
    """

    def __init__(self, path: str, num_threads: Optional[int] = None,
                 providers: Optional[Sequence[str]] = None, config_overrides=None):
        self.path = path
        if not os.path.isfile(path):
            raise FileNotFoundError("%s: no such .onnx file" % path)
        self.info = read_sidecar(path, "onnx")
        self.config = config_from_sidecar(self.info, config_overrides)
        ort = _onnxruntime()
        options = ort.SessionOptions()
        if num_threads:
            options.intra_op_num_threads = int(num_threads)
        try:
            self.runtime = ort.InferenceSession(
                path, options, providers=list(providers or ort.get_available_providers()))
        except Exception as e:  # noqa: BLE001 (onnxruntime raises its own exception types)
            raise ValueError("%s: ONNX Runtime cannot load it (%s)"
                             % (path, str(e).strip().splitlines()[0])) from None
        if [i.name for i in self.runtime.get_inputs()] != [INPUT_NAME]:
            raise ValueError("%s has no single %r input; re-export with efficientdet-export "
                             "--format=onnx" % (path, INPUT_NAME))
        self._output_names = [o.name for o in self.runtime.get_outputs()]

    @property
    def image_size(self):
        """The network's input (height, width): what the file letterboxes images to."""
        height, width = self.info["image_size"]
        return int(height), int(width)

    def run(self, images) -> Dict[str, np.ndarray]:
        """The file's outputs by name for uint8 images [B, H, W, 3] of one size (or one
        image [H, W, 3], given a batch of 1); see export/onnx.py for the outputs."""
        images = np.asarray(images)
        if images.ndim == 3:
            images = images[np.newaxis]
        if images.ndim != 4 or images.shape[-1] != 3:
            raise ValueError("%s takes uint8 images [batch, height, width, 3], got shape %s"
                             % (self.path, list(images.shape)))
        if images.dtype != np.uint8:
            images = np.clip(np.round(images.astype(np.float32)), 0, 255).astype(np.uint8)
        outputs = self.runtime.run(self._output_names, {INPUT_NAME: images})
        return dict(zip(self._output_names, outputs))

    def detect(self, image) -> Dict[str, np.ndarray]:
        """Detections of one uint8 [h, w, 3] image, boxes in its own pixels (module doc)."""
        image = np.asarray(image)
        return self.detections_from_outputs(self.run(image), image_size=image.shape[:2])

    def detections_from_outputs(self, outputs: Dict[str, np.ndarray], scale: float = 1.0,
                                image_size=None) -> Dict[str, np.ndarray]:
        """dict(boxes [n, 4] original pixels, scores [n], classes [n] ids 1..C) of one image.

        Args:
          outputs: `run`'s outputs for the image (batch of 1; see `split_outputs`).
          scale: original pixels per pixel of the image that was fed ([y, x] with
            resize_mode stretch).
          image_size: (height, width) of the image that was fed; default the model's input
            size (an image letterboxed already, as the evaluation feeds).
        """
        count = int(outputs["num_detections"][0])
        height, width = image_size if image_size is not None else self.image_size
        pixels = np.array([height, width, height, width], np.float32) * image_box_factors(scale)
        return {"boxes": outputs["detection_boxes"][0, :count].astype(np.float32) * pixels,
                "scores": outputs["detection_scores"][0, :count].astype(np.float32),
                "classes": outputs["detection_classes"][0, :count].astype(np.int64)}
