"""export: a trained model as a file another runtime serves, written and checked.

    from efficientdet_keras import export
    result = export("runs/demo", "tflite", "exported/demo-tflite", precision="int8",
                    calibration_data="data/val-*.tfrecord")
    print(result.summary())        # what was written, its size and the NMS it runs
    result.path                    # exported/demo-tflite/model.tflite, what a Detector loads

The formats are the rows of `workflows.formats.FORMATS`.
"""

import dataclasses
import os
import shutil
from typing import Any, List, Optional

from efficientdet_keras.workflows.formats import (INT8, ExportFormat, ExportOptions,
                                                  file_megabytes, get_format)

# The file of a training run that maps the model's class ids to the data's, and goes with
# every export of the run.
CLASS_MAPPING_FILE = "classes.json"


@dataclasses.dataclass
class ExportResult:
    """What `export` wrote.

    format, precision: as written. path: what a Detector loads (the file, or the SavedModel
    or module folder). export_dir: the folder. size_mb: on disk. details: the format's
    description of the file (its NMS among them).
    parity: the parity checks' results (CheckResult: name, passed, summary), empty when not
    checked.
    """
    format: str
    precision: str
    path: str
    export_dir: str
    size_mb: float
    details: str
    parity: List[Any] = dataclasses.field(default_factory=list)

    @property
    def failed_checks(self) -> List[Any]:
        return [check for check in self.parity if not check.passed]

    def summary(self) -> str:
        """One line: the format, its details, the path and size; then a line per check."""
        lines = ["Exported %s (%s) to %s, %.1f MB" % (
            get_format(self.format).title, self.details, self.path, self.size_mb)]
        lines += ["Parity: " + check.summary for check in self.parity]
        return "\n".join(lines)


def model_location(model: str, model_dir: Optional[str] = None):
    """(model_dir, ckpt) of a run directory, a checkpoint or a released name: the run whose
    config.yaml it is read with (`model_dir` when given, else the run the checkpoint sits in,
    else "") and the checkpoint ("" for a run's latest)."""
    from efficientdet_keras.inference.loading import CONFIG_FILE, config_beside_checkpoint
    if os.path.isdir(model) and os.path.exists(os.path.join(model, CONFIG_FILE)):
        return model, ""
    if not model_dir and os.path.exists(model):
        model_dir = os.path.dirname(config_beside_checkpoint(model))
    return model_dir or "", model


def load_trained_model(model, model_name: str = "", hparams="", model_dir: Optional[str] = None):
    """An EfficientDetNet: `model` itself, or restored (EMA weights) from a run directory,
    a checkpoint or a released model's name, with its run's or released config
    (model_dir, model_name, hparams: see `model_location`, inference.loading.load_run_config)."""
    if not isinstance(model, (str, os.PathLike)):
        return model
    from efficientdet_keras.inference.loading import load_model_and_config
    model_dir, ckpt = model_location(os.fspath(model), model_dir)
    return load_model_and_config(model_dir, ckpt, model_name, hparams)[0]


def check_export_options(fmt: ExportFormat, options: ExportOptions, model, model_name="",
                         hparams="", model_dir: Optional[str] = None) -> None:
    """Raises ValueError (one line) for options that cannot work, before a model loads."""
    if options.precision == INT8 and not options.calibration_data and not (
            fmt.name == "tflite" and _is_quantization_aware(model, model_name, hparams,
                                                            model_dir)):
        raise ValueError(
            "%s int8 needs calibration images: --representative_data (calibration_data= in "
            "Python), a TFRecord file pattern%s" % (fmt.name, ", unless the model was trained "
                                                    "with quantization-aware training"
                                                    if fmt.name == "tflite" else ""))
    if fmt.name == "onnx":
        from efficientdet_keras.exporters.onnx import check_opset
        try:
            check_opset(options.onnx_opset)
        except ValueError as e:
            raise ValueError("onnx_opset: %s" % e) from None
    if fmt.name == "tflite":
        from efficientdet_keras.exporters.tflite import INPUT_TYPES, OUTPUTS
        for what, value, choices in (("tflite_outputs", options.tflite_outputs, OUTPUTS),
                                     ("tflite_input_type", options.tflite_input_type,
                                      INPUT_TYPES)):
            if value not in choices:
                raise ValueError("%s must be one of %s, got %r"
                                 % (what, ", ".join(choices), value))


def _is_quantization_aware(model, model_name: str, hparams, model_dir: Optional[str]) -> bool:
    """Whether the model (or its run's config, read without building it) was trained with
    quantization-aware training: its int8 ranges were learned."""
    from efficientdet_keras.optimization import is_quantization_aware
    if not isinstance(model, (str, os.PathLike)):
        return is_quantization_aware(model.config)
    from efficientdet_keras.inference.loading import load_run_config
    model_dir, ckpt = model_location(os.fspath(model), model_dir)
    return is_quantization_aware(load_run_config(model_dir, model_name, hparams, ckpt))


def export(model, format: str = "saved_model", export_dir: Optional[str] = None, *,
           precision: Optional[str] = None, calibration_data: Optional[str] = None,
           check: bool = True, model_dir: Optional[str] = None, model_name: str = "",
           hparams="",
           num_calibration_images: int = 100, fold_batch_norm: bool = True,
           onnx_opset: int = 17, tflite_outputs: str = "detections",
           tflite_input_type: str = "uint8") -> ExportResult:
    """Writes `model` in `format` into `export_dir` and checks the file against the model.

    Args:
      model: an EfficientDetNet, or what to restore one from (EMA weights): a training
        directory (its config.yaml, latest checkpoint), a checkpoint, or a released model's
        name such as "efficientdet-lite0".
      format: a name of `formats.FORMATS`: saved_model, hub, onnx, openvino, tflite.
      export_dir: the folder written (replaced atomically for a SavedModel or module).
      precision: the file's precision (the format's `precisions`; default its first).
      calibration_data: TFRecord file pattern: int8 calibration and the parity checks' images.
      check: run the format's parity checks (tflite, onnx, openvino).
      model_dir: the run whose config.yaml a checkpoint `model` is read with (default: the
        run the checkpoint sits in) and whose classes.json goes with the export.
      model_name: the model of a checkpoint without config.yaml.
      hparams: config overrides of the restored model.
      num_calibration_images: int8: images that calibrate the activation ranges.
      fold_batch_norm: saved_model, onnx, openvino: BatchNorm folded into the convolutions.
      onnx_opset: onnx: the file's opset.
      tflite_outputs: tflite: "detections" or "raw".
      tflite_input_type: tflite: "uint8" or "float32".

    Returns:
      ExportResult. A run's classes.json is copied beside the file.

    Raises:
      ValueError: one line, for options that cannot work, before the model loads.
    """
    if not export_dir:
        raise ValueError("export_dir is required")
    fmt = get_format(format)
    options = ExportOptions(fmt.canonical_precision(precision), calibration_data or None,
                            num_calibration_images, fold_batch_norm, onnx_opset,
                            tflite_outputs, tflite_input_type)
    check_export_options(fmt, options, model, model_name, hparams, model_dir)
    keras_model = load_trained_model(model, model_name, hparams, model_dir)
    path = fmt.write(keras_model, export_dir, options)
    result = ExportResult(fmt.name, options.precision, path, export_dir, file_megabytes(path),
                          fmt.describe(keras_model.config, options))
    if check and fmt.check is not None:
        from efficientdet_keras.exporters.parity import check_images
        images = check_images(keras_model.config, options.calibration_data)
        result.parity = fmt.check(keras_model, path, images, options)
    if isinstance(model, (str, os.PathLike)):
        copy_class_mapping(model_location(os.fspath(model), model_dir)[0], export_dir)
    return result


def copy_class_mapping(model_dir: str, export_dir: str) -> None:
    """The run's classes.json (each model id with the data's own id and name) goes with the
    export, so whoever serves it can map detections back to the dataset's ids."""
    mapping = os.path.join(model_dir, CLASS_MAPPING_FILE) if model_dir else ""
    if mapping and os.path.exists(mapping) and os.path.isdir(export_dir):
        shutil.copyfile(mapping, os.path.join(export_dir, CLASS_MAPPING_FILE))
