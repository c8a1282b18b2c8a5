"""Finding the config and weights of a model: a training directory, a checkpoint, a released
checkpoint's name, or an export.

Nothing here imports TensorFlow at module level (the command-line tools import this module
to answer --help at once).
"""

import os
from typing import Optional

CONFIG_FILE = "config.yaml"
SAVED_MODEL_FILE = "saved_model.pb"
TFLITE_SUFFIX = ".tflite"
ONNX_SUFFIX = ".onnx"
OPENVINO_SUFFIX = ".xml"
# The model of a checkpoint that names none (no config.yaml, no released name, no model_name).
DEFAULT_MODEL_NAME = "efficientdet-d0"

# What a Detector can load from, as `source_kind` names it.
MODEL_DIR, CHECKPOINT, SAVED_MODEL, TFLITE, ONNX, OPENVINO = (
    "model_dir", "checkpoint", "saved_model", "tflite", "onnx", "openvino")


def load_run_config(model_dir: str, model_name: str, hparams, ckpt: str = ""):
    """The config of a run: <model_dir>/config.yaml when the trainer wrote one, else the
    family default of model_name, else of the released checkpoint `ckpt` names (with its
    class names), else of DEFAULT_MODEL_NAME; hparams (a "k=v,..." string, YAML file or
    dict) overrides any of them."""
    from efficientdet_keras.checkpoint.released import find_released
    from efficientdet_keras.config import Config
    config_path = os.path.join(model_dir, CONFIG_FILE) if model_dir else ""
    if config_path and os.path.exists(config_path):
        return Config.from_yaml(config_path).override(hparams)
    return released_config(find_released(ckpt), model_name, hparams)


def released_config(entry, model_name: Optional[str], hparams):
    """The config a released detector (a ReleasedCheckpoint, or None) is read with: its
    model's family default and its class names, or model_name's default (its own when it
    names another model, which restoring then reports); hparams overrides either.

    Raises:
      ValueError when `entry` is an ImageNet backbone, which detects nothing.
    """
    from efficientdet_keras.checkpoint.released import BACKBONE
    from efficientdet_keras.config import get_efficientdet_config
    if entry is not None and entry.kind == BACKBONE:
        raise ValueError("%s is an ImageNet classification backbone, not a detector: start "
                         "training from it with backbone_ckpt (--backbone_ckpt)" % entry.name)
    name = model_name or (entry.model_name if entry else DEFAULT_MODEL_NAME)
    config = get_efficientdet_config(name)
    if entry is not None and entry.model_name == name and entry.label_map:
        config.label_map = entry.label_map
    return config.override(hparams)


def load_model_and_config(model_dir: str, ckpt: str, model_name: str, hparams: str,
                          use_ema: Optional[bool] = True):
    """The config (see load_run_config) and its model, restored from `ckpt` (a path or a
    released checkpoint's name; default: the latest checkpoint in model_dir) with EMA
    values where present.

    use_ema: as restore_ckpt's (True warns when the checkpoint has no EMA values, None
    takes them silently where present).
    """
    config = load_run_config(model_dir, model_name, hparams, ckpt)
    return restore_model(config, ckpt or model_dir, use_ema=use_ema), config


def restore_model(config, ckpt: str, use_ema: Optional[bool] = None):
    """An EfficientDetNet of `config` with every variable restored from `ckpt` (a prefix, a
    directory, an archive directory or a released checkpoint's name; EMA values where the
    checkpoint has them)."""
    from efficientdet_keras.checkpoint import restore_ckpt
    from efficientdet_keras.model import EfficientDetNet
    model = EfficientDetNet(config=config)
    restore_ckpt(model, ckpt, use_ema=use_ema, skip_mismatch=False)
    return model


def source_kind(path: str) -> str:
    """Which kind of model `path` holds: MODEL_DIR, CHECKPOINT, SAVED_MODEL, TFLITE, ONNX or
    OPENVINO (an IR's .xml).

    Raises:
      FileNotFoundError / ValueError, one line naming the path, when it is none of these.
    """
    if os.path.isfile(path) and path.endswith(TFLITE_SUFFIX):
        return TFLITE
    if os.path.isfile(path) and path.endswith(ONNX_SUFFIX):
        return ONNX
    if os.path.isfile(path) and path.endswith(OPENVINO_SUFFIX):
        return OPENVINO
    if os.path.isdir(path) and os.path.exists(os.path.join(path, SAVED_MODEL_FILE)):
        return SAVED_MODEL
    if os.path.isdir(path) and os.path.exists(os.path.join(path, CONFIG_FILE)):
        return MODEL_DIR
    from efficientdet_keras.checkpoint import resolve_checkpoint_path
    prefix = path[:-len(".index")] if path.endswith(".index") else path
    if not (os.path.exists(path) or os.path.exists(prefix + ".index")):
        raise FileNotFoundError("%s: no such file or directory" % path)
    try:
        resolve_checkpoint_path(path)
    except FileNotFoundError:
        raise ValueError("%s is not a model: expected a training directory (config.yaml and "
                         "ckpt-*), a checkpoint, a detection SavedModel (saved_model.pb), a "
                         ".tflite, an .onnx or an OpenVINO .xml file" % path) from None
    return CHECKPOINT


def graph_file_runner(path: str, num_threads: Optional[int] = None, config_overrides=None):
    """The runner of an exported .onnx (ONNXRunner) or OpenVINO .xml (OpenVINORunner)."""
    if path.endswith(OPENVINO_SUFFIX):
        from efficientdet_keras.inference.openvino_runner import OpenVINORunner
        return OpenVINORunner(path, num_threads, config_overrides)
    from efficientdet_keras.inference.onnx_runner import ONNXRunner
    return ONNXRunner(path, num_threads, config_overrides=config_overrides)


def config_beside_checkpoint(ckpt: str) -> str:
    """The config.yaml of the run a checkpoint belongs to ("" when there is none): in the
    checkpoint's folder, or above an archive folder (<model_dir>/archive)."""
    from efficientdet_keras.checkpoint.paths import run_file_beside
    return run_file_beside(ckpt, CONFIG_FILE)


def checkpoint_config(ckpt: str, model_name: Optional[str], hparams):
    """The config a checkpoint is read with: model_name's family default when given, else the
    config.yaml of its run; hparams overrides either.

    Raises:
      ValueError naming the checkpoint when there is neither.
    """
    from efficientdet_keras.config import Config, get_efficientdet_config
    if model_name:
        return get_efficientdet_config(model_name).override(hparams)
    found = config_beside_checkpoint(ckpt)
    if not found:
        raise ValueError("%s is a checkpoint without config.yaml beside it: give model_name "
                         "(e.g. model_name=\"efficientdet-d0\") and hparams" % ckpt)
    return Config.from_yaml(found).override(hparams)
