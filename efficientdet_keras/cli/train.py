"""efficientdet-train: train, train with evaluation, or evaluate continuously.

  # The demo: D0 on the built-in synthetic shapes, COCO evaluation, EMA, archive.
  efficientdet-train --demo --model_dir=runs/demo

  # Your data, one folder: COCO JSON, a Roboflow export, a YOLO data.yaml, VOC or TFRecords,
  # its format, splits and classes found from its layout (data/datasets.py):
  efficientdet-train --data=datasets/pets --model_dir=runs/pets --pretrained_ckpt=efficientdet-d0

  # Or each part by its own flag (TFRecords, or COCO JSON with an image folder):
  efficientdet-train --mode=traineval --model_name=efficientdet-d0 --model_dir=runs/d0 \\
      --train_file_pattern='tfrecord/train-*' --val_file_pattern='tfrecord/val-*' \\
      --val_json_file=val.json --num_examples_per_epoch=5717 --batch_size=8 \\
      --hparams=voc.yaml --pretrained_ckpt=efficientdet-d0

--pretrained_ckpt and --backbone_ckpt take a path or a released model's name
(efficientdet-d0 ... d7x, efficientdet-lite0 ... lite4; efficientnet-b0 ... b7,
efficientnet-lite0 ... lite4 for --backbone_ckpt), downloaded once into the cache.

Running the same command again resumes from the last backup (every backup_steps
steps and at each epoch end: weights, optimizer state, EMA, epoch and step).
SIGTERM (a preemption notice) or Ctrl-C lets the current step, or the epoch's evaluation
and checkpoint, finish, backs it up and exits with status 143: run again to resume with
no step lost. A second Ctrl-C stops at once (status 130). The
config actually used is saved as <model_dir>/config.yaml; a re-run with another
config is an error listing the differing keys, unless --overwrite_config is given.
"""

import gc
import os
import sys

from absl import flags

from efficientdet_keras.cli.common import (EVAL_TIMEOUT_HELP, HPARAMS_HELP,
                                           load_run_config, print_evaluation, run_app,
                                           run_or_exit, user_config_keys, watch_and_report)

TOOL = "efficientdet-train"
# The exit status of a Ctrl-C that did not wait for a backup, as shells report SIGINT.
INTERRUPTED_EXIT_STATUS = 130
INTERRUPTED_MESSAGE = "interrupted; run the same command again to resume from the last backup"

FLAGS = flags.FLAGS
flags.DEFINE_enum("mode", "traineval", ["train", "traineval", "eval"],
                  "train; train with COCO evaluation and archiving; or continuous evaluation.")
flags.DEFINE_string("model_name", "efficientdet-d0", "Model from the EfficientDet family: "
                    "efficientdet-d0 ... efficientdet-d7x or efficientdet-lite0 ... lite4.")
flags.DEFINE_string("model_dir", "", "Where checkpoints, logs and config.yaml go.")
flags.DEFINE_string("hparams", "", HPARAMS_HELP)
flags.DEFINE_string("data", "", "A dataset folder or file, its format, splits and classes found "
                    "from its layout: COCO JSON, a Roboflow COCO export (train/ valid/), a YOLO "
                    "data.yaml, a VOC folder, or TFRecords with a label map. Trains on its train "
                    "split, evaluates on val (else test); num_classes and label_map come from "
                    "the data unless --hparams sets them.")
flags.DEFINE_string("train_file_pattern", "", "TFRecord pattern(s) of the training data.")
flags.DEFINE_string("val_file_pattern", "", "TFRecord pattern(s) of the validation data.")
flags.DEFINE_string("val_json_file", "", "COCO JSON ground truth of the validation data "
                    "(also its image list when --val_image_dir is given).")
flags.DEFINE_string("val_image_dir", "", "Image folder of --val_json_file (COCO JSON input).")
flags.DEFINE_string("train_json", "", "COCO JSON of the training data (with --image_dir).")
flags.DEFINE_string("image_dir", "", "Image folder of --train_json.")
flags.DEFINE_integer("batch_size", None, "Global batch size (default: the config's).")
flags.DEFINE_integer("num_epochs", None, "Epochs (default: the config's).")
flags.DEFINE_integer("num_examples_per_epoch", None, "Images per epoch (default: count them; "
                     "--hparams=steps_per_epoch=N sets the steps instead).")
flags.DEFINE_integer("eval_samples", None, "Evaluate on at most this many images "
                     "(default: all).")
flags.DEFINE_integer("eval_images", 4, "At each COCO evaluation, draw this many validation images "
                     "(ground truth beside the detections) into <model_dir>/eval_images (0: none).")
flags.DEFINE_integer("steps_per_execution", None, "Steps per tf.function call (default: config).")
flags.DEFINE_string("pretrained_ckpt", "", "A detector checkpoint to fine-tune (its EMA values): "
                    "a path or a released name such as efficientdet-d0; the class head is "
                    "skipped when the class count differs.")
flags.DEFINE_string("backbone_ckpt", "", "Start a new detector from an ImageNet backbone: a "
                    "path or a released name such as efficientnet-b0 (sets the config's "
                    "backbone_ckpt).")
flags.DEFINE_string("hub_module_url", "", "Fine-tune a TF-Hub feature module (a path, file:// "
                    "or hub URL) with new prediction heads.")
flags.DEFINE_enum("strategy", "", ["", "gpus", "multi-worker", "tpu"],
                  "Distribution: default device, local GPUs, multi-worker or TPU.")
flags.DEFINE_string("tpu", "", "--strategy=tpu: the Cloud TPU's name, its grpc://host:port "
                    "address, or 'local' on a TPU VM (default: $TPU_NAME).")
flags.DEFINE_string("gcp_project", None, "--strategy=tpu: the project of the --tpu name "
                    "(default: this VM's).")
flags.DEFINE_string("tpu_zone", None, "--strategy=tpu: the zone of the --tpu name "
                    "(default: this VM's).")
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


class FlagError(ValueError):
    """A problem with the command line, reported in one line."""


def check_flags() -> None:
    """Stops bad command lines before TensorFlow does any work."""
    if FLAGS.demo and not FLAGS.model_dir:
        FLAGS.model_dir = os.path.join("runs", "demo")
    if not FLAGS.model_dir:
        raise FlagError("--model_dir is required")
    try:
        os.makedirs(FLAGS.model_dir, exist_ok=True)
    except OSError as e:
        raise FlagError("cannot create --model_dir %s: %s" % (FLAGS.model_dir, e.strerror))
    if not os.access(FLAGS.model_dir, os.W_OK):
        raise FlagError("--model_dir %s is not writable" % FLAGS.model_dir)
    if FLAGS.eval_images < 0:
        raise FlagError("--eval_images must be >= 0 (0: no images)")
    check_checkpoint_flags()
    if FLAGS.demo:
        return
    if FLAGS.data:
        check_data_flag()
        return
    needs_train = FLAGS.mode in ("train", "traineval")
    needs_val = FLAGS.mode in ("traineval", "eval")
    if needs_train and not (FLAGS.train_file_pattern or FLAGS.train_json):
        raise FlagError("--mode=%s needs --train_file_pattern or --train_json with --image_dir"
                        % FLAGS.mode)
    if FLAGS.train_json and not FLAGS.image_dir:
        raise FlagError("--train_json needs --image_dir")
    if needs_val and not (FLAGS.val_file_pattern or (FLAGS.val_json_file and FLAGS.val_image_dir)):
        raise FlagError("--mode=%s needs --val_file_pattern, or --val_json_file with "
                        "--val_image_dir" % FLAGS.mode)
    for name in ("train_json", "image_dir", "val_json_file", "val_image_dir"):
        value = FLAGS[name].value
        if value and not os.path.exists(value):
            raise FlagError("--%s %s does not exist" % (name, value))
    import glob
    for name in ("train_file_pattern", "val_file_pattern"):
        for pattern in filter(None, (FLAGS[name].value or "").split(",")):
            if not glob.glob(pattern):
                raise FlagError("--%s %r matches no file" % (name, pattern))


# The flags that name data one part at a time, which --data replaces.
DATA_PART_FLAGS = ("train_file_pattern", "val_file_pattern", "train_json", "image_dir",
                   "val_json_file", "val_image_dir")


def check_data_flag() -> None:
    given = ["--" + name for name in DATA_PART_FLAGS if FLAGS[name].value]
    if given:
        raise FlagError("--data names the whole dataset; drop %s" % ", ".join(given))
    if not os.path.exists(FLAGS.data):
        raise FlagError("--data %s does not exist" % FLAGS.data)


def check_checkpoint_flags() -> None:
    """--pretrained_ckpt and --backbone_ckpt: one of them, each a path or a released name."""
    if FLAGS.pretrained_ckpt and FLAGS.backbone_ckpt:
        raise FlagError("give one of --pretrained_ckpt (a detector to fine-tune) and "
                        "--backbone_ckpt (a backbone to start a new detector from)")
    from efficientdet_keras.checkpoint.released import RELEASED_CHECKPOINTS
    for name in ("pretrained_ckpt", "backbone_ckpt"):
        value = FLAGS[name].value
        if value and value not in RELEASED_CHECKPOINTS and not (
                os.path.exists(value) or os.path.exists(value + ".index")):
            raise FlagError("--%s %s is neither a file or folder nor a released model's name "
                            "(%s)" % (name, value, ", ".join(RELEASED_CHECKPOINTS)))


def build_config(demo_data=None):
    from efficientdet_keras import get_efficientdet_config
    from efficientdet_keras.training.runtime import default_precision
    config = get_efficientdet_config(FLAGS.model_name)
    config.mixed_precision = None  # Unset unless a file or flag sets it; see below.
    if FLAGS.demo:  # The packaged file, whatever the working directory holds.
        from efficientdet_keras.config import PACKAGED_HPARAMS_DIR
        config.override(os.path.join(PACKAGED_HPARAMS_DIR, "demo.yaml"))
    config.override(FLAGS.hparams)
    overrides = {"batch_size": FLAGS.batch_size, "num_epochs": FLAGS.num_epochs,
                 "steps_per_execution": FLAGS.steps_per_execution, "jit_compile": FLAGS.use_xla,
                 "strategy": FLAGS.strategy, "hub_module_url": FLAGS.hub_module_url or None,
                 "backbone_ckpt": FLAGS.backbone_ckpt or None, "deterministic": FLAGS.deterministic,
                 "mlflow_tracking_uri": FLAGS.mlflow_tracking_uri or None}
    if FLAGS.mixed_precision is not None:
        from efficientdet_keras.config import parse_scalar
        overrides["mixed_precision"] = parse_scalar(FLAGS.mixed_precision)
    config.override({k: v for k, v in overrides.items() if v is not None})
    config.mixed_precision = default_precision(FLAGS.strategy, config.mixed_precision)
    if demo_data is not None:
        config.label_map = dict(demo_data.label_map)
    return config


def open_flag_dataset():
    """The dataset --data names, or the COCO JSON flags as one (their classes come from the
    JSON); None for TFRecord flags and the demo."""
    if FLAGS.demo:
        return None
    from efficientdet_keras.data.datasets import coco_dataset, open_dataset
    if FLAGS.data:
        return open_dataset(FLAGS.data)
    if FLAGS.train_json and FLAGS.mode != "eval":
        splits = {"train": (FLAGS.train_json, FLAGS.image_dir)}
        if FLAGS.val_json_file and FLAGS.val_image_dir and not FLAGS.val_file_pattern:
            splits["val"] = (FLAGS.val_json_file, FLAGS.val_image_dir)
        return coco_dataset(FLAGS.train_json, splits)
    return None


def dataset_sources(dataset, files_dir):
    """The train and validation sources of a found dataset and the validation ground truth,
    written as COCO JSON with the model's class ids into files_dir (what evaluation scores)."""
    from efficientdet_keras.utils.fileio import write_json_atomically
    from efficientdet_keras.data.sources import make_source
    train = dataset.source("train") if FLAGS.mode != "eval" else None
    if FLAGS.mode == "train":
        return train, None, None
    if not FLAGS.data and FLAGS.val_file_pattern:  # TFRecord validation beside JSON training.
        return train, make_source(FLAGS.val_file_pattern), FLAGS.val_json_file or None
    val_split = dataset.validation_split()
    if val_split is None:
        raise ValueError("%s has no val or test split to evaluate on; use --mode=train, or add "
                         "one" % dataset.path)
    val = dataset.source(val_split)
    ground_truth = dataset.ground_truth(val_split)
    val_json = None
    if ground_truth is not None:
        val_json = write_json_atomically(
            os.path.join(files_dir, "%s_ground_truth.json" % val_split), ground_truth, indent=None)
    return train, val, val_json


def take_data_classes(config, dataset, files_dir) -> None:
    """num_classes and label_map from the data where the user set neither (a warning line
    for each disagreement), and <model_dir>/classes.json mapping model ids to the data's."""
    from absl import logging

    from efficientdet_keras.data.formats.classes import classes_into_config
    from efficientdet_keras.utils.fileio import write_json_atomically
    for warning in classes_into_config(config, dataset.classes, user_config_keys(FLAGS.hparams)):
        logging.warning("%s: %s", dataset.path, warning)
    write_json_atomically(os.path.join(files_dir, "classes.json"),
                          dataset.classes.as_json(dataset.format))


def make_sources(demo_data):
    from efficientdet_keras.data.sources import make_source
    if demo_data is not None:
        return (make_source(demo_data.train_tfrecord), make_source(demo_data.val_tfrecord),
                demo_data.val_json)
    train = (make_source(FLAGS.train_file_pattern, FLAGS.train_json, FLAGS.image_dir)
             if FLAGS.mode != "eval" else None)
    val = None
    if FLAGS.mode in ("traineval", "eval"):
        val = make_source(FLAGS.val_file_pattern,
                          None if FLAGS.val_file_pattern else FLAGS.val_json_file,
                          FLAGS.val_image_dir)
    return train, val, FLAGS.val_json_file or None


def continuous_eval(config, val_source, val_json):
    """--mode=eval: evaluates each checkpoint of the run in model_dir until its final epoch.

    The run's own config.yaml (written by the trainer) wins over the flags when it
    exists, so the model and the final epoch are the run's.
    """
    from efficientdet_keras.evaluation.continuous import CheckpointEvaluation
    if os.path.exists(os.path.join(FLAGS.model_dir, "config.yaml")):
        config = load_run_config(FLAGS.model_dir, FLAGS.model_name, FLAGS.hparams)
    evaluation = CheckpointEvaluation(config, val_source, val_json,
                                      batch_size=FLAGS.batch_size or config.batch_size,
                                      max_images=FLAGS.eval_samples)
    watch_and_report(evaluation, FLAGS.model_dir, FLAGS.archive_keep, FLAGS.eval_timeout)


def train(config, train_source, val_source, val_json, strategy, seed):
    from efficientdet_keras.training.run import TrainingRun
    run = TrainingRun(
        config, FLAGS.model_dir, train_source,
        val_source=val_source if FLAGS.mode == "traineval" else None, val_json=val_json,
        strategy=strategy, pretrained_ckpt=FLAGS.pretrained_ckpt or None,
        steps_per_epoch=config.get("steps_per_epoch"),  # An --hparams value wins over a count.
        num_examples_per_epoch=FLAGS.num_examples_per_epoch, eval_samples=FLAGS.eval_samples,
        eval_images=FLAGS.eval_images, archive_keep=FLAGS.archive_keep, profile=FLAGS.profile,
        seed=seed, overwrite_config=FLAGS.overwrite_config,
        on_second_interrupt=end_at_second_ctrl_c)
    # A NaN or inf step ends the command with NonFiniteLossError's one line (a ValueError)
    # unless the config's nan_recovery_attempts allow rolling back to the backup.
    run.fit()
    report_results(run.callbacks)


def end_at_second_ctrl_c() -> None:
    """A second Ctrl-C during fit: ends the process at once, from whichever thread sees it
    first (the step in progress is not backed up; the last backup is intact)."""
    os.write(2, ("%s: %s\n" % (TOOL, INTERRUPTED_MESSAGE)).encode())  # No stream locks.
    os._exit(INTERRUPTED_EXIT_STATUS)


def report_results(callbacks) -> None:
    from efficientdet_keras.training.callbacks.checkpoints import CheckpointCallback
    from efficientdet_keras.training.callbacks.coco_evaluation import COCOCallback
    coco = next((c for c in callbacks if isinstance(c, COCOCallback)), None)
    if coco is not None and coco.history:
        epoch = max(coco.history)
        print_evaluation("COCO metrics after epoch %d (EMA weights)" % epoch, coco.history[epoch])
    archive = next(c for c in callbacks if isinstance(c, CheckpointCallback)).archive
    best = archive.best()
    if best:
        print("Best checkpoint: %s (epoch %d, %s %.4f)"
              % (best["path"], best["epoch"], archive.monitor, best[archive.monitor]))


def main(argv):
    del argv
    from efficientdet_keras.training.preemption import RESUMABLE_EXIT_STATUS, TrainingStopped
    try:
        run_or_exit(TOOL, train_or_evaluate)
        return
    except TrainingStopped as stop:  # A signal, the step backed up: "resume me".
        message, status = str(stop), RESUMABLE_EXIT_STATUS
    except KeyboardInterrupt:  # Ctrl-C outside fit, or the second one: no wait for anything.
        print("%s: %s" % (TOOL, INTERRUPTED_MESSAGE), file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(INTERRUPTED_EXIT_STATUS)
    gc.collect()  # Outside the except block, as run_or_exit does (tf.data threads).
    print("%s: %s" % (TOOL, message), file=sys.stderr, flush=True)
    sys.exit(status)


def train_or_evaluate():
    check_flags()
    from efficientdet_keras.training.runtime import get_strategy
    from efficientdet_keras.training.workers import is_chief
    from efficientdet_keras.utils.run_lock import RunLock
    # Before any other TensorFlow op: MultiWorkerMirroredStrategy joins its cluster here.
    strategy = (get_strategy(FLAGS.strategy, tpu=FLAGS.tpu, tpu_zone=FLAGS.tpu_zone,
                             gcp_project=FLAGS.gcp_project) if FLAGS.mode != "eval" else None)
    # The evaluator follows a trainer, and a non-chief worker writes into its own folder:
    # neither takes the lock that keeps one trainer per model_dir.
    if FLAGS.mode == "eval" or not is_chief(strategy):
        return prepare_and_run(strategy)
    with RunLock(FLAGS.model_dir, TOOL):  # Before anything is written.
        return prepare_and_run(strategy)


def prepare_and_run(strategy):
    """The data, the config and the sources, then training or continuous evaluation."""
    from efficientdet_keras.training.runtime import run_seed, run_settings
    from efficientdet_keras.training.workers import write_dir
    from efficientdet_keras.utils.fileio import remove_stale_temporary_files
    # model_dir itself, or a non-chief worker's temporary folder for the same files.
    files_dir = write_dir(FLAGS.model_dir, strategy)
    remove_stale_temporary_files(files_dir)
    demo_data = None
    if FLAGS.demo:
        from efficientdet_keras.data.synthetic import write_synthetic_dataset
        demo_data = write_synthetic_dataset(os.path.join(files_dir, "synthetic"),
                                            num_train=FLAGS.demo_images,
                                            num_val=max(1, FLAGS.demo_images // 10),
                                            image_size=256, show_progress=True)
    config = build_config(demo_data)
    dataset = open_flag_dataset()
    if dataset is None:
        train_source, val_source, val_json = make_sources(demo_data)
    else:
        train_source, val_source, val_json = dataset_sources(dataset, files_dir)
        print(dataset.describe([s for s in ("train", dataset.validation_split())
                                if s in dataset.splits and (s != "train" or train_source)]))
        take_data_classes(config, dataset, files_dir)
    if FLAGS.mode == "traineval" and val_json:  # Before any training (eval mode checks too).
        from efficientdet_keras.evaluation import check_source_ids_match
        check_source_ids_match(val_source, val_json)
    seed = run_seed(FLAGS.tf_random_seed, config.deterministic)
    with run_settings(seed, FLAGS.debug, config.mixed_precision):
        if FLAGS.mode == "eval":
            continuous_eval(config, val_source, val_json)
        else:
            train(config, train_source, val_source, val_json, strategy, seed)


def run():
    run_app(main, __name__)


if __name__ == "__main__":
    run()
