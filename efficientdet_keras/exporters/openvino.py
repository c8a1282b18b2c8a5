"""OpenVINO export: the detection SavedModel's image signature as an OpenVINO IR, NMS included.

    from efficientdet_keras.exporters.openvino import export_openvino
    export_openvino(model, "exported/model.xml", precision="float16")
    export_openvino(model, "exported/int8/model.xml", precision="int8",
                    calibration_data="data/val-*.tfrecord")

writes `model.xml` (the graph), `model.bin` (the weights) and the sidecar `model.xml.json`
(inference/sidecar.py: model name, input size, classes, label map, anchors, normalisation;
plus the weights' precision and the NMS settings inside the file), each atomically, the
sidecar last. The IR is the SavedModel's `serving_default` function (inference/
serving_graph.py) converted with OpenVINO's TensorFlow frontend, pre-processing included:
  input   images             uint8 [batch, height, width, 3], all dynamic: the graph
                             letterboxes each image to config.image_size itself
  outputs detection_boxes    float32 [batch, N, 4] ymin, xmin, ymax, xmax normalised to each
                             original image
          detection_scores   float32 [batch, N], high to low
          detection_classes  float32 [batch, N] class ids 1..num_classes (0 for padding)
          num_detections     float32 [batch]        N = nms_configs.max_output_size
The NMS is the config's, soft-NMS included: OpenVINO's NonMaxSuppression takes TensorFlow's
soft_nms_sigma, so the default method (gaussian) survives conversion, unlike in ONNX.

precision "float16" stores the weights in float16 (half the size); OpenVINORunner computes in
float32 either way. precision "int8" quantizes the network after training with NNCF
(openvino_int8.py): convolutions run on int8 weights and activations calibrated on images of
the given TFRecords, while pre-processing, the class and box prediction convolutions, box
decoding and NMS stay in float32. BatchNorm is folded into the convs as in the SavedModel, EMA
weights are exported when the model keeps them and a pruned model without its wrappers.
"""

import os
import shutil
import tempfile
from typing import Optional

from efficientdet_keras.checkpoint import ensure_built
from efficientdet_keras.exporters.strip import strip_for_export
from efficientdet_keras.inference.openvino_runner import openvino_module
from efficientdet_keras.inference.serving_graph import DetectionModule, float32_serving_network
from efficientdet_keras.inference.sidecar import model_info, sidecar_path
from efficientdet_keras.model.weights import averaged_weights
from efficientdet_keras.utils.fileio import fsync_tree, write_json_atomically

# The file efficientdet-export --format=openvino writes in --export_dir (weights: model.bin).
OPENVINO_FILE_NAME = "model.xml"
PRECISIONS = ("float32", "float16", "int8")


def check_precision(precision: str, calibration_data: Optional[str] = None) -> None:
    """ValueError (one line) for an unknown precision, or int8 without calibration images."""
    if precision not in PRECISIONS:
        raise ValueError("OpenVINO precision must be one of %s, got %r"
                         % (", ".join(PRECISIONS), precision))
    if precision == "int8" and not calibration_data:
        raise ValueError("OpenVINO int8 needs calibration images: give a TFRecord file "
                         "pattern (calibration_data, --representative_data)")


def sidecar_info(config, precision: str) -> dict:
    """The sidecar json of an IR: the model's keys (`model_info`), the weights' precision and
    the NMS settings the file's detections went through."""
    return dict(model_info(config), format="openvino", precision=precision,
                nms_configs=dict(config.nms_configs.as_dict(),
                                 method=config.nms_configs.method or "hard"))


def convert(model, fold_batch_norm: bool = True):
    """The openvino.Model of `model`'s serving function (EMA weights when it keeps them)."""
    ov = openvino_module()
    ensure_built(model)  # Variables must exist before tracing.
    model = strip_for_export(model)
    with averaged_weights(model):
        network = float32_serving_network(model, fold_batch_norm)
        module = DetectionModule(network, network.config)
        # The variables become constants here, while the EMA values are swapped in.
        return ov.convert_model(module.detect_images.get_concrete_function())


def export_openvino(model, path: str, precision: str = "float32",
                    fold_batch_norm: bool = True, calibration_data: Optional[str] = None,
                    num_calibration_images: int = 100) -> str:
    """Converts `model` (see `convert`) and writes the IR at `path` (.xml; its weights
    beside it as .bin) and its sidecar json, each atomically.

    Args:
      model: an EfficientDetNet; its config's NMS goes into the file.
      path: the .xml to write; its folder is created.
      precision: "float32", "float16" weights, or "int8" (post-training quantization).
      fold_batch_norm: fold every BatchNorm into its conv, as the SavedModel does.
      calibration_data: int8: TFRecord file pattern of the calibration images.
      num_calibration_images: int8: how many of them calibrate the activation ranges.

    Returns `path`.

    Raises:
      ValueError (one line): a bad precision, int8 without calibration_data or a path not
        ending in .xml.
      MissingExtraError: openvino (or, for int8, nncf) is not installed.
    """
    check_precision(precision, calibration_data)
    if not path.endswith(".xml"):
        raise ValueError("%s: an OpenVINO IR is written as a .xml file (its weights as .bin)"
                         % path)
    ov = openvino_module()
    ir = convert(model, fold_batch_norm)
    if precision == "int8":
        from efficientdet_keras.exporters.openvino_int8 import quantize
        ir = quantize(ir, model.config, calibration_data, num_calibration_images)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".openvino-", dir=folder)
    try:
        staged = os.path.join(staging, os.path.basename(path))
        ov.save_model(ir, staged, compress_to_fp16=precision == "float16")
        fsync_tree(staging)  # The renames below publish complete files only.
        # The weights first: an .xml that is found has its .bin.
        weights = path[:-len(".xml")] + ".bin"
        os.replace(staged[:-len(".xml")] + ".bin", weights)
        os.replace(staged, path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    # The sidecar last: a runner that finds it finds the matching IR.
    write_json_atomically(sidecar_path(path), sidecar_info(model.config, precision))
    return path
