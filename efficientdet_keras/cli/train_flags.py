"""The flags of efficientdet-train, and the checks of the command line that run before
TensorFlow does any work.
"""

import os

from absl import flags

from efficientdet_keras.cli import flag_groups
from efficientdet_keras.cli.common import EVAL_TIMEOUT_HELP, HPARAMS_HELP

# The flags that name data one part at a time, which --data replaces.
DATA_PART_FLAGS = ("train_file_pattern", "val_file_pattern", "train_json", "image_dir",
                   "val_json_file", "val_image_dir")
FLAGS = flags.FLAGS
flags.DEFINE_enum("mode", "traineval", ["train", "traineval", "eval"],
                  "train; train with COCO evaluation and archiving; or continuous evaluation.")
flags.DEFINE_string("model_name", "efficientdet-d0", "Model from the EfficientDet family: "
                    "efficientdet-d0 ... efficientdet-d7x or efficientdet-lite0 ... lite4.")
flags.DEFINE_string("model_dir", "", "Where checkpoints, logs and config.yaml go.")
flags.DEFINE_string("hparams", "", HPARAMS_HELP)
flag_groups.define_data(
    "Trains on its train split, evaluates on val (else test); num_classes and label_map come "
    "from the data unless --hparams sets them.")
flags.DEFINE_string("train_file_pattern", "", "TFRecord pattern(s) of the training data.")
flags.DEFINE_string("val_file_pattern", "", "TFRecord pattern(s) of the validation data.")
flags.DEFINE_string("val_json_file", "", "COCO JSON ground truth of the validation data "
                    "(also its image list when --val_image_dir is given).")
flags.DEFINE_string("val_image_dir", "", "Image folder of --val_json_file (COCO JSON input).")
flags.DEFINE_string("train_json", "", "COCO JSON of the training data (with --image_dir).")
flags.DEFINE_string("image_dir", "", "Image folder of --train_json.")
flags.DEFINE_integer("batch_size", None, "Global batch size (default: the config's).")
flags.DEFINE_integer("num_epochs", None, "Epochs (default: the config's).")
flags.DEFINE_integer("patience", None, "Stop after this many COCO evaluations without a better "
                     "validation AP, the best checkpoint archived (default: the config's, 0: "
                     "off).")
flags.DEFINE_float("time_budget", None, "Hours the run may use over all its restarts; it stops "
                   "backed up at the step before the budget would pass, its learning-rate "
                   "decay fitted into the steps left (default: the config's, none).")
flags.DEFINE_integer("num_examples_per_epoch", None, "Images per epoch (default: count them; "
                     "--hparams=steps_per_epoch=N sets the steps instead).")
flags.DEFINE_integer("eval_samples", None, "Evaluate on at most this many images "
                     "(default: all).")
flags.DEFINE_integer("eval_images", 4, "At each COCO evaluation, draw this many validation images "
                     "(ground truth beside the detections) into <model_dir>/eval_images (0: none).")
flags.DEFINE_integer("steps_per_execution", None, "Steps per tf.function call (default: config).")
flags.DEFINE_string("pretrained_ckpt", "", "A detector checkpoint to fine-tune (its EMA values): "
                    "a path or a released name such as efficientdet-d0; classes it knows by name "
                    "keep its class rows, the others start new.")
flags.DEFINE_bool("class_rows_by_name", None, "With --pretrained_ckpt: each class of the data "
                  "that the checkpoint knows by name starts from its class rows (default: the "
                  "config's, on); --noclass_rows_by_name keeps the class head by count.")
flags.DEFINE_string("backbone_ckpt", "", "Start a new detector from an ImageNet backbone: a "
                    "path or a released name such as efficientnet-b0 (sets the config's "
                    "backbone_ckpt).")
flags.DEFINE_string("hub_module_url", "", "Fine-tune a TF-Hub feature module (a path, file:// "
                    "or http(s) URL, or a Kaggle Models handle owner/model/framework/variation/"
                    "version) with new prediction heads.")
flags.DEFINE_enum("strategy", "", ["", "gpus", "multi-worker", "tpu"],
                  "Distribution: default device, local GPUs, multi-worker or TPU.")
flags.DEFINE_string("tpu", "", "--strategy=tpu: the Cloud TPU's name, its grpc://host:port "
                    "address, or 'local' on a TPU VM (default: $TPU_NAME).")
flags.DEFINE_string("gcp_project", None, "--strategy=tpu: the project of the --tpu name "
                    "(default: this VM's).")
flags.DEFINE_string("tpu_zone", None, "--strategy=tpu: the zone of the --tpu name "
                    "(default: this VM's).")
flags.DEFINE_string("data_service", "", "Decode, augment and batch the training images on "
                    "tf.data service workers: the dispatcher's grpc://host:port (sets the "
                    "config's data_service; default: the config's, empty: in this process).")
flags.DEFINE_enum("cache", None, ["ram", "disk", "off"], "Keep the decoded training images "
                  "after the first epoch: in memory (ram) or in <model_dir>/cache (disk); "
                  "sets the config's cache (default: the config's, off: none).")
flags.DEFINE_bool("use_xla", None, "Compile steps with XLA (default: config jit_compile).")
flags.DEFINE_string("mixed_precision", None, "false, float16, bfloat16 or true (default: config).")
flags.DEFINE_integer("tf_random_seed", None, "Seed of Python, NumPy and TensorFlow, for "
                     "repeatable runs (default: unseeded).")
flags.DEFINE_bool("deterministic", None, "Repeatable runs: TensorFlow's deterministic ops and "
                  "a fixed seed (--tf_random_seed, else 0), so two runs give the same weights "
                  "(default: the config's deterministic).")
flags.DEFINE_bool("debug", False, "Run eagerly and check tensors for NaN and inf.")
flags.DEFINE_bool("profile", False, "Profile steps 2-4 into TensorBoard.")
flags.DEFINE_bool("demo", False, "Train on the built-in synthetic dataset with the packaged "
                  "hparams/demo.yaml.")
flags.DEFINE_integer("demo_images", 1000, "--demo: synthetic training images (a tenth as many, "
                     "at least one, for validation).", lower_bound=1)
flags.DEFINE_integer("archive_keep", 3, "How many best checkpoints to keep in model_dir/archive.")
flags.DEFINE_bool("overwrite_config", False, "Replace the config.yaml of an earlier run in "
                  "--model_dir even when this run's config differs (normally an error listing "
                  "the differing keys).")
flags.DEFINE_integer("eval_timeout", None, "--mode=eval. " + EVAL_TIMEOUT_HELP, lower_bound=0)
flags.DEFINE_string("mlflow_tracking_uri", None, "Log the run to MLflow at this tracking URI, "
                    "such as http://host:5000 or sqlite:///mlflow.db (sets the config's "
                    "mlflow_tracking_uri; default: the config's, null: no tracking); needs "
                    "the trackers extra.")



def flag_problem(mode: str, model_dir: str, demo: bool, data: str, parts: dict,
                 checkpoints: dict) -> str:
    """The first problem with the command line, or "": before TensorFlow does any work."""
    if not model_dir:
        return "--model_dir is required"
    try:
        os.makedirs(model_dir, exist_ok=True)
    except OSError as e:
        return "cannot create --model_dir %s: %s" % (model_dir, e.strerror)
    if not os.access(model_dir, os.W_OK):
        return "--model_dir %s is not writable" % model_dir
    problem = checkpoint_problem(checkpoints)
    if problem or demo:
        return problem
    if data:
        given = ["--" + name for name in DATA_PART_FLAGS if parts[name]]
        if given:
            return "--data names the whole dataset; drop %s" % ", ".join(given)
        return "" if os.path.exists(data) else "--data %s does not exist" % data
    return parts_problem(mode, parts)


def checkpoint_problem(checkpoints: dict) -> str:
    """--pretrained_ckpt and --backbone_ckpt: one of them, each a path or a released name."""
    from efficientdet_keras.checkpoint.released import RELEASED_CHECKPOINTS
    if all(checkpoints.values()):
        return ("give one of --pretrained_ckpt (a detector to fine-tune) and --backbone_ckpt "
                "(a backbone to start a new detector from)")
    for name, value in checkpoints.items():
        if value and value not in RELEASED_CHECKPOINTS and not (
                os.path.exists(value) or os.path.exists(value + ".index")):
            return ("--%s %s is neither a file or folder nor a released model's name (%s)"
                    % (name, value, ", ".join(RELEASED_CHECKPOINTS)))
    return ""


def parts_problem(mode: str, parts: dict) -> str:
    """The data flags given one part at a time: enough for the mode, and present."""
    import glob
    if mode != "eval" and not (parts["train_file_pattern"] or parts["train_json"]):
        return "--mode=%s needs --train_file_pattern or --train_json with --image_dir" % mode
    if parts["train_json"] and not parts["image_dir"]:
        return "--train_json needs --image_dir"
    if mode != "train" and not (parts["val_file_pattern"] or (
            parts["val_json_file"] and parts["val_image_dir"])):
        return ("--mode=%s needs --val_file_pattern, or --val_json_file with --val_image_dir"
                % mode)
    for name in ("train_json", "image_dir", "val_json_file", "val_image_dir"):
        if parts[name] and not os.path.exists(parts[name]):
            return "--%s %s does not exist" % (name, parts[name])
    for name in ("train_file_pattern", "val_file_pattern"):
        for pattern in filter(None, (parts[name] or "").split(",")):
            if not glob.glob(pattern):
                return "--%s %r matches no file" % (name, pattern)
    return ""


