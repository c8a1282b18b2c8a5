"""What the runners of exported graph files share: an .onnx (ONNX Runtime) or an OpenVINO IR.

Both files are the detection SavedModel's serving function converted, pre-processing and NMS
included: uint8 images [B, H, W, 3] of any size in, the SavedModel's four outputs out
(exporters/onnx.py and exporters/openvino.py describe them). Each comes with its sidecar
`<file>.json`. A subclass opens its runtime (`_open`) and runs a batch (`_infer`).

    runner = loading.graph_file_runner("exported/model.xml")  # or "exported/model.onnx"
    found = runner.detect(image)    # image: uint8 [h, w, 3], any size
    found["boxes"]    # float32 [n, 4] ymin, xmin, ymax, xmax in pixels of `image`
    found["scores"]   # float32 [n], high to low
    found["classes"]  # int64 [n], class ids 1..num_classes
    outputs = runner.run(batch)     # uint8 [B, H, W, 3]: the file's four outputs by name
"""

import os
from typing import Dict, List, Optional

import numpy as np

from efficientdet_keras.detection.box_scales import image_box_factors
from efficientdet_keras.inference.sidecar import config_from_sidecar, read_sidecar

INPUT_NAME = "images"
OUTPUT_NAMES = ("detection_boxes", "detection_classes", "detection_scores", "num_detections")


def split_outputs(outputs: Dict[str, np.ndarray]) -> List[Dict[str, np.ndarray]]:
    """A batch's outputs as one dict per image, each with a batch dimension of 1."""
    count = len(outputs["num_detections"])
    return [{name: value[i:i + 1] for name, value in outputs.items()} for i in range(count)]


class GraphFileRunner:
    """One exported graph file (see the module doc).

    Args:
      path: the file (its sidecar `<path>.json` must sit next to it).
      num_threads: the runtime's threads (None: its default).
      config_overrides: applied to the config built from the sidecar (class names, say);
        the NMS is fixed inside the file.

    Attributes:
      info: the sidecar dict. config: the Config built from it.
    """

    # The --format that writes the file, what the messages call the file, its format and
    # its runtime.
    file_format = ""
    description = ""
    format_name = ""
    runtime_name = ""

    def __init__(self, path: str, num_threads: Optional[int] = None, config_overrides=None):
        self.path = path
        if not os.path.isfile(path):
            raise FileNotFoundError("%s: no such %s file" % (path, self.description))
        self.info = read_sidecar(path, self.file_format)
        self.config = config_from_sidecar(self.info, config_overrides)
        self._open(num_threads)

    def _open(self, num_threads: Optional[int]) -> None:
        raise NotImplementedError

    def _infer(self, images: np.ndarray) -> Dict[str, np.ndarray]:
        """The file's outputs by name for a uint8 batch [B, H, W, 3]."""
        raise NotImplementedError

    def _load_error(self, error: Exception) -> ValueError:
        return ValueError("%s: %s cannot load it (%s)" % (
            self.path, self.runtime_name, str(error).strip().splitlines()[0]))

    def _check_io(self, input_names, output_names) -> None:
        """input_names: per input, the set of its names; output_names: every output's name."""
        if [INPUT_NAME in names for names in input_names] != [True] or \
                not set(OUTPUT_NAMES) <= set(output_names):
            raise ValueError("%s has not the single %r input and the detection outputs; "
                             "re-export with efficientdet-export --format=%s"
                             % (self.path, INPUT_NAME, self.file_format))

    @property
    def image_size(self):
        """The network's input (height, width): what the file letterboxes images to."""
        height, width = self.info["image_size"]
        return int(height), int(width)

    def run(self, images) -> Dict[str, np.ndarray]:
        """The file's outputs by name for uint8 images [B, H, W, 3] of one size (or one
        image [H, W, 3], given a batch of 1)."""
        images = np.asarray(images)
        if images.ndim == 3:
            images = images[np.newaxis]
        if images.ndim != 4 or images.shape[-1] != 3:
            raise ValueError("%s takes uint8 images [batch, height, width, 3], got shape %s"
                             % (self.path, list(images.shape)))
        if images.dtype != np.uint8:
            images = np.clip(np.round(images.astype(np.float32)), 0, 255).astype(np.uint8)
        return self._infer(np.ascontiguousarray(images))

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

