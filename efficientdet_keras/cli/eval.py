"""efficientdet-eval: COCO evaluation of a checkpoint, once or continuously.

  # The val split (else test) of a dataset folder in any layout efficientdet-train --data reads:
  efficientdet-eval --model_dir=runs/pets --data=datasets/pets

  # One checkpoint (or the latest in --model_dir), on TFRecords or COCO JSON + images:
  efficientdet-eval --model_dir=runs/d0 --val_file_pattern='data/val-*.tfrecord' \\
      --val_json_file=data/val.json
  efficientdet-eval --ckpt=efficientdet-d0 \\
      --val_json_file=annotations/instances_val2017.json --image_dir=val2017 \\
      --results_json=detections.json

  # An exported .tflite file (efficientdet-export --format=tflite), run with ai-edge-litert:
  efficientdet-eval --tflite=exported/demo.tflite --val_file_pattern='data/val-*.tfrecord'
  # An exported .onnx file (efficientdet-export --format=onnx), run with ONNX Runtime:
  efficientdet-eval --onnx=exported/demo/model.onnx --val_file_pattern='data/val-*.tfrecord'
  # An exported OpenVINO IR (efficientdet-export --format=openvino), run with OpenVINO:
  efficientdet-eval --openvino=exported/demo-openvino/model.xml \
      --val_file_pattern='data/val-*.tfrecord'

  # Continuous: evaluate every new checkpoint of a training run once, keep the best:
  efficientdet-eval --model_dir=runs/d0 --val_file_pattern=... --continuous

  # Ground truth beside the detections for the first 8 images, as PNG files and a
  # TensorBoard image summary in runs/d0/eval_images/<checkpoint name>/:
  efficientdet-eval --model_dir=runs/d0 --val_file_pattern=... --write_images=8

Each evaluation also writes its confusion matrix (true class by detected class, with a
background row and column) as <name>.csv and <name>.png into --confusion_matrix_dir
(default <model_dir>/confusion_matrix), <name> as for the images.

The config comes from <model_dir>/config.yaml when the trainer wrote one, else
from --model_name, else from the released model --ckpt names; --hparams overrides
any of them. EMA weights are used when the
checkpoint has them.
"""

import os
import sys

from absl import flags

from efficientdet_keras.cli.common import (EVAL_TIMEOUT_HELP, HPARAMS_HELP,
                                           load_run_config, print_evaluation, run_app,
                                           run_or_exit, watch_and_report)
from efficientdet_keras.reports.confusion_matrix import (CONFUSION_MATRIX_DIR, IOU_THRESHOLD,
                                                        SCORE_THRESHOLD, confusion_matrix,
                                                        write_confusion_matrix)
from efficientdet_keras.utils.fileio import remove_stale_temporary_files

TOOL = "efficientdet-eval"
FLAGS = flags.FLAGS
flags.DEFINE_string("model_name", "", "Model, when there is no config.yaml (default: the "
                    "model a released --ckpt name stands for, else efficientdet-d0).")
flags.DEFINE_string("model_dir", "", "Training directory: its config.yaml and checkpoints.")
flags.DEFINE_string("ckpt", "", "A checkpoint: a prefix, a directory (its latest), an "
                    "archive directory (its best), e.g. runs/x/ckpt-3, runs/x/best or "
                    "runs/x/last, or a released model's name such as efficientdet-d0 "
                    "(downloaded once); default: latest in model_dir.")
flags.DEFINE_string("hparams", "", HPARAMS_HELP)
flags.DEFINE_string("data", "", "A dataset folder or file in any layout efficientdet-train "
                    "--data reads (COCO JSON, Roboflow, YOLO data.yaml, VOC, TFRecords with a "
                    "label map); evaluates its --data_split, with its ground truth.")
flags.DEFINE_string("data_split", "", "--data: the split to evaluate (default: val, else test).")
flags.DEFINE_string("val_file_pattern", "", "TFRecord pattern(s) of the evaluation images.")
flags.DEFINE_string("val_json_file", "", "COCO ground-truth JSON. With --image_dir and no "
                    "--val_file_pattern it is also the image list. Without it, ground truth comes "
                    "from the records.")
flags.DEFINE_string("image_dir", "", "Image folder of --val_json_file.")
flags.DEFINE_integer("batch_size", 8, "Images per batch.")
flags.DEFINE_integer("eval_samples", 0, "Evaluate at most this many images (0: all).")
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
flags.DEFINE_bool("use_ema", True, "Load EMA weights when the checkpoint has them.")
flags.DEFINE_enum("backend", "auto", ["auto", "pycocotools", "faster_coco_eval"],
                  "COCO scoring code: auto uses faster_coco_eval when it is installed, "
                  "else pycocotools.")
flags.DEFINE_string("results_json", "", "Write the detections as a COCO results JSON here.")
flags.DEFINE_bool("continuous", False, "Watch model_dir and evaluate each new checkpoint once.")
flags.DEFINE_integer("eval_timeout", None, EVAL_TIMEOUT_HELP, lower_bound=0)
flags.DEFINE_integer("archive_keep", 3, "Continuous: how many best checkpoints to archive.")
flags.DEFINE_bool("progress", True, "Show a progress bar.")
flags.DEFINE_string("tflite", "", "Evaluate this .tflite file (with its .tflite.json) instead of "
                    "a checkpoint; the --nms_* flags apply to files with raw outputs only.")
flags.DEFINE_integer("tflite_threads", None, "--tflite: interpreter threads (default: the "
                     "runtime's).")
flags.DEFINE_string("onnx", "", "Evaluate this .onnx file (with its .onnx.json) with ONNX Runtime "
                    "instead of a checkpoint; its NMS was fixed at export, so the --nms_* flags "
                    "do not apply.")
flags.DEFINE_string("openvino", "", "Evaluate this OpenVINO model.xml (with its model.bin and "
                    "model.xml.json) with OpenVINO instead of a checkpoint; its NMS was fixed at "
                    "export, so the --nms_* flags do not apply.")
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

def check_flags():
    """The first problem with the flags, or None. Runs before TensorFlow does any work."""
    if FLAGS.data:
        given = ["--" + n for n in ("val_file_pattern", "val_json_file", "image_dir")
                 if FLAGS[n].value]
        if given:
            return "--data names the whole dataset; drop %s" % ", ".join(given)
    elif not (FLAGS.val_file_pattern or (FLAGS.val_json_file and FLAGS.image_dir)):
        return "give --data, --val_file_pattern, or --val_json_file with --image_dir"
    for name in ("data", "val_json_file", "image_dir", "model_dir"):
        value = FLAGS[name].value
        if value and not os.path.exists(value):
            return "--%s %s does not exist" % (name, value)
    given = ["--" + name for name in EXPORTED_FLAGS if FLAGS[name].value]
    if len(given) > 1:
        return "give one of %s, not %s" % (", ".join("--" + n for n in EXPORTED_FLAGS),
                                           " and ".join(given))
    exported = given[0] if given else ""
    if exported and (FLAGS.continuous or FLAGS.ckpt):
        return "%s evaluates one file: leave out --continuous and --ckpt" % exported
    if exported in ("--onnx", "--openvino") and nms_overrides():
        return ("%s: the file's NMS was fixed at export; leave out --%s"
                % (exported, ", --".join(_NMS_FLAGS[key] for key in nms_overrides())))
    if not (FLAGS.model_dir or FLAGS.ckpt or exported):
        return "give --model_dir, --ckpt, --tflite, --onnx or --openvino"
    if FLAGS.continuous and not FLAGS.model_dir:
        return "--continuous needs --model_dir"
    if FLAGS.batch_size < 1:
        return "--batch_size must be positive"
    if FLAGS.write_images < 0:
        return "--write_images must be >= 0 (0: no images)"
    if FLAGS.write_images and not (FLAGS.images_dir or FLAGS.model_dir):
        return "--write_images needs --images_dir (or --model_dir, for <model_dir>/eval_images)"
    if not 0.0 <= FLAGS.confusion_score_thresh <= 1.0:
        return "--confusion_score_thresh must be in [0, 1]"
    if not 0.0 < FLAGS.confusion_iou_thresh <= 1.0:
        return "--confusion_iou_thresh must be in (0, 1]"
    return None


# The flags that evaluate an exported file instead of a checkpoint.
EXPORTED_FLAGS = ("tflite", "onnx", "openvino")
# nms_configs key -> the flag that overrides it.
_NMS_FLAGS = {"method": "nms_method", "iou_thresh": "nms_iou_thresh",
              "score_thresh": "nms_score_thresh", "max_output_size": "nms_max_output_size",
              "max_nms_inputs": "max_nms_inputs"}


def nms_overrides():
    return {key: FLAGS[flag].value for key, flag in _NMS_FLAGS.items()
            if FLAGS[flag].value is not None}


def apply_evaluation_flags(config):
    """The --nms_* flags, --resize_mode and --tta on top of a config (a run's or a file's)."""
    config.nms_configs.override(nms_overrides())
    for key in ("resize_mode", "tta"):
        if FLAGS[key].value:
            config.override({key: FLAGS[key].value})
    return config


def load_config():
    return apply_evaluation_flags(
        load_run_config(FLAGS.model_dir, FLAGS.model_name, FLAGS.hparams, FLAGS.ckpt))


def build_file_evaluation():
    """The --tflite, --onnx or --openvino evaluation; config: the sidecar's, plus --hparams
    and the --nms_* flags, --resize_mode and --tta."""
    from efficientdet_keras.evaluation import tflite_evaluation
    if FLAGS.onnx or FLAGS.openvino:
        from efficientdet_keras.inference.loading import graph_file_detector
        detector = graph_file_detector(FLAGS.onnx or FLAGS.openvino,
                                       config_overrides=FLAGS.hparams)
        evaluation_class = tflite_evaluation.GraphFileEvaluation
    else:
        from efficientdet_keras.inference.tflite_runner import TFLiteDetector
        detector = TFLiteDetector(FLAGS.tflite, num_threads=FLAGS.tflite_threads,
                                  config_overrides=FLAGS.hparams)
        evaluation_class = tflite_evaluation.TFLiteEvaluation
    apply_evaluation_flags(detector.config)  # check_flags refused --nms_* for graph files.
    source, ground_truth = eval_data(detector.config)
    return evaluation_class(detector, source, ground_truth,
                            batch_size=FLAGS.batch_size, max_images=FLAGS.eval_samples or None,
                            backend=FLAGS.backend, progress=FLAGS.progress,
                            on_detections=evaluation_images(detector.config))


def eval_data(config):
    """The evaluation source and its COCO ground-truth JSON (None: from the records).

    With --data, the split's ground truth (the model's class ids) is written to a temporary
    file, and the data's classes are checked against the model's: one warning line per
    disagreement, an error when the data has ids the model does not predict.
    """
    from efficientdet_keras.data.sources import make_source
    if not FLAGS.data:
        return (make_source(FLAGS.val_file_pattern,
                            None if FLAGS.val_file_pattern else FLAGS.val_json_file,
                            FLAGS.image_dir), FLAGS.val_json_file or None)
    import atexit
    import shutil
    import tempfile

    from absl import logging

    from efficientdet_keras.data.datasets import open_dataset
    from efficientdet_keras.data.formats.classes import classes_into_config
    from efficientdet_keras.utils.fileio import write_json_atomically
    dataset = open_dataset(FLAGS.data)
    split = FLAGS.data_split or dataset.validation_split()
    if split is None:
        raise ValueError("%s has no val or test split; name one with --data_split" % FLAGS.data)
    source = dataset.source(split)
    print(dataset.describe([split]))
    # The model's classes are fixed: the data's are compared with them, never put in.
    for warning in classes_into_config(config.copy(), dataset.classes,
                                       {"num_classes", "label_map"}):
        logging.warning("%s: %s", FLAGS.data, warning)
    ground_truth = dataset.ground_truth(split)
    if ground_truth is None:
        return source, None
    folder = tempfile.mkdtemp(prefix="efficientdet-eval-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return source, write_json_atomically(os.path.join(folder, split + "_ground_truth.json"),
                                         ground_truth, indent=None)


def build_evaluation(config):
    from efficientdet_keras.evaluation.continuous import CheckpointEvaluation

    source, ground_truth = eval_data(config)
    return CheckpointEvaluation(config, source, ground_truth,
                                batch_size=FLAGS.batch_size, max_images=FLAGS.eval_samples or None,
                                backend=FLAGS.backend, use_ema=FLAGS.use_ema,
                                progress=FLAGS.progress, on_detections=evaluation_images(config))


def evaluation_images(config):
    """The --write_images hook of the evaluation (an EvaluationImages), or None."""
    if not FLAGS.write_images:
        return None
    from efficientdet_keras.reports.eval_images import EvaluationImages
    return EvaluationImages(config, FLAGS.write_images, FLAGS.image_score_threshold)


def evaluated_name(evaluated_path: str) -> str:
    """The checkpoint prefix's last part, or the .tflite, .onnx or .xml file's name without
    its suffix: what an evaluation's pictures and confusion matrix are named after."""
    name = os.path.basename(evaluated_path)
    for suffix in (".tflite", ".onnx", ".xml"):
        if name.endswith(suffix):
            name = name[:-len(suffix)]
    return name


def write_evaluation_images(images, evaluated_path: str) -> None:
    """Writes the pictures of one evaluation into <images_dir>/<evaluated_name>/, with a
    TensorBoard summary at the checkpoint's epoch (0 when its name has none)."""
    from efficientdet_keras.evaluation.continuous import checkpoint_epoch
    from efficientdet_keras.reports.eval_images import IMAGES_DIR
    name = evaluated_name(evaluated_path)
    directory = os.path.join(FLAGS.images_dir or os.path.join(FLAGS.model_dir, IMAGES_DIR), name)
    paths = images.write(directory, summary_dir=directory,
                         step=checkpoint_epoch(evaluated_path) or 0)
    images.reset()  # The next checkpoint (--continuous) starts afresh.
    print("%d evaluation image%s written to %s" % (len(paths), "s"[:len(paths) != 1], directory))


def confusion_matrix_dir():
    """--confusion_matrix_dir, else <model_dir>/confusion_matrix; None for no matrix."""
    if FLAGS.confusion_matrix_dir is not None:
        return FLAGS.confusion_matrix_dir or None
    return os.path.join(FLAGS.model_dir, CONFUSION_MATRIX_DIR) if FLAGS.model_dir else None


# A matrix of at most this many classes is also printed.
PRINTED_CLASSES = 12


def write_evaluation_confusion_matrix(evaluator, evaluated_path: str) -> None:
    """Writes one evaluation's confusion matrix as <evaluated_name>.csv and .png into
    confusion_matrix_dir() and prints where; a small one is printed as well."""
    directory = confusion_matrix_dir()
    if directory is None:
        return
    matrix = confusion_matrix(evaluator.groundtruth_dataset(), evaluator.detection_results(),
                              FLAGS.confusion_score_thresh, FLAGS.confusion_iou_thresh)
    name = evaluated_name(evaluated_path)
    paths = [p for p in write_confusion_matrix(matrix, directory, name, name) if p]
    summary = ", ".join("%d %s" % (n, key.replace("_", " "))
                        for key, n in matrix.summary().items())
    print("Confusion matrix (score >= %.2f, IoU >= %.2f; %s) written to %s"
          % (matrix.score_threshold, matrix.iou_threshold, summary, " and ".join(paths)))
    if len(matrix.category_ids) <= PRINTED_CLASSES:
        print(matrix.to_text())


def report_evaluation(evaluation, path, metrics, timing) -> None:
    """Prints one evaluation's metrics and writes its --write_images pictures and its
    confusion matrix."""
    print_evaluation(path, metrics, timing)
    if evaluation.on_detections is not None:
        write_evaluation_images(evaluation.on_detections, path)
    write_evaluation_confusion_matrix(evaluation.evaluator, path)


def evaluate_once(evaluation):
    from efficientdet_keras.utils.fileio import write_json_atomically
    checkpoint = FLAGS.ckpt or FLAGS.model_dir
    path, metrics, timing = evaluation.run(checkpoint)
    report_evaluation(evaluation, path, metrics, timing)
    if FLAGS.results_json:
        # Image ids as --val_json_file spells them, so any COCO tool scores the file.
        write_json_atomically(FLAGS.results_json,
                              evaluation.evaluator.detection_results(original_ids=True))
        print("Detections written to %s" % FLAGS.results_json)


def main(argv):
    del argv
    problem = check_flags()
    if problem:
        sys.exit("%s: %s" % (TOOL, problem))
    if any(FLAGS[name].value for name in EXPORTED_FLAGS):
        evaluation = run_or_exit(TOOL, build_file_evaluation)
    else:
        evaluation = run_or_exit(TOOL, lambda: build_evaluation(load_config()))
    if FLAGS.continuous:  # It writes model_dir/archive: first clear what a killed run left.
        remove_stale_temporary_files(FLAGS.model_dir)
        run_or_exit(TOOL, watch_and_report, evaluation, FLAGS.model_dir, FLAGS.archive_keep,
                    FLAGS.eval_timeout,
                    lambda *result: report_evaluation(evaluation, *result))
    else:
        run_or_exit(TOOL, evaluate_once, evaluation)


def run():
    run_app(main, __name__)


if __name__ == "__main__":
    run()
