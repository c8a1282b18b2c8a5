"""efficientdet_keras: EfficientDet training, evaluation and export with Keras Model.fit.

Keras 2 (the tf_keras package) is used throughout; TF_USE_LEGACY_KERAS is set
before TensorFlow loads so that `tf.keras` in user code is the same Keras.

The public names below are imported on first use, so that importing a
submodule (a command-line tool answering --help, the config) does not load
TensorFlow.
"""

import importlib
import os

# Set here only: importing any submodule (a command-line tool included) runs this file first.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

__version__ = "0.1.0"

# Public name -> the submodule that defines it.
_EXPORTS = {
    # The verbs: a run, its evaluation and its export in one call each.
    "train": "workflows.train", "evaluate": "workflows.evaluate", "export": "workflows.export",
    "TrainResult": "workflows.train", "EvalResult": "workflows.evaluate",
    "ExportResult": "workflows.export", "FORMATS": "workflows.formats",
    "tune": "workflows.tune", "TuneResult": "workflows.tune",
    "check_data": "workflows.check_data", "CheckResult": "workflows.check_data",
    "convert": "workflows.convert", "ConvertResult": "workflows.convert",
    # Config.
    "Config": "config", "MODEL_NAMES": "config", "get_efficientdet_config": "config",
    "validate_config": "config",
    # The network and its checkpoints.
    "EfficientDetNet": "model", "restore_ckpt": "checkpoint", "save_ckpt": "checkpoint",
    "released_checkpoint_dir": "checkpoint", "RELEASED_CHECKPOINTS": "checkpoint",
    # Data.
    "InputPipeline": "data.pipeline", "make_source": "data.sources",
    "open_dataset": "data.datasets", "classes_into_config": "data.formats.classes",
    # Training.
    "EfficientDetNetTrain": "training.trainer", "EfficientDetNetTrainHub": "training.hub_trainer",
    "TrainingRun": "training.run", "get_callbacks": "training.callbacks",
    "TrainingStopped": "training.preemption", "RESUMABLE_EXIT_STATUS": "training.preemption",
    # Evaluation.
    "COCOEvaluator": "evaluation",
    # Export.
    "export_detector": "exporters.saved_model", "export_tflite": "exporters.tflite",
    "export_onnx": "exporters.onnx", "export_feature_module": "exporters.hub_module",
    # Inference.
    "Detector": "inference.detector", "Detections": "inference.results",
    "ensemble_detections": "inference.results",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError("module %r has no attribute %r" % (__name__, name))
    value = getattr(importlib.import_module("%s.%s" % (__name__, _EXPORTS[name])), name)
    globals()[name] = value  # Later look-ups skip this function.
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
