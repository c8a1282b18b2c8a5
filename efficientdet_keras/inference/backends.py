"""The ways a Detector runs a model: a Keras model in-process, an exported detection
SavedModel, a .tflite file, an .onnx or OpenVINO file.

Each backend takes uint8 [H, W, 3] images and gives, per image, every detection the model
returns as (boxes [n, 4] in original pixels, scores [n], class ids [n]); the Keras and .tflite
backends also give the raw network outputs. The Keras backend runs the SavedModel's own
serving function (`DetectionModule`), and the .onnx and OpenVINO files are that function
converted, so a checkpoint and its exports detect alike.
"""

import json
import os
from typing import Callable, Dict, List, Optional

import numpy as np
import tensorflow as tf

from efficientdet_keras.config.label_maps import label_names
from efficientdet_keras.detection.box_scales import plain_scale
from efficientdet_keras.inference.serving_graph import (LABEL_MAP_FILE, DetectionModule,
                                                        preprocess_image)
from efficientdet_keras.inference.images import group_by_shape
from efficientdet_keras.inference.results import RawOutputs

NO_RAW_OUTPUTS = ("only_network needs a checkpoint, a model directory or a .tflite exported with "
                  "--tflite_outputs=raw")


def graph_detections(outputs, image_sizes) -> List[tuple]:
    """Per image (boxes in pixels, scores, class ids) from the SavedModel's outputs (boxes
    normalised to the original images, float class ids, num_detections)."""
    found = []
    for i, (height, width) in enumerate(image_sizes):
        count = int(outputs["num_detections"][i])
        boxes = np.asarray(outputs["detection_boxes"][i, :count], np.float32)
        found.append((boxes * np.array([height, width, height, width], np.float32),
                      np.asarray(outputs["detection_scores"][i, :count], np.float32),
                      np.asarray(outputs["detection_classes"][i, :count]).astype(np.int64)))
    return found


class GraphBackend:
    """A function uint8 [B, H, W, 3] (numpy) -> the SavedModel's outputs, run on batches of
    one size."""

    def __init__(self, detect_fn: Callable, label_map: Dict[int, str], description: str):
        self._detect_fn = detect_fn
        self.label_map = label_map
        self.description = description

    def detect(self, images: List[np.ndarray]) -> List[tuple]:
        found = [None] * len(images)
        for indices in group_by_shape(images):
            batch = np.stack([images[i] for i in indices])
            outputs = self._detect_fn(batch)
            sizes = [images[i].shape[:2] for i in indices]
            for i, detections in zip(indices, graph_detections(outputs, sizes)):
                found[i] = detections
        return found

    def raw_outputs(self, images: List[np.ndarray]) -> List[RawOutputs]:
        raise ValueError("%s is a detection SavedModel (pre-processing, network and NMS in one "
                         "graph): %s" % (self.description, NO_RAW_OUTPUTS))

    def network_fn(self, images: List[np.ndarray]) -> Optional[Callable[[], None]]:
        """A function running the network alone on `images` prepared once; None: not
        separable."""
        return None


class KerasBackend(GraphBackend):
    """An EfficientDetNet in-process, detecting through the SavedModel's serving function."""

    def __init__(self, model, config, description: str):
        module = DetectionModule(model, config)
        # The lambda holds the module: its tf.functions hold it only weakly.
        super().__init__(lambda images: module.detect_images(images),
                         label_names(config.label_map) or {}, description)
        self.config = config
        height, width = config.image_size
        # One trace for every batch size (only_network, benchmark).
        self._network = tf.function(
            lambda images: model(images, training=False),
            input_signature=[tf.TensorSpec([None, height, width, 3], model.compute_dtype)])
        self._preprocess = tf.function(lambda image: preprocess_image(image, config),
                                       input_signature=[tf.TensorSpec([None, None, 3], tf.uint8)])
        self._compute_dtype = model.compute_dtype

    def _prepare(self, images: List[np.ndarray]):
        """(network input float [B, h, w, 3], B scales: a float each, or [y, x] with
        resize_mode stretch) of the images fitted to the input."""
        prepared = [self._preprocess(tf.constant(image)) for image in images]
        batch = tf.cast(tf.stack([p[0] for p in prepared]), self._compute_dtype)
        return batch, [plain_scale(p[1]) for p in prepared]

    def raw_outputs(self, images: List[np.ndarray]) -> List[RawOutputs]:
        batch, scales = self._prepare(images)
        class_outputs, box_outputs = self._network(batch)
        class_outputs = [np.asarray(level, np.float32) for level in class_outputs]
        box_outputs = [np.asarray(level, np.float32) for level in box_outputs]
        return [RawOutputs(class_outputs=[level[i] for level in class_outputs],
                           box_outputs=[level[i] for level in box_outputs],
                           image_scale=scales[i], image_size=tuple(image.shape[:2]))
                for i, image in enumerate(images)]

    def network_fn(self, images: List[np.ndarray]):
        batch, _ = self._prepare(images)
        return lambda: [level.numpy() for level in self._network(batch)[0]]


def saved_model_backend(path: str) -> GraphBackend:
    """The backend of an exported detection SavedModel (label_map.json beside it names the
    classes).

    Raises:
      ValueError naming the path when it has no detection signature (a TF-Hub module).
    """
    loaded = tf.saved_model.load(path)
    signature = loaded.signatures.get("serving_default")
    if signature is None or "detection_boxes" not in signature.structured_outputs:
        raise ValueError("%s is a SavedModel without detection outputs (a TF-Hub feature "
                         "module?): export one with efficientdet-export --export_dir=..." % path)
    label_map = {}
    names_path = os.path.join(path, LABEL_MAP_FILE)
    if os.path.exists(names_path):
        with open(names_path) as f:
            label_map = {int(k): v for k, v in json.load(f).items()}
    # The lambda keeps the loaded object alive: the signature holds it only weakly.
    return GraphBackend(
        lambda images: loaded.signatures["serving_default"](images=tf.constant(images)),
        label_map, path)


class GraphFileBackend(GraphBackend):
    """An exported .onnx (ONNX Runtime) or OpenVINO .xml (OpenVINO): the SavedModel's serving
    function converted (pre-processing, network and NMS), on batches of one size."""

    def __init__(self, path: str, num_threads: Optional[int] = None):
        from efficientdet_keras.inference.loading import graph_file_runner
        self.runner = graph_file_runner(path, num_threads=num_threads)
        self.config = self.runner.config
        super().__init__(self.runner.run, label_names(self.config.label_map) or {}, path)

    def raw_outputs(self, images: List[np.ndarray]) -> List[RawOutputs]:
        raise ValueError("%s is an %s detector (pre-processing, network and NMS in one "
                         "graph): %s" % (self.description, self.runner.format_name,
                                         NO_RAW_OUTPUTS))


class TFLiteBackend:
    """An exported .tflite run with ai-edge-litert, one image at a time (the file's batch)."""

    def __init__(self, path: str, num_threads: Optional[int] = None, config_overrides=None):
        from efficientdet_keras.inference.tflite_runner import TFLiteRunner
        self.runner = TFLiteRunner(path, num_threads=num_threads,
                                   config_overrides=config_overrides)
        self.config = self.runner.config
        self.label_map = label_names(self.config.label_map) or {}
        self.description = path

    def detect(self, images: List[np.ndarray]) -> List[tuple]:
        found = [self.runner.detect(image) for image in images]
        return [(f["boxes"], f["scores"], f["classes"]) for f in found]

    def raw_outputs(self, images: List[np.ndarray]) -> List[RawOutputs]:
        if self.runner.info["outputs"] != "raw":
            raise ValueError("%s has detection outputs (TFLite_Detection_PostProcess): %s"
                             % (self.description, NO_RAW_OUTPUTS))
        raw = []
        for image in images:
            letterboxed, scale = self.runner.letterbox(image)
            outputs = self.runner.run(letterboxed)
            raw.append(RawOutputs(class_outputs=[np.asarray(outputs["class_outputs"][0])],
                                  box_outputs=[np.asarray(outputs["box_outputs"][0])],
                                  image_scale=scale, image_size=tuple(image.shape[:2])))
        return raw

    def network_fn(self, images: List[np.ndarray]):
        letterboxed = [self.runner.letterbox(image)[0] for image in images]
        return lambda: [self.runner.run(image) for image in letterboxed]
