"""efficientdet-eval: COCO evaluation of a checkpoint, once or continuously.

  # The val split (else test) of a dataset folder in any layout efficientdet-train --data reads:
  efficientdet-eval --model_dir=runs/pets --data=datasets/pets

  # One checkpoint (or the latest in --model_dir), on TFRecords or COCO JSON + images:
  efficientdet-eval --model_dir=runs/d0 --val_file_pattern='data/val-*.tfrecord' \\
      --val_json_file=data/val.json
  efficientdet-eval --ckpt=efficientdet-d0 \\
      --val_json_file=annotations/instances_val2017.json --image_dir=val2017 \\
      --results_json=detections.json

  # An exported file (efficientdet-export --format=tflite, onnx or openvino), run with its
  # runtime (ai-edge-litert, ONNX Runtime, OpenVINO):
  efficientdet-eval --model=exported/demo/model.onnx --val_file_pattern='data/val-*.tfrecord'

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
any of them. EMA weights are used when the checkpoint has them. --tflite, --onnx and
--openvino are older names of --model, --tflite_threads of --num_threads.
"""

import sys

from absl import flags

from efficientdet_keras.cli import flag_groups
from efficientdet_keras.cli.common import (EVAL_TIMEOUT_HELP, HPARAMS_HELP,
                                           print_continuous_end, print_result, run_app,
                                           run_or_exit)

TOOL = "efficientdet-eval"
RENAMED = {"tflite": "model", "onnx": "model", "openvino": "model",
           "tflite_threads": "num_threads"}
FLAGS = flags.FLAGS
flags.DEFINE_string("model_name", "", "Model, when there is no config.yaml (default: the "
                    "model a released --ckpt name stands for, else efficientdet-d0).")
flags.DEFINE_string("model_dir", "", "Training directory: its config.yaml and checkpoints.")
flag_groups.define_model()
flag_groups.define_renamed(RENAMED, {"model": "string", "num_threads": "integer"})
flag_groups.define_num_threads()
flags.DEFINE_string("ckpt", "", "A checkpoint: a prefix, a directory (its latest), an "
                    "archive directory (its best), e.g. runs/x/ckpt-3, runs/x/best or "
                    "runs/x/last, or a released model's name such as efficientdet-d0 "
                    "(downloaded once); default: latest in model_dir.")
flags.DEFINE_string("hparams", "", HPARAMS_HELP)
flag_groups.define_data(
    "Evaluates its --data_split, with its ground truth.")
flags.DEFINE_string("data_split", "", "--data: the split to evaluate (default: val, else test).")
flags.DEFINE_string("val_file_pattern", "", "TFRecord pattern(s) of the evaluation images.")
flags.DEFINE_string("val_json_file", "", "COCO ground-truth JSON. With --image_dir and no "
                    "--val_file_pattern it is also the image list. Without it, ground truth comes "
                    "from the records.")
flags.DEFINE_string("image_dir", "", "Image folder of --val_json_file.")
flags.DEFINE_integer("batch_size", 8, "Images per batch.")
flags.DEFINE_integer("eval_samples", 0, "Evaluate at most this many images (0: all).")
flag_groups.define_evaluation_settings()
flags.DEFINE_bool("use_ema", True, "Load EMA weights when the checkpoint has them.")
flags.DEFINE_enum("backend", "auto", ["auto", "pycocotools", "faster_coco_eval"],
                  "COCO scoring code: auto uses faster_coco_eval when it is installed, "
                  "else pycocotools.")
flags.DEFINE_string("results_json", "", "Write the detections as a COCO results JSON here.")
flags.DEFINE_bool("continuous", False, "Watch model_dir and evaluate each new checkpoint once.")
flags.DEFINE_integer("eval_timeout", None, EVAL_TIMEOUT_HELP, lower_bound=0)
flags.DEFINE_integer("archive_keep", 3, "Continuous: how many best checkpoints to archive.")
flags.DEFINE_bool("progress", True, "Show a progress bar.")
flag_groups.define_evaluation_outputs()


def flag_problem(model: str, model_dir: str, ckpt: str, continuous: bool, data: str,
                 val_parts: dict, batch_size: int) -> str:
    """The first problem with the model and data flags, or "". Runs before TensorFlow does
    any work."""
    from efficientdet_keras.workflows.formats import format_of_file
    if data:
        given = ["--" + name for name, value in val_parts.items() if value]
        if given:
            return "--data names the whole dataset; drop %s" % ", ".join(given)
    elif not (val_parts["val_file_pattern"] or (val_parts["val_json_file"]
                                                and val_parts["image_dir"])):
        return "give --data, --val_file_pattern, or --val_json_file with --image_dir"
    missing = flag_groups.missing_paths([("data", data), ("model_dir", model_dir),
                                         ("val_json_file", val_parts["val_json_file"]),
                                         ("image_dir", val_parts["image_dir"])])
    if missing:
        return missing
    if not (model or model_dir or ckpt):
        return "give --model, --model_dir or --ckpt"
    if model and ckpt:
        return "give one of --model and --ckpt"
    if model and format_of_file(model) and (continuous or ckpt):
        return "--model %s evaluates one file: leave out --continuous" % model
    if continuous and not model_dir:
        return "--continuous needs --model_dir"
    if batch_size < 1:
        return "--batch_size must be positive"
    return ""


def evaluate_and_report(model: str, continuous: bool, archive_keep: int, eval_timeout,
                        checkpoint, **settings) -> None:
    """One evaluation of --model (or --ckpt, else the latest checkpoint of --model_dir), or
    each new checkpoint of --model_dir as it appears."""
    from efficientdet_keras.workflows import evaluate
    if not continuous:
        print_result(evaluate.evaluate(model, checkpoint=checkpoint, **settings))
        return
    outputs = settings.pop("outputs")
    evaluation, _ = evaluate.build_evaluation(model, outputs=outputs, **settings)
    print_continuous_end(evaluate.evaluate_continuously(
        evaluation, settings["model_dir"], archive_keep=archive_keep, timeout=eval_timeout,
        outputs=outputs, on_result=print_result))


def main(argv):
    del argv
    flag_groups.take_renamed(FLAGS, TOOL, RENAMED)
    val_parts = {name: FLAGS[name].value for name in ("val_file_pattern", "val_json_file",
                                                      "image_dir")}
    problem = flag_problem(FLAGS.model, FLAGS.model_dir, FLAGS.ckpt, FLAGS.continuous,
                           FLAGS.data, val_parts, FLAGS.batch_size)
    if problem:
        sys.exit("%s: %s" % (TOOL, problem))
    outputs = flag_groups.evaluation_outputs(FLAGS, FLAGS.model_dir)
    outputs.results_json = FLAGS.results_json or None
    run_or_exit(TOOL, evaluate_and_report, FLAGS.model or FLAGS.model_dir or FLAGS.ckpt,
                FLAGS.continuous, FLAGS.archive_keep, FLAGS.eval_timeout,
                FLAGS.ckpt if FLAGS.model_dir and not FLAGS.model else None,
                data=FLAGS.data or None, split=FLAGS.data_split or None,
                outputs=outputs, model_dir=FLAGS.model_dir or None,
                model_name=FLAGS.model_name, hparams=FLAGS.hparams,
                overrides=flag_groups.evaluation_overrides(FLAGS),
                batch_size=FLAGS.batch_size, max_images=FLAGS.eval_samples or None,
                backend=FLAGS.backend, use_ema=FLAGS.use_ema, num_threads=FLAGS.num_threads,
                progress=FLAGS.progress,
                **flag_groups.data_options(FLAGS), **val_parts)


def run():
    run_app(main, __name__)


if __name__ == "__main__":
    run()
