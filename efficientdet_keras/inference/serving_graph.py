"""The serving graph: pre-processing, network and NMS in one tf.Module.

What the detection SavedModel (exporters/saved_model.py) saves and what the Detector runs for a
checkpoint, so both give the same detections. Its three functions return the same outputs:
  detect_images    images: uint8 [B, H, W, 3], any size
  detect_encoded   images: string [B], encoded JPEG or PNG (sizes may differ)
  detect_examples  examples: string [B], serialized tf.Example with image/encoded
Outputs (Object Detection API names and types):
  detection_boxes    float32 [B, N, 4], normalised [ymin, xmin, ymax, xmax] of the original image
  detection_scores   float32 [B, N]
  detection_classes  float32 [B, N], class ids 1..num_classes (0 for padding)
  num_detections     float32 [B]
N is nms_configs.max_output_size.
"""

import tensorflow as tf

from efficientdet_keras.data.augmentation.augment import resize_crop_pad
from efficientdet_keras.detection.postprocess import postprocess_detections
from efficientdet_keras.model.folding import can_fold, fold_batch_norms

# The class names file beside a SavedModel ({class id: name}).
LABEL_MAP_FILE = "label_map.json"


def inference_network(model, fold_batch_norm: bool = True, mixed_precision=None):
    """The network to serve or evaluate `model` with (its current weights): BatchNorm
    folded into the convs when asked and possible, at `mixed_precision` (None: the model's).
    """
    if fold_batch_norm and can_fold(model.config):
        return fold_batch_norms(model, mixed_precision)
    if mixed_precision is not None and mixed_precision != model.config.mixed_precision:
        raise ValueError("mixed_precision=%r needs fold_batch_norm (a folded copy is what "
                         "runs at another precision)" % (mixed_precision,))
    return model


def float32_serving_network(model, fold_batch_norm: bool = True):
    """The network an exported graph file (.onnx, OpenVINO) runs, with `model`'s current
    weights: BatchNorm folded when asked and possible, computing in float32 (the CPU runtimes
    have no bfloat16 convolutions to match TensorFlow's)."""
    folding = fold_batch_norm and can_fold(model.config)
    return inference_network(model, folding, "float32" if folding else None)


def preprocess_image(image: tf.Tensor, config):
    """uint8 [H, W, 3] -> (normalised input [h, w, 3] float32, image_scale, original (H, W)),
    fitted to the input as config.resize_mode says (image_scale [2], y and x, for stretch)."""
    mean = tf.constant(config.mean_rgb, tf.float32)
    stddev = tf.constant(config.stddev_rgb, tf.float32)
    empty_boxes = tf.zeros([0, 4])
    resized, _, scale, _ = resize_crop_pad(image, empty_boxes, config.image_size,
                                           normalize=lambda x: (x - mean) / stddev,
                                           stretch=config.resize_mode == "stretch")
    return resized, scale, tf.cast(tf.shape(image)[:2], tf.float32)


def detect(model, config, images: tf.Tensor, scales: tf.Tensor, original_sizes: tf.Tensor):
    """Network and NMS on pre-processed images; boxes normalised to the original images."""
    class_outputs, box_outputs = model(tf.cast(images, model.compute_dtype), training=False)
    detections = postprocess_detections(config, class_outputs, box_outputs, scales)
    sizes = tf.tile(original_sizes, [1, 2])[:, tf.newaxis, :]  # [B, 1, 4]: H, W, H, W
    return {"detection_boxes": detections.boxes / sizes,
            "detection_scores": detections.scores,
            "detection_classes": tf.cast(detections.classes, tf.float32),
            "num_detections": tf.cast(detections.valid, tf.float32)}


class DetectionModule(tf.Module):
    """The serving functions of one model (see the module doc for the signatures)."""

    def __init__(self, model, config):
        super().__init__(name="efficientdet_detector")
        object.__setattr__(self, "_model", model)  # Saved through its variables, not as Keras.
        object.__setattr__(self, "_config", config)
        self.model_variables = list(model.variables)
        height, width = config.image_size
        self._image_spec = tf.TensorSpec([height, width, 3], tf.float32)
        self._scale_spec = tf.TensorSpec([2] if config.resize_mode == "stretch" else [],
                                         tf.float32)
        # One trace of the network and NMS, shared by the three signatures (each would
        # otherwise trace its own copy: the larger part of an export's time). Called through
        # a plain function, so that saving does not list it and trace it once more.
        shared = tf.function(lambda *inputs: detect(model, config, *inputs))
        object.__setattr__(self, "_detect", lambda *inputs: shared(*inputs))

    def _run(self, uint8_images_fn, count):
        """Pre-processes images one by one (sizes differ), then detects as one batch."""
        images, scales, sizes = tf.map_fn(
            lambda i: preprocess_image(uint8_images_fn(i), self._config), tf.range(count),
            fn_output_signature=(self._image_spec, self._scale_spec,
                                 tf.TensorSpec([2], tf.float32)))
        return self._detect(images, scales, sizes)

    @tf.function(input_signature=[tf.TensorSpec([None, None, None, 3], tf.uint8, name="images")])
    def detect_images(self, images):
        return self._run(lambda i: images[i], tf.shape(images)[0])

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="images")])
    def detect_encoded(self, images):
        decode = lambda i: tf.io.decode_image(images[i], channels=3,  # noqa: E731
                                              expand_animations=False)
        return self._run(decode, tf.shape(images)[0])

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
    def detect_examples(self, examples):
        parsed = tf.io.parse_example(
            examples, {"image/encoded": tf.io.FixedLenFeature([], tf.string)})
        return self.detect_encoded(parsed["image/encoded"])
