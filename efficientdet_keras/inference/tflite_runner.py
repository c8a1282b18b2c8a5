"""Running an exported .tflite detector with the ai-edge-litert interpreter.

    runner = TFLiteRunner("d0.tflite", num_threads=2)
    found = runner.detect(image)    # image: uint8 [h, w, 3]
    found["boxes"]    # float32 [n, 4] ymin, xmin, ymax, xmax in pixels of `image`
    found["scores"]   # float32 [n], high to low
    found["classes"]  # int64 [n], class ids 1..num_classes

The file comes from `efficientdet-export --format=tflite` with its sidecar
`<file>.tflite.json` (model name, input size, anchors, label map, output kind).
Its one signature, "serving_default", takes "images" uint8 (or float32 0..255)
[1, H, W, 3], already letterboxed to the model's input size, and normalises
them itself. It returns either the output of TFLite_Detection_PostProcess
("detections": boxes normalised to H x W, 0-based classes, scores, count) or
the raw network outputs ("raw": class logits and box codes of every anchor,
decoded and NMSed here with the package's own post-processing).

XNNPACK is the interpreter's default delegate; `use_xnnpack=False` runs the
built-in kernels only. ai-edge-litert is imported when a runner is made:
it is an extra (`pip install "efficientdet_keras[tflite]"`).
"""

import os
from typing import Dict, Optional, Sequence, Tuple

import numpy as np

from efficientdet_keras.detection.box_scales import image_box_factors, plain_scale
from efficientdet_keras.inference import sidecar
from efficientdet_keras.inference.sidecar import config_from_sidecar
from efficientdet_keras.utils.extras import import_extra


SIGNATURE = "serving_default"
# Bytes 4..8 of every TFLite flatbuffer.
_TFLITE_IDENTIFIER = b"TFL3"


def read_sidecar(tflite_path: str) -> dict:
    """The sidecar dict of an exported .tflite, after checking both files.

    Raises:
      FileNotFoundError / ValueError (one line naming the path): the file is missing or
        is not a TFLite flatbuffer, or its sidecar is missing or unreadable.
    """
    if not os.path.isfile(tflite_path):
        raise FileNotFoundError("%s: no such .tflite file" % tflite_path)
    with open(tflite_path, "rb") as f:
        head = f.read(8)
    if head[4:8] != _TFLITE_IDENTIFIER:
        raise ValueError("%s is not a .tflite file (no TFL3 flatbuffer identifier)" % tflite_path)
    return sidecar.read_sidecar(tflite_path, "tflite", required=("outputs",))


def _interpreter_class():
    """(Interpreter, OpResolverType) from ai-edge-litert, or a one-line MissingExtraError."""
    interpreter = import_extra("ai_edge_litert.interpreter", "running a .tflite file", "tflite",
                               distribution="ai-edge-litert")
    return interpreter.Interpreter, interpreter.OpResolverType


def letterbox_uint8(image, image_size: Sequence[int], mean_rgb: Sequence[float],
                    stretch: bool = False):
    """The .tflite input for one image: aspect-preserving resize and bottom/right padding
    (with `stretch`, for resize_mode stretch: each axis resized to the input on its own).

    The same resize as the Keras and SavedModel paths (`augment.resize_crop_pad`), but
    not normalised. Padding is mean_rgb (rounded), which the .tflite's own
    normalisation turns into ~0: the value the Keras pipeline pads with.

    Args:
      image: uint8 [h, w, 3] (numpy or tensor).
      image_size: the model's input (H, W).

    Returns:
      (uint8 numpy [H, W, 3], scale: original pixels per input pixel, a float, or float32
      [y, x] with `stretch`).
    """
    import tensorflow as tf
    pixels, scale = letterbox_tensors(tf.convert_to_tensor(image), image_size, mean_rgb,
                                      stretch)
    return pixels.numpy(), plain_scale(scale)


def letterbox_tensors(image, image_size: Sequence[int], mean_rgb: Sequence[float],
                      stretch: bool = False):
    """`letterbox_uint8` in TensorFlow ops (eager or traced): (uint8 [H, W, 3], float32 scale).

    Rounds as `data.pixels.to_uint8` does (half to even, then clipped to 0..255).
    """
    import tensorflow as tf
    from efficientdet_keras.data.augmentation.augment import resize_crop_pad
    mean = tf.constant(mean_rgb, tf.float32)
    # Shifting by -mean before padding and +mean after makes the padding mean, not 0.
    shifted, _, scale, _ = resize_crop_pad(image, tf.zeros([0, 4]), image_size,
                                           normalize=lambda x: x - mean, stretch=stretch)
    pixels = tf.clip_by_value(tf.round(shifted + mean), 0.0, 255.0)
    return tf.cast(pixels, tf.uint8), scale


class TFLiteRunner:
    """One exported .tflite detector, batch 1 (see the module doc).

    Args:
      path: the .tflite file (its sidecar `<path>.json` must sit next to it).
      num_threads: interpreter threads (None: the runtime's default).
      use_xnnpack: run with the XNNPACK delegate (the default); False for the
        built-in kernels only.
      config_overrides: applied to the config that decodes raw outputs (e.g.
        {"nms_configs": {"score_thresh": 0.3}}) and gives mean_rgb for padding.

    Attributes:
      info: the sidecar dict. config: the Config built from it.
    """

    def __init__(self, path: str, num_threads: Optional[int] = None, use_xnnpack: bool = True,
                 config_overrides=None):
        self.path = path
        self.info = read_sidecar(path)
        self.config = config_from_sidecar(self.info, config_overrides)
        interpreter_class, resolver = _interpreter_class()
        resolver_type = resolver.AUTO if use_xnnpack else resolver.BUILTIN_WITHOUT_DEFAULT_DELEGATES
        try:
            self.interpreter = interpreter_class(model_path=path, num_threads=num_threads,
                                                 experimental_op_resolver_type=resolver_type)
        except (ValueError, RuntimeError) as e:
            raise ValueError("%s: the interpreter cannot load it (%s)"
                             % (path, str(e).strip().splitlines()[0])) from None
        if SIGNATURE not in self.interpreter.get_signature_list():
            raise ValueError("%s has no %r signature; re-export with efficientdet-export "
                             "--format=tflite" % (path, SIGNATURE))
        self._runner = self.interpreter.get_signature_runner(SIGNATURE)
        self.input_dtype = np.dtype(self._runner.get_input_details()["images"]["dtype"])
        self._raw_postprocess = None  # Traced on the first raw decode.
        self._letterbox_fn = None  # Traced on the first uint8 letterbox.

    @property
    def image_size(self) -> Tuple[int, int]:
        height, width = self.info["image_size"]
        return int(height), int(width)

    def letterbox(self, image) -> Tuple[np.ndarray, float]:
        """uint8 [h, w, 3] -> (uint8 [H, W, 3] input, scale: original pixels per input pixel),
        fitted as the file's resize_mode says (scale [y, x] for stretch).

        `letterbox_uint8`, traced once per runner for uint8 images of any size: its many
        small ops cost far less as one graph than one by one.
        """
        import tensorflow as tf
        image = tf.convert_to_tensor(image)
        stretch = self.config.resize_mode == "stretch"
        if image.dtype != tf.uint8:
            return letterbox_uint8(image, self.image_size, self.config.mean_rgb, stretch)
        if self._letterbox_fn is None:
            self._letterbox_fn = tf.function(
                lambda pixels: letterbox_tensors(pixels, self.image_size, self.config.mean_rgb,
                                                 stretch),
                input_signature=[tf.TensorSpec([None, None, 3], tf.uint8)])
        pixels, scale = self._letterbox_fn(image)
        return pixels.numpy(), plain_scale(scale)

    def run(self, letterboxed) -> Dict[str, np.ndarray]:
        """Runs the signature on one letterboxed uint8 image, [H, W, 3] or [1, H, W, 3].

        Returns the signature's outputs by name (see the module doc), batch dimension kept.
        """
        images = np.asarray(letterboxed)
        if images.ndim == 3:
            images = images[np.newaxis]
        expected = (1,) + self.image_size + (3,)
        if images.shape != expected:
            raise ValueError("%s takes images of shape %s, got %s; letterbox them first"
                             % (self.path, list(expected), list(images.shape)))
        return self._runner(images=images.astype(self.input_dtype))

    def detect(self, image) -> Dict[str, np.ndarray]:
        """Detections of one uint8 [h, w, 3] image, boxes in its own pixels (module doc)."""
        letterboxed, scale = self.letterbox(image)
        return self.detections_from_outputs(self.run(letterboxed), scale)

    def detections_from_outputs(self, outputs: Dict[str, np.ndarray], scale,
                                detections_per_box: Optional[int] = None):
        """dict(boxes [n, 4] original pixels, scores [n], classes [n] ids 1..C) of one image.

        Args:
          outputs: `run`'s outputs for the image. scale: original pixels per input pixel (a
            number, or [y, x] with resize_mode stretch).
          detections_per_box: rows per box in `outputs` (default: the sidecar's).
        """
        if self.info["outputs"] == "raw":
            return self._decode_raw(outputs, scale)
        if detections_per_box is None:
            detections_per_box = int(self.info.get("detections_per_box", 1))
        # The op's num_detections counts boxes; fast NMS writes each box once per class kept.
        count = int(outputs["num_detections"][0]) * detections_per_box
        height, width = self.image_size
        pixels = np.array([height, width, height, width], np.float32) * image_box_factors(scale)
        scores = outputs["detection_scores"][0, :count].astype(np.float32)
        order = np.argsort(-scores, kind="stable")  # Callers may stop at a score threshold.
        # Clipped to the input, as postprocess_detections (and so the SavedModel) clips.
        boxes = np.clip(outputs["detection_boxes"][0, order].astype(np.float32), 0.0, 1.0)
        return {"boxes": boxes * pixels,
                "scores": scores[order],
                # TFLite_Detection_PostProcess gives 0-based class indices.
                "classes": outputs["detection_classes"][0, order].astype(np.int64) + 1}

    def _decode_raw(self, outputs: Dict[str, np.ndarray], scale: float):
        """Raw logits and box codes, decoded and NMSed with postprocess_detections."""
        if self._raw_postprocess is None:
            import tensorflow as tf
            from efficientdet_keras.detection.postprocess import postprocess_detections
            # The concatenated outputs are a one-level list to postprocess (same anchor order).
            self._raw_postprocess = tf.function(
                lambda logits, codes, scales: postprocess_detections(
                    self.config, [logits], [codes], scales))
        found = self._raw_postprocess(outputs["class_outputs"], outputs["box_outputs"],
                                      np.asarray(scale, np.float32)[np.newaxis])
        # Sliced in numpy rather than with eager ops.
        boxes, scores, classes, valid = (tensor.numpy() for tensor in found)
        count = int(valid[0])
        return {"boxes": boxes[0, :count], "scores": scores[0, :count],
                "classes": classes[0, :count].astype(np.int64)}
