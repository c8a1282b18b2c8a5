"""Flags the tools share, defined once: --model, --precision, --num_threads, and the older names
of renamed flags, which keep working with one line naming the new one.

Nothing here imports TensorFlow: `--help` must answer at once.
"""

import sys
from typing import Dict, Sequence

from absl import flags

MODEL_HELP = ("The model: a training directory, a checkpoint, a released model's name such as "
              "efficientdet-d0 (downloaded once), a detection SavedModel, or a .tflite, .onnx "
              "or OpenVINO .xml file (with its sidecar).")
NUM_THREADS_HELP = ("Threads of the .tflite interpreter, ONNX Runtime or OpenVINO (default: the "
                    "runtime's; TensorFlow uses its own).")


def define_model(help_text: str = MODEL_HELP) -> None:
    """--model: anything efficientdet_keras.Detector loads."""
    flags.DEFINE_string("model", "", help_text)


def define_precision(help_text: str) -> None:
    """--precision: the exported file's precision (each format names its choices)."""
    flags.DEFINE_string("precision", "", help_text)


def define_num_threads() -> None:
    """--num_threads: the exported file's runtime threads (0 or unset: the runtime's)."""
    flags.DEFINE_integer("num_threads", None, NUM_THREADS_HELP, lower_bound=0)


def data_help(what: str) -> str:
    """--data's help: every layout `open_dataset` reads (the registry's titles), then `what`
    the tool does with it."""
    from efficientdet_keras.data.layouts.registry import titles
    return ("A dataset folder or file as a labelling tool exported it, its format, splits and "
            "classes found from what its files hold (%s). %s" % (", ".join(titles()), what))


def define_data(what: str) -> None:
    """--data, and what a user can say of it that its files do not: --voc_pixel_origin and
    --data_layout. The one flag group of every tool that reads a dataset."""
    from efficientdet_keras.data.layouts.registry import LAYOUTS
    flags.DEFINE_string("data", "", data_help(what))
    define_voc_origin()
    flags.DEFINE_enum("data_layout", "auto", ["auto"] + [layout.name for layout in LAYOUTS],
                      "--data: the layout to read it as, when a folder holds two (auto: the one "
                      "its files show; the data guide lists the names).")


def data_options(flag_values) -> dict:
    """The --data flag group's voc_origin and data_layout, as open_dataset and the workflows
    take them."""
    layout = flag_values.data_layout
    return {"voc_origin": voc_origin(flag_values.voc_pixel_origin),
            "data_layout": None if layout == "auto" else layout}


def define_voc_origin() -> None:
    """--voc_pixel_origin: the pixel VOC boxes of a --data folder start from."""
    flags.DEFINE_enum("voc_pixel_origin", "auto", ["auto", "0", "1"],
                      "--data in VOC XML: the pixel its boxes start from. auto: 1 as the VOC "
                      "devkit writes them, 0 for datumaro's and CVAT's exports (labelmap.txt "
                      "beside them) and for XMLs beside their images with a coordinate of 0.")


def voc_origin(value: str):
    """--voc_pixel_origin as open_dataset takes it: None (auto), 0 or 1."""
    return None if value in (None, "auto") else int(value)


def define_renamed(renamed: Dict[str, str], kinds: Dict[str, str]) -> None:
    """Defines each old flag name of `renamed` (old -> new) with the new flag's type
    (`kinds`: new name -> "string" or "integer"), its help pointing at the new name."""
    for old, new in renamed.items():
        help_text = "Renamed: --%s (this name still works)." % new
        if kinds[new] == "integer":
            flags.DEFINE_integer(old, None, help_text)
        else:
            flags.DEFINE_string(old, None, help_text)


def take_renamed(flag_values, tool: str, renamed: Dict[str, str]) -> None:
    """For each old flag given on the command line: its value moves to the new flag, and a
    line says the new name. Exits with one line when two names of one flag are given."""
    for new in dict.fromkeys(renamed.values()):
        given = [old for old, target in renamed.items()
                 if target == new and flag_values[old].value is not None]
        if not given:
            continue
        names = ["--" + name for name in given]
        if flag_values[new].present or len(given) > 1:
            names = (["--" + new] if flag_values[new].present else []) + names
            sys.exit("%s: give one of %s" % (tool, ", ".join(names)))
        print("%s: --%s is now --%s (the old name still works)" % (tool, given[0], new),
              file=sys.stderr, flush=True)
        flag_values[new].value = flag_values[given[0]].value


# nms_configs key -> the flag that overrides it.
NMS_FLAGS = {"method": "nms_method", "iou_thresh": "nms_iou_thresh",
             "score_thresh": "nms_score_thresh", "max_output_size": "nms_max_output_size",
             "max_nms_inputs": "max_nms_inputs"}


def define_evaluation_settings() -> None:
    """The NMS, resize and test-time augmentation settings an evaluation may change."""
    flags.DEFINE_enum("nms_method", None, ["hard", "gaussian", "combined", "global"],
                      "The NMS method (default: the config's nms_configs.method).")
    flags.DEFINE_float("nms_iou_thresh", None, "The NMS IoU threshold, for hard and combined "
                       "NMS (default: the config's nms_configs.iou_thresh).")
    flags.DEFINE_float("nms_score_thresh", None, "The lowest score of a kept detection (default: "
                       "the config's nms_configs.score_thresh).")
    flags.DEFINE_integer("nms_max_output_size", None, "Detections kept per image (default: the "
                         "config's nms_configs.max_output_size).")
    flags.DEFINE_integer("max_nms_inputs", None, "Candidates kept before NMS, 0 for all "
                         "(default: the config's nms_configs.max_nms_inputs).")
    flags.DEFINE_enum("resize_mode", None, ["letterbox", "stretch"],
                      "How images are fitted to the input (default: as the model was trained, "
                      "config key resize_mode). stretch resizes each axis on its own, as MediaPipe "
                      "and the TFLite Task Library resize camera frames: what the model scores there.")
    flags.DEFINE_enum("tta", None, ["flip"], "Test-time augmentation (default: the config's tta): "
                      "flip also runs each image's mirror image and fuses the two sets of "
                      "detections by weighted box fusion; twice the network time.")


def evaluation_overrides(flag_values) -> dict:
    """The config overrides the evaluation settings' flags give (only those given)."""
    overrides = {key: flag_values[key].value for key in ("resize_mode", "tta")
                 if flag_values[key].value}
    nms = {key: flag_values[flag].value for key, flag in NMS_FLAGS.items()
           if flag_values[flag].value is not None}
    if nms:
        overrides["nms_configs"] = nms
    return overrides


def define_evaluation_outputs() -> None:
    """The pictures and confusion matrix each evaluation writes."""
    from efficientdet_keras.reports.confusion_matrix import (CONFUSION_MATRIX_DIR,
                                                            IOU_THRESHOLD, SCORE_THRESHOLD)
    flags.DEFINE_integer("write_images", 0, "Draw the first N evaluation images, ground truth beside "
                         "the detections, as <id>.png and a TensorBoard image summary in "
                         "<images_dir>/<checkpoint, .tflite or .onnx name>/ (0: none).")
    flags.DEFINE_string("images_dir", "", "--write_images: the folder for them (default: "
                        "<model_dir>/eval_images; required without --model_dir).")
    flags.DEFINE_float("image_score_threshold", 0.3, "--write_images: the lowest score of a drawn "
                       "detection.")
    flags.DEFINE_string("confusion_matrix_dir", None, "Where each evaluation's confusion matrix "
                        "goes, as <checkpoint, .tflite or .onnx name>.csv and .png (default: "
                        "<model_dir>/%s, none without --model_dir; '' for none)."
                        % CONFUSION_MATRIX_DIR)
    flags.DEFINE_float("confusion_score_thresh", SCORE_THRESHOLD, "The confusion matrix: the "
                       "lowest score of a counted detection.")
    flags.DEFINE_float("confusion_iou_thresh", IOU_THRESHOLD, "The confusion matrix: the lowest "
                       "IoU at which a detection and a ground-truth box match, whatever their "
                       "classes.")


def evaluation_outputs(flag_values, model_dir: str):
    """The EvaluationOutputs the flags of `define_evaluation_outputs` ask for (a run's
    folders by default)."""
    from efficientdet_keras.workflows.evaluation_outputs import (EvaluationOutputs,
                                                                 default_outputs_dirs)
    images_dir, matrix_dir = default_outputs_dirs(model_dir, flag_values.images_dir,
                                                  flag_values.confusion_matrix_dir)
    return EvaluationOutputs(flag_values.write_images, images_dir,
                             flag_values.image_score_threshold, matrix_dir,
                             flag_values.confusion_score_thresh, flag_values.confusion_iou_thresh)


def flag_values(flag_values_object):
    """The flags' values as a plain namespace (name -> value): what a tool's main hands to
    its helpers, which then read no global state."""
    import types
    return types.SimpleNamespace(**flag_values_object.flag_values_dict())


def missing_paths(named_paths: Sequence) -> str:
    """The first "--flag path does not exist" of (flag, path) pairs whose path is given but
    absent, or ""."""
    import os
    for name, path in named_paths:
        if path and not os.path.exists(path):
            return "--%s %s does not exist" % (name, path)
    return ""
