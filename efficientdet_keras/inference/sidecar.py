"""The sidecar json beside an exported .tflite or .onnx file: `<file>.json`.

What a runner needs besides the file itself: the model's name, input size, classes and label
map, anchors and the normalisation (`model_info`), plus what each format adds (output kind,
quantization, opset, NMS). The exporters write it; the runners read it with `read_sidecar`
and build a Config from it with `config_from_sidecar`.
"""

import json
import os

from efficientdet_keras.config.label_maps import label_names

# Sidecar keys that describe the network's anchors and classes (config keys of the same name).
ANCHOR_KEYS = ("image_size", "num_classes", "min_level", "max_level", "num_scales",
               "aspect_ratios", "anchor_scale")


def sidecar_path(model_path: str) -> str:
    """Where the settings of an exported file are written: `<path>.json`."""
    return model_path + ".json"


def model_info(config) -> dict:
    """The sidecar keys every exported file has, from the config it was exported with."""
    label_map = label_names(config.label_map)
    return {
        "model_name": config.name,
        "image_size": [int(s) for s in config.image_size],
        "num_classes": int(config.num_classes),
        "label_map": None if label_map is None else {str(k): v for k, v in label_map.items()},
        "min_level": int(config.min_level),
        "max_level": int(config.max_level),
        "num_scales": int(config.num_scales),
        "aspect_ratios": [float(r) for r in config.aspect_ratios],
        "anchor_scale": float(config.anchor_scale),
        # The letterboxing of a .tflite's input pads with mean_rgb, which the file's own
        # normalisation turns into 0, the padding of the Keras and SavedModel inputs.
        "mean_rgb": [float(v) for v in config.mean_rgb],
        "stddev_rgb": [float(v) for v in config.stddev_rgb],
        # How a runner fits an image to the input: as the model was trained.
        "resize_mode": config.resize_mode,
    }


def read_sidecar(model_path: str, file_format: str, required=()) -> dict:
    """The sidecar dict of an exported file, checked for ANCHOR_KEYS and `required`.

    file_format: "tflite" or "onnx", for the messages (the --format that writes the file).

    Raises:
      FileNotFoundError / ValueError (one line naming the path): the sidecar is missing,
        is not JSON or lacks a key.
    """
    path = sidecar_path(model_path)
    export = "efficientdet-export --format=%s" % file_format
    if not os.path.isfile(path):
        raise FileNotFoundError("%s: sidecar %s is missing; the .%s must come from %s"
                                % (model_path, path, file_format, export))
    try:
        with open(path) as f:
            info = json.load(f)
    except ValueError as e:
        raise ValueError("%s: not valid JSON (%s); re-export with %s" % (path, e, export)) from None
    missing = [k for k in ANCHOR_KEYS + tuple(required) if k not in info]
    if missing:
        raise ValueError("%s lacks %s; re-export with %s" % (path, ", ".join(missing), export))
    return info


def config_from_sidecar(info: dict, overrides=None):
    """A Config with the sidecar's anchors, classes and label map (other keys: defaults).

    `overrides` (a dict or "k=v" string, as --hparams) can set e.g. nms_configs or mean_rgb.
    """
    from efficientdet_keras.config import default_config
    values = {key: info[key] for key in ANCHOR_KEYS}
    if info.get("model_name"):
        values["name"] = info["model_name"]
    if info.get("label_map"):
        values["label_map"] = {int(k): v for k, v in info["label_map"].items()}
    for key in ("mean_rgb", "stddev_rgb"):  # What the file normalises with (padding value).
        if info.get(key):
            values[key] = list(info[key])
    if info.get("resize_mode"):  # Files written before the key letterbox.
        values["resize_mode"] = info["resize_mode"]
    if info.get("nms_configs"):  # NMS inside the file (ONNX): what its detections went through.
        values["nms_configs"] = dict(info["nms_configs"])
    return default_config().override(values).override(overrides)
