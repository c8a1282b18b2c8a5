"""TFLite export: pre-processing, network and (optionally) TFLite_Detection_PostProcess.

    from efficientdet_keras.exporters.tflite import export_tflite
    export_tflite(model, "exported/model.tflite", quantization="int8",
                  representative_data="data/val-*.tfrecord")

writes `model.tflite` and its sidecar `model.tflite.json` (see `sidecar_info`), each
atomically. The .tflite has one signature, "serving_default":
  input  images  [1, H, W, 3] uint8 (or float32 holding 0..255), H, W = config.image_size,
         letterboxed by the caller (aspect-preserving resize, padding bottom/right) but
         not normalised: the graph subtracts mean_rgb and divides by stddev_rgb itself.
  outputs="detections" (the TFLite_Detection_PostProcess custom op, as on-device runtimes
  expect: it decodes the raw box codes against the anchors and runs NMS on the unclipped
  boxes, as the reference implementation does; its boxes are clipped to the input after
  it). The file carries TFLite metadata and a label file
  (tflite_metadata.py), so MediaPipe's ObjectDetector and the Task Library run it as is:
         detection_boxes    float32 [1, N, 4] ymin, xmin, ymax, xmax normalised to H x W
         detection_classes  float32 [1, N] 0-based class index (class id = index + 1)
         detection_scores   float32 [1, N]
         num_detections     float32 [1]        N = config.tflite_max_detections
  outputs="raw":
         class_outputs      float32 [1, num_anchors, num_classes] logits
         box_outputs        float32 [1, num_anchors, 4] box codes [ty, tx, th, tw]
         in the anchor order of `anchors.Anchors` (levels min..max, rows, columns, anchors).
"""

import contextlib
import logging
import tempfile
from typing import Iterator, Optional

import numpy as np
import tensorflow as tf

from efficientdet_keras.detection.anchors import Anchors
from efficientdet_keras.checkpoint import ensure_built
from efficientdet_keras.inference.sidecar import model_info, sidecar_path
from efficientdet_keras.utils.fileio import write_bytes_atomically, write_json_atomically
from efficientdet_keras.exporters.strip import strip_for_export
from efficientdet_keras.exporters.tflite_metadata import label_lines, with_detection_metadata
from efficientdet_keras.model.weights import averaged_weights
from efficientdet_keras.optimization import is_quantization_aware
from efficientdet_keras.detection.postprocess import flatten_outputs

QUANTIZATIONS = ("float32", "float16", "int8")
OUTPUTS = ("detections", "raw")
INPUT_TYPES = ("uint8", "float32")
# The spellings of the older export tool, accepted as aliases.
QUANTIZATION_ALIASES = {"fp32": "float32", "fp16": "float16", "int8": "int8"}
DEFAULT_CALIBRATION_IMAGES = 100
# Activations whose QAT models convert to an all-int8 network (the converter fuses them
# into the conv before; see optimization/quantization.py).
QAT_INT8_ACTIVATIONS = ("relu", "relu6")
# The file efficientdet-export --format=tflite writes in --export_dir (sidecar: + ".json").
TFLITE_FILE_NAME = "model.tflite"
POSTPROCESS_OP = "TFLite_Detection_PostProcess"
DETECTION_OUTPUTS = ("detection_boxes", "detection_classes", "detection_scores",
                     "num_detections")
RAW_OUTPUTS = ("class_outputs", "box_outputs")


def canonical_quantization(name: str) -> str:
    """"float32" | "float16" | "int8" for those names or the older FP32 / FP16 / INT8."""
    key = str(name).lower()
    if key in QUANTIZATIONS:
        return key
    if key in QUANTIZATION_ALIASES:
        return QUANTIZATION_ALIASES[key]
    raise ValueError("quantization must be one of %s (or FP32, FP16, INT8), got %r"
                     % (", ".join(QUANTIZATIONS), name))


def _check_choice(what: str, value: str, choices) -> None:
    if value not in choices:
        raise ValueError("%s must be one of %s, got %r" % (what, ", ".join(choices), value))


def op_nms_method(config) -> str:
    """The package's NMS method (postprocess.NMS_METHODS) that the detection op runs:
    "hard" (per class) with tflite_use_regular_nms, else "global". The op's fast NMS
    suppresses across classes, ranking each anchor by its best class; the "global" method
    does the same, since an anchor's weaker classes share its box and so fall to its best."""
    return "hard" if config.tflite_use_regular_nms else "global"


def detections_per_box(config) -> int:
    """Output rows per kept box: the op's fast NMS writes each box once per class it keeps
    (tflite_max_classes_per_detection, best first), and its num_detections counts boxes."""
    if config.tflite_use_regular_nms:
        return 1
    return max(1, min(int(config.tflite_max_classes_per_detection), int(config.num_classes)))


def sidecar_info(config, outputs: str, quantization: str, input_type: str) -> dict:
    """The sidecar json: what a runner needs to feed the .tflite and decode its outputs."""
    info = dict(model_info(config), outputs=outputs, quantization=quantization,
                input_type=input_type, max_detections=int(config.tflite_max_detections))
    if outputs == "detections":
        info.update(nms=op_nms_method(config), detections_per_box=detections_per_box(config))
    return info


def centre_size_anchors(config) -> np.ndarray:
    """float32 [A, 4] the model's anchors as (ycenter, xcenter, height, width) normalised
    to the input: with scales of 1 the op decodes the raw box codes as decode_boxes does."""
    anchors = Anchors(config)
    height, width = anchors.image_size
    ymin, xmin, ymax, xmax = np.split(anchors.boxes.astype(np.float32), 4, axis=-1)
    centre_size = np.concatenate([(ymin + ymax) / 2 / height, (xmin + xmax) / 2 / width,
                                  (ymax - ymin) / height, (xmax - xmin) / width], axis=-1)
    return centre_size.astype(np.float32)


def postprocess_op_attributes(config) -> str:
    """The NodeDef text that `experimental_implements` turns into the custom op.

    The op gets the raw codes and the real anchors (`centre_size_anchors`), all four
    scales 1. Fast (class-agnostic) NMS or NMS per class as config.tflite_use_regular_nms
    says, with the config's tflite_* limits and the thresholds of config.nms_configs.
    """
    nms = config.nms_configs
    attributes = [("max_detections", "i: %d" % int(config.tflite_max_detections)),
                  ("max_classes_per_detection",
                   "i: %d" % int(config.tflite_max_classes_per_detection)),
                  ("detections_per_class", "i: %d" % int(config.tflite_detections_per_class)),
                  ("use_regular_nms", "b: %s" % str(bool(config.tflite_use_regular_nms)).lower()),
                  ("nms_score_threshold", "f: %r" % float(nms.score_thresh)),
                  ("nms_iou_threshold", "f: %r" % float(nms.iou_thresh or 0.5)),
                  ("num_classes", "i: %d" % int(config.num_classes)),
                  ("y_scale", "f: 1.0"), ("x_scale", "f: 1.0"),
                  ("h_scale", "f: 1.0"), ("w_scale", "f: 1.0")]
    return " ".join(['name: "%s"' % POSTPROCESS_OP] +
                    ['attr { key: "%s" value { %s } }' % pair for pair in attributes])


def _detection_postprocess(config):
    """A tf.function that the converter replaces by TFLite_Detection_PostProcess.

    Its body is a placeholder of the right shapes: only the converted graph runs the op.
    (box encodings [1, A, 4], scores after sigmoid [1, A, C], anchors [A, 4]) ->
    (boxes [1, N, 4], classes [1, N], scores [1, N], num_detections [1]).
    """
    max_detections = int(config.tflite_max_detections)

    @tf.function(experimental_implements=postprocess_op_attributes(config), autograph=False)
    def postprocess(box_codes, class_scores, anchors):
        del box_codes, class_scores, anchors
        return (tf.zeros([1, max_detections, 4], name="boxes"),
                tf.zeros([1, max_detections], name="classes"),
                tf.zeros([1, max_detections], name="scores"),
                tf.zeros([1], name="num_detections"))

    return postprocess


class _ServingModule(tf.Module):
    """Holds the model's variables and the function the converter traces."""

    def __init__(self, model, outputs: str, input_type: str):
        super().__init__(name="efficientdet_tflite")
        object.__setattr__(self, "_model", model)  # Tracked through its variables only.
        self.model_variables = list(model.variables)
        config = model.config
        self._config = config
        self._outputs = outputs
        self._postprocess = _detection_postprocess(config) if outputs == "detections" else None
        # The op decodes the raw codes itself: decoding and clipping in the graph before it
        # was slower in float files (more XNNPACK partitions), and its log-sizes do not
        # survive int8 (empty clipped boxes stretch the range until every size rounds to 0).
        self._anchors = tf.constant(centre_size_anchors(config))
        height, width = config.image_size
        input_dtype = tf.uint8 if input_type == "uint8" else tf.float32
        self.serve = tf.function(self._serve, input_signature=[
            tf.TensorSpec([1, height, width, 3], input_dtype, name="images")])

    def _serve(self, images):
        config = self._config
        mean = tf.constant(config.mean_rgb, tf.float32)
        stddev = tf.constant(config.stddev_rgb, tf.float32)
        normalised = (tf.cast(images, tf.float32) - mean) / stddev
        class_outputs, box_outputs = self._model(normalised, training=False)
        logits, codes = flatten_outputs(class_outputs, box_outputs, config.num_classes)
        if self._outputs == "raw":
            return {"class_outputs": logits, "box_outputs": codes}
        boxes, classes, scores, count = self._postprocess(codes, tf.sigmoid(logits),
                                                          self._anchors)
        boxes = tf.clip_by_value(boxes, 0.0, 1.0)  # The op's boxes may leave the input.
        return {"detection_boxes": boxes, "detection_classes": classes,
                "detection_scores": scores, "num_detections": count}


def calibration_images(config, file_pattern: str, num_images: int,
                       input_type: str = "uint8") -> Iterator[list]:
    """Representative inputs for int8 calibration: [[1, H, W, 3] array] per image.

    Images of the TFRecords matching `file_pattern` go through the evaluation input
    pipeline (decode, aspect-preserving resize, pad), then the normalisation is undone,
    which gives the letterboxed 0..255 image a runner feeds (padding = the mean colour,
    i.e. 0 after the .tflite's normalisation, as in the SavedModel).
    """
    from efficientdet_keras.data.pipeline import InputPipeline
    from efficientdet_keras.data.sources import TFRecordSource
    source = TFRecordSource(file_pattern)
    pipeline = InputPipeline(config, source, is_training=False, batch_size=1)
    mean = np.asarray(config.mean_rgb, np.float32)
    stddev = np.asarray(config.stddev_rgb, np.float32)
    dtype = np.uint8 if input_type == "uint8" else np.float32
    for images, _ in pipeline().take(num_images):
        pixels = np.clip(np.round(images.numpy().astype(np.float32) * stddev + mean), 0, 255)
        yield [pixels.astype(dtype)]


@contextlib.contextmanager
def _without_gradient_warnings():
    """Drops TensorFlow's warning, each time the converter loads the SavedModel saved
    without gradient functions, that they are missing: the converter never asks for one."""
    def keep(record: logging.LogRecord) -> bool:
        return "unsaved custom gradients" not in record.getMessage()
    logger = logging.getLogger("absl")
    logger.addFilter(keep)
    try:
        yield
    finally:
        logger.removeFilter(keep)


def convert(model, quantization: str = "float32", outputs: str = "detections",
            input_type: str = "uint8", representative_data: Optional[str] = None,
            num_calibration_images: int = DEFAULT_CALIBRATION_IMAGES,
            metadata: bool = True) -> bytes:
    """The .tflite flatbuffer of `model` (EMA weights when it keeps them); see the module doc.

    Args:
      quantization: "float32"; "float16" (weights stored as float16); "int8" (full
        integer, calibrated on `num_calibration_images` images of `representative_data`,
        a TFRecord file pattern; inputs of `input_type`, outputs float32).
      metadata: a detection file gets the TFLite metadata and label file that MediaPipe
        and the Task Library need (exporters/tflite_metadata.py).
    """
    quantization = canonical_quantization(quantization)
    _check_choice("outputs", outputs, OUTPUTS)
    _check_choice("input_type", input_type, INPUT_TYPES)
    # A quantization-aware trained model carries its int8 ranges: no calibration images.
    qat = is_quantization_aware(model.config)
    if quantization == "int8" and qat and model.config.act_type not in QAT_INT8_ACTIVATIONS:
        # The converter would leave most of such a network in float32 instead of failing.
        raise ValueError(
            "int8 export of a quantization-aware trained %s is not supported: its act_type %r "
            "needs int8 ranges that QAT does not learn yet (activation inputs, squeeze-excite), "
            "so most of the file would stay float. QAT int8 covers act_type %s (the Lite "
            "models); for this model export float16, or post-training int8 of a model trained "
            "without model_optimizations.quantize"
            % (model.config.name, model.config.act_type, " or ".join(QAT_INT8_ACTIVATIONS)))
    if quantization == "int8" and not representative_data and not qat:
        raise ValueError("int8 quantization needs representative images: give a TFRecord "
                         "file pattern (representative_data, --representative_data)")
    if outputs == "detections" and metadata:
        label_lines(model.config)  # A label map that does not fit fails before converting.
    ensure_built(model)  # Variables must exist before tracing.
    model = strip_for_export(model)  # A pruned model: plain network, masked kernels.
    with averaged_weights(model), tempfile.TemporaryDirectory() as saved_dir:
        module = _ServingModule(model, outputs, input_type)
        # What the converter would do with a concrete function, minus saving the gradient
        # function of every custom-gradient op (each swish): that took half the conversion.
        tf.saved_model.save(module, saved_dir, signatures={"serving_default": module.serve},
                            options=tf.saved_model.SaveOptions(experimental_custom_gradients=False))
        with _without_gradient_warnings():
            converter = tf.lite.TFLiteConverter.from_saved_model(saved_dir)
        converter.allow_custom_ops = outputs == "detections"
        if quantization == "float16":
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
            converter.target_spec.supported_types = [tf.float16]
        elif quantization == "int8" and qat:
            # Every int8 scale comes from the model's fake-quant ranges (learned in
            # training, see optimization/quantization.py). supported_ops stays unset:
            # TF 2.21 then demands a representative dataset before it sees the fake-quant
            # ops; the network is all int8 anyway (the tests check it).
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
            converter.inference_output_type = tf.float32
        elif quantization == "int8":
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
            converter.representative_dataset = lambda: calibration_images(
                model.config, representative_data, num_calibration_images, input_type)
            converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
            converter.inference_output_type = tf.float32
        with _without_gradient_warnings():
            flatbuffer = converter.convert()
    if outputs == "detections" and metadata:
        flatbuffer = with_detection_metadata(flatbuffer, model.config, input_type)
    return flatbuffer


def export_tflite(model, path: str, quantization: str = "float32", outputs: str = "detections",
                  input_type: str = "uint8", representative_data: Optional[str] = None,
                  num_calibration_images: int = DEFAULT_CALIBRATION_IMAGES) -> str:
    """Converts `model` (see `convert`) and writes `path` and its sidecar json atomically.

    Returns `path`.
    """
    quantization = canonical_quantization(quantization)
    flatbuffer = convert(model, quantization, outputs, input_type, representative_data,
                         num_calibration_images)
    write_bytes_atomically(path, flatbuffer)
    # The sidecar last: a runner that finds it finds the matching .tflite.
    write_json_atomically(sidecar_path(path),
                          sidecar_info(model.config, outputs, quantization, input_type))
    return path
