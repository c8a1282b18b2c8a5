"""The export formats, each described once: what the export, the command-line choices, the
format comparison, evaluation and the docs iterate.

    fmt = FORMATS["tflite"]
    fmt.file_name, fmt.precisions, fmt.extra      # "model.tflite", ("float32", ...), "tflite"
    path = fmt.write(model, "exported/demo", ExportOptions(precision="int8", ...))

A new format is one `ExportFormat` row here: its writer (in exporters/), the NMS its file runs,
its parity check and the runner that loads it (in inference/).

Nothing here imports TensorFlow at module level: the command-line tools read the names for
their --help.
"""

import dataclasses
import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

FLOAT32, FLOAT16, BFLOAT16, INT8 = "float32", "float16", "bfloat16", "int8"
# How a precision is written in a compared variant's name ("tflite_fp16").
_PRECISION_SHORT = {FLOAT16: "fp16", BFLOAT16: "bf16", INT8: "int8"}


@dataclasses.dataclass(frozen=True)
class ExportOptions:
    """How a file is written.

    precision: the file's precision (one of its format's `precisions`).
    calibration_data: TFRecord file pattern of images for int8 calibration and the parity
      checks (None: synthetic check images; int8 then needs a quantization-aware model).
    num_calibration_images: int8: images that calibrate the activation ranges.
    fold_batch_norm: saved_model, onnx, openvino: every BatchNorm folded into its conv.
    onnx_opset: onnx: the file's opset.
    tflite_outputs, tflite_input_type: tflite: "detections" or "raw"; "uint8" or "float32".
    """
    precision: str = FLOAT32
    calibration_data: Optional[str] = None
    num_calibration_images: int = 100
    fold_batch_norm: bool = True
    onnx_opset: int = 17
    tflite_outputs: str = "detections"
    tflite_input_type: str = "uint8"


@dataclasses.dataclass(frozen=True)
class ExportFormat:
    """One export format.

    name: its --format name. title: what the result line calls it.
    file_name: the file written in the export folder that a Detector loads (None: the
      folder itself). precisions: accepted precisions, the default first.
    compared_precisions: the precisions the format comparison writes a row for.
    extra: the package extra its writer and runner need (None: none).
    write(model, export_dir, options) -> path; nms(config) -> the NMS its file runs;
    check(model, path, images, options) -> parity CheckResults (None: no check);
    runner(path, num_threads, hparams) -> the runtime's runner of the file (None: not a
    file a runner loads). evaluation(runner, source, annotation_file, **settings) -> the
    COCO evaluation of the file (settings as CheckpointEvaluation's). details(config,
    options) -> what the result line says of the file.
    """
    name: str
    title: str
    file_name: Optional[str]
    precisions: Tuple[str, ...]
    compared_precisions: Tuple[str, ...]
    extra: Optional[str]
    write: Callable[[Any, str, ExportOptions], str]
    nms: Callable[[Any], str]
    check: Optional[Callable[[Any, str, Sequence, ExportOptions], List[Any]]] = None
    runner: Optional[Callable[[str, Optional[int], Any], Any]] = None
    evaluation: Optional[Callable[..., Any]] = None
    details: Optional[Callable[[Any, ExportOptions], str]] = None

    def describe(self, config, options: ExportOptions) -> str:
        """What the result line says of a file written with `options` (default: its
        precision)."""
        return self.details(config, options) if self.details else options.precision

    def path_in(self, export_dir: str) -> str:
        """What a Detector loads of an export into `export_dir`."""
        return os.path.join(export_dir, self.file_name) if self.file_name else export_dir

    def canonical_precision(self, precision: Optional[str]) -> str:
        """`precision` as this format names it (None: its default); ValueError naming the
        format's choices."""
        if not precision:
            return self.precisions[0]
        key = str(precision).lower()
        key = {"fp32": FLOAT32, "fp16": FLOAT16, "bf16": BFLOAT16}.get(key, key)
        if key not in self.precisions:
            raise ValueError("%s takes precision %s, not %r"
                             % (self.name, ", ".join(self.precisions), precision))
        return key


def _config_nms(config) -> str:
    return config.nms_configs.method or "hard"


# Writers: each calls its exporter with the options it takes.

def _write_saved_model(model, export_dir: str, options: ExportOptions) -> str:
    from efficientdet_keras.exporters.saved_model import export_detector
    precision = None if options.precision == FLOAT32 else options.precision
    return export_detector(model, export_dir, options.fold_batch_norm, precision)


def _write_hub(model, export_dir: str, options: ExportOptions) -> str:
    from efficientdet_keras.exporters.hub_module import export_feature_module
    return export_feature_module(model, export_dir)


def _write_tflite(model, export_dir: str, options: ExportOptions) -> str:
    from efficientdet_keras.exporters.tflite import export_tflite
    os.makedirs(export_dir, exist_ok=True)
    return export_tflite(model, FORMATS["tflite"].path_in(export_dir), options.precision,
                         options.tflite_outputs, options.tflite_input_type,
                         options.calibration_data, options.num_calibration_images)


def _write_onnx(model, export_dir: str, options: ExportOptions) -> str:
    from efficientdet_keras.exporters.onnx import export_onnx
    os.makedirs(export_dir, exist_ok=True)
    return export_onnx(model, FORMATS["onnx"].path_in(export_dir), options.onnx_opset,
                       options.fold_batch_norm)


def _write_openvino(model, export_dir: str, options: ExportOptions) -> str:
    from efficientdet_keras.exporters.openvino import export_openvino
    return export_openvino(model, FORMATS["openvino"].path_in(export_dir), options.precision,
                           options.fold_batch_norm, options.calibration_data,
                           options.num_calibration_images)


# NMS of the file each format writes.

def _tflite_nms(config) -> str:
    from efficientdet_keras.exporters.tflite import op_nms_method
    return "op " + op_nms_method(config)


def _onnx_nms(config) -> str:
    from efficientdet_keras.exporters.onnx import onnx_nms_method
    return onnx_nms_method(config)


# What the result line says of each file.

def _saved_model_details(config, options: ExportOptions) -> str:
    return "%s compute, %s NMS, uint8 images of any size and batch" % (
        options.precision, _config_nms(config))


def _tflite_details(config, options: ExportOptions) -> str:
    return "%s, %s outputs, %s input, %s NMS" % (
        options.precision, options.tflite_outputs, options.tflite_input_type,
        _tflite_nms(config))


def _onnx_details(config, options: ExportOptions) -> str:
    across = _onnx_nms(config) == "global"
    return "opset %d, hard NMS %s, uint8 images of any size and batch" % (
        options.onnx_opset, "across classes" if across else "per class")


def _openvino_details(config, options: ExportOptions) -> str:
    return "%s weights, %s NMS, uint8 images of any size and batch" % (
        options.precision, _config_nms(config))


# Parity checks of a written file against the Keras model.

def _check_tflite(model, path: str, images, options: ExportOptions):
    from efficientdet_keras.exporters import tflite_parity
    return tflite_parity.standard_checks(model, path, images)


def _check_graph_file(model, path: str, images, options: ExportOptions):
    from efficientdet_keras.exporters import graph_parity
    return graph_parity.standard_checks(model, path, images, options.fold_batch_norm)


# Runners of the written files.

def _tflite_runner(path: str, num_threads: Optional[int] = None, hparams=None):
    from efficientdet_keras.inference.tflite_runner import TFLiteRunner
    return TFLiteRunner(path, num_threads=num_threads, config_overrides=hparams)


def _graph_file_runner(path: str, num_threads: Optional[int] = None, hparams=None):
    from efficientdet_keras.inference.loading import graph_file_runner
    return graph_file_runner(path, num_threads, config_overrides=hparams)


# The COCO evaluations of the files: a .tflite runs image by image, a graph file by batches.

def _tflite_evaluation(runner, source, annotation_file, **settings):
    from efficientdet_keras.evaluation.tflite_evaluation import TFLiteEvaluation
    return TFLiteEvaluation(runner, source, annotation_file, **settings)


def _graph_file_evaluation(runner, source, annotation_file, **settings):
    from efficientdet_keras.evaluation.file_evaluation import GraphFileEvaluation
    return GraphFileEvaluation(runner, source, annotation_file, **settings)


FORMATS: Dict[str, ExportFormat] = {fmt.name: fmt for fmt in (
    ExportFormat("saved_model", "detection SavedModel", file_name=None,
                 precisions=(FLOAT32, BFLOAT16, FLOAT16), compared_precisions=(FLOAT32,),
                 extra=None, write=_write_saved_model, nms=_config_nms,
                 details=_saved_model_details),
    ExportFormat("hub", "TF-Hub feature module", file_name=None, precisions=(FLOAT32,),
                 compared_precisions=(), extra=None, write=_write_hub, nms=_config_nms),
    ExportFormat("onnx", "ONNX model", file_name="model.onnx", precisions=(FLOAT32,),
                 compared_precisions=(FLOAT32,), extra="onnx", write=_write_onnx,
                 nms=_onnx_nms, check=_check_graph_file, runner=_graph_file_runner,
                 evaluation=_graph_file_evaluation, details=_onnx_details),
    ExportFormat("openvino", "OpenVINO model", file_name="model.xml",
                 precisions=(FLOAT32, FLOAT16, INT8), compared_precisions=(FLOAT32, FLOAT16, INT8),
                 extra="openvino", write=_write_openvino, nms=_config_nms,
                 check=_check_graph_file, runner=_graph_file_runner,
                 evaluation=_graph_file_evaluation, details=_openvino_details),
    ExportFormat("tflite", "TFLite model", file_name="model.tflite",
                 precisions=(FLOAT32, FLOAT16, INT8), compared_precisions=(FLOAT32, FLOAT16, INT8),
                 extra="tflite", write=_write_tflite, nms=_tflite_nms, check=_check_tflite,
                 runner=_tflite_runner, evaluation=_tflite_evaluation, details=_tflite_details),
)}


def get_format(name: str) -> ExportFormat:
    """The format of that name; ValueError listing the names."""
    if name not in FORMATS:
        raise ValueError("unknown format %r: choose from %s" % (name, ", ".join(FORMATS)))
    return FORMATS[name]


def format_of_file(path: str) -> Optional[ExportFormat]:
    """The format whose file `path` is (by its file name's suffix), or None."""
    for fmt in FORMATS.values():
        if fmt.file_name and path.endswith(os.path.splitext(fmt.file_name)[1]):
            return fmt
    return None


def variant_name(format_name: str, precision: str) -> str:
    """A compared file's name: the format's, with the precision unless float32
    ("tflite_fp16")."""
    if precision == FLOAT32:
        return format_name
    return "%s_%s" % (format_name, _PRECISION_SHORT[precision])


def compared_variants() -> List[Tuple[str, ExportFormat, str]]:
    """(variant name, format, precision) of every file the format comparison writes."""
    return [(variant_name(fmt.name, precision), fmt, precision)
            for fmt in FORMATS.values() for precision in fmt.compared_precisions]


def file_megabytes(path: str) -> float:
    """Size on disk of an exported file (an OpenVINO IR with its .bin) or folder, in MB."""
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(root, name))
                   for root, _, names in os.walk(path) for name in names) / 1e6
    size = os.path.getsize(path)
    if path.endswith(".xml"):
        size += os.path.getsize(path[:-len(".xml")] + ".bin")
    return size / 1e6
