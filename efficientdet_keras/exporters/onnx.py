"""ONNX export: the detection SavedModel's image signature as one .onnx file, NMS included.

    from efficientdet_keras.exporters.onnx import export_onnx
    export_onnx(model, "exported/model.onnx")

writes `model.onnx` and its sidecar `model.onnx.json` (inference/sidecar.py: model name,
input size, classes, label map, anchors, normalisation; plus the opset and the NMS settings
inside the file), each atomically. The file is the SavedModel's `serving_default` function
(inference/serving_graph.py) converted with tf2onnx, pre-processing included:
  input   images             uint8 [batch, height, width, 3]: batch, height and width are
                             all dynamic. The graph letterboxes each image to
                             config.image_size itself (a Loop over the batch: aspect-preserving
                             Resize, bilinear with TF's half-pixel centres, padding at the
                             bottom and right), then normalises: feed images of any size.
  outputs detection_boxes    float32 [batch, N, 4] ymin, xmin, ymax, xmax normalised to each
                             original image
          detection_scores   float32 [batch, N], high to low
          detection_classes  float32 [batch, N] class ids 1..num_classes (0 for padding)
          num_detections     float32 [batch]        N = nms_configs.max_output_size
The NMS is hard NMS, ONNX's NonMaxSuppression (iou_thresh, score_thresh, max_output_size
of nms_configs): per class (each class's boxes shifted to a region of their own) unless
nms_configs.method is "global" (across classes). Soft-NMS (the default nms_configs.method,
"gaussian") and "combined" have no ONNX counterpart, so their files run hard NMS per class
and the export says so in one line (`onnx_nms_method`, `nms_notice`). The SavedModel's other signatures, encoded images (DecodeImage) and
tf.Examples (ParseExample), have no ONNX ops and are not exported: decode images first.

BatchNorm is folded into the convs as in the SavedModel (model/folding.py), the network
computes in float32, EMA weights are exported when the model keeps them and a pruned model
without its wrappers.
"""

import os

import tensorflow as tf
from absl import logging

from efficientdet_keras.checkpoint import ensure_built
from efficientdet_keras.exporters.strip import strip_for_export
from efficientdet_keras.inference.serving_graph import DetectionModule, float32_serving_network
from efficientdet_keras.inference.sidecar import model_info, sidecar_path
from efficientdet_keras.model.weights import averaged_weights
from efficientdet_keras.utils.extras import import_extra
from efficientdet_keras.utils.fileio import write_bytes_atomically, write_json_atomically

# The file efficientdet-export --format=onnx writes in --export_dir (sidecar: + ".json").
ONNX_FILE_NAME = "model.onnx"
# Opset 17: ONNX Runtime runs it from 1.13 on (the onnx extra asks for 1.18 or later) and
# TensorRT's ONNX parser reads it from 8.6 on. The graph needs 13 or more (NonMaxSuppression
# came in 10, Resize with half-pixel centres in 11, Gather with batch dims needs 12);
# tf2onnx writes at most 18.
DEFAULT_OPSET = 17
MIN_OPSET, MAX_OPSET = 13, 18
INPUT_NAME = "images"
# The input's dynamic dimensions, named (tf2onnx calls them unk__<n>); outputs share "batch".
_DYNAMIC_INPUT_DIMENSIONS = ("batch", "height", "width")


# The NMS methods (postprocess.NMS_METHODS) that ONNX's NonMaxSuppression runs as they are.
ONNX_NMS_METHODS = ("hard", "global")


def onnx_nms_method(config) -> str:
    """The NMS an .onnx of `config` runs: its method when ONNX has it, else "hard" (per class).

    tf2onnx would turn soft-NMS into NonMaxSuppression with an IoU threshold of 1, which
    suppresses nothing; hard NMS per class is the nearest algorithm ONNX holds."""
    method = config.nms_configs.method or "hard"
    return method if method in ONNX_NMS_METHODS else "hard"


def nms_notice(config):
    """One line saying that the file runs hard NMS instead of the config's method, or None."""
    method = config.nms_configs.method or "hard"
    if method in ONNX_NMS_METHODS:
        return None
    return ("nms_configs.method is %r, which ONNX's NonMaxSuppression cannot run: the .onnx "
            "runs hard NMS per class (efficientdet-eval --nms_method=hard gives its AP)" % method)


def onnx_config(config):
    """A copy of `config` with the NMS the .onnx runs (`onnx_nms_method`)."""
    return config.copy().override({"nms_configs": {"method": onnx_nms_method(config)}})


def check_opset(opset: int) -> None:
    if not MIN_OPSET <= int(opset) <= MAX_OPSET:
        raise ValueError("ONNX opset must be %d to %d (NonMaxSuppression, Resize with "
                         "half-pixel centres and batched Gather need %d; tf2onnx writes up to "
                         "%d), got %s" % (MIN_OPSET, MAX_OPSET, MIN_OPSET, MAX_OPSET, opset))


def _tf2onnx():
    return import_extra("tf2onnx", "ONNX export", "onnx")


def sidecar_info(config, opset: int) -> dict:
    """The sidecar json of an .onnx: the model's keys (`model_info`), the opset, and the NMS
    settings the file's detections went through."""
    return dict(model_info(config), format="onnx", opset=int(opset),
                nms_configs=dict(config.nms_configs.as_dict(), method=onnx_nms_method(config)))


def _name_dynamic_dimensions(proto) -> None:
    """Names the input's batch, height and width (and the outputs' batch) for readers such
    as Netron and TensorRT's optimisation profiles."""
    dims = proto.graph.input[0].type.tensor_type.shape.dim
    for dim, name in zip(dims, _DYNAMIC_INPUT_DIMENSIONS):
        dim.dim_param = name
    for output in proto.graph.output:
        output.type.tensor_type.shape.dim[0].dim_param = "batch"


def convert(model, opset: int = DEFAULT_OPSET, fold_batch_norm: bool = True) -> bytes:
    """The serialized ONNX model of `model` (EMA weights when it keeps them); see the
    module doc.

    Raises:
      ValueError (one line): the opset is out of range.
      MissingExtraError: tf2onnx is not installed.
    """
    check_opset(opset)
    tf2onnx = _tf2onnx()
    ensure_built(model)  # Variables must exist before tracing.
    model = strip_for_export(model)
    with averaged_weights(model):
        network = float32_serving_network(model, fold_batch_norm)
        module = DetectionModule(network, onnx_config(network.config))
        # The variables become constants here, while the EMA values are swapped in.
        proto, _ = tf2onnx.convert.from_function(
            module.detect_images, opset=int(opset),
            input_signature=[tf.TensorSpec([None, None, None, 3], tf.uint8, name=INPUT_NAME)])
    _name_dynamic_dimensions(proto)
    return proto.SerializeToString()


def export_onnx(model, path: str, opset: int = DEFAULT_OPSET, fold_batch_norm: bool = True) -> str:
    """Converts `model` (see `convert`) and writes `path` and its sidecar json atomically.

    Args:
      model: an EfficientDetNet. With soft-NMS in its config the file runs hard NMS per
        class, and a warning says so (`nms_notice`).
      path: the .onnx file to write (its sidecar: path + ".json"); its folder is created.
      opset: the ONNX opset, MIN_OPSET to MAX_OPSET.
      fold_batch_norm: fold every BatchNorm into its conv, as the SavedModel does.

    Returns `path`.
    """
    notice = nms_notice(model.config)
    if notice:
        logging.warning("%s", notice)
    data = convert(model, opset, fold_batch_norm)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    write_bytes_atomically(path, data)
    # The sidecar last: a runner that finds it finds the matching .onnx.
    write_json_atomically(sidecar_path(path), sidecar_info(model.config, opset))
    return path
