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
SIGTERM (a preemption notice), Ctrl-C or SIGHUP (the terminal or SSH connection closing) lets
the current step, or the epoch's evaluation and checkpoint, finish, backs it up and exits with
status 143: run again to resume with no step lost. After a SIGHUP the output goes to
<model_dir>/output_after_hangup.log. A second Ctrl-C stops at once (status 130). The
config actually used is saved as <model_dir>/config.yaml; a re-run with another
config is an error listing the differing keys, unless --overwrite_config is given.
"""

import gc
import os
import sys

from efficientdet_keras.cli import flag_groups
from efficientdet_keras.cli.common import (print_continuous_end, print_result, run_app,
                                           run_or_exit)
from efficientdet_keras.cli.train_flags import DATA_PART_FLAGS, FLAGS, flag_problem

TOOL = "efficientdet-train"
# The exit status of a Ctrl-C that did not wait for a backup, as shells report SIGINT.
INTERRUPTED_EXIT_STATUS = 130
INTERRUPTED_MESSAGE = "interrupted; run the same command again to resume from the last backup"

def end_at_second_ctrl_c() -> None:
    """A second Ctrl-C during fit: ends the process at once, from whichever thread sees it
    first (the step in progress is not backed up; the last backup is intact)."""
    os.write(2, ("%s: %s\n" % (TOOL, INTERRUPTED_MESSAGE)).encode())  # No stream locks.
    os._exit(INTERRUPTED_EXIT_STATUS)


def train_or_follow(mode: str, model_dir: str, spec, eval_settings: dict, **settings) -> None:
    """Trains (--mode=train, traineval) or evaluates the run's checkpoints as they appear
    (--mode=eval), printing the results."""
    from efficientdet_keras.workflows import evaluate, train
    if mode != "eval":
        print_result(train.train(model_dir, parts=spec, evaluate=mode == "traineval",
                                 on_second_interrupt=end_at_second_ctrl_c, **settings))
        return
    print_continuous_end(evaluate.follow_training_run(
        model_dir, spec, model=settings["model"], hparams=settings["hparams"],
        on_result=print_result, **eval_settings))


def main(argv):
    del argv
    from efficientdet_keras.training.preemption import RESUMABLE_EXIT_STATUS, TrainingStopped
    from efficientdet_keras.workflows.train_data import DataSpec
    model_dir = FLAGS.model_dir or (os.path.join("runs", "demo") if FLAGS.demo else "")
    parts = {name: FLAGS[name].value or None for name in DATA_PART_FLAGS}
    problem = flag_problem(FLAGS.mode, model_dir, FLAGS.demo, FLAGS.data, parts,
                           {"pretrained_ckpt": FLAGS.pretrained_ckpt,
                            "backbone_ckpt": FLAGS.backbone_ckpt})
    if problem or FLAGS.eval_images < 0:
        sys.exit("%s: %s" % (TOOL, problem or "--eval_images must be >= 0 (0: no images)"))
    spec = DataSpec(FLAGS.data or None, FLAGS.demo, FLAGS.demo_images, **parts,
                    **flag_groups.data_options(FLAGS))
    overrides = {"batch_size": FLAGS.batch_size, "num_epochs": FLAGS.num_epochs,
                 "patience": FLAGS.patience, "time_budget": FLAGS.time_budget,
                 "steps_per_execution": FLAGS.steps_per_execution, "jit_compile": FLAGS.use_xla,
                 "hub_module_url": FLAGS.hub_module_url or None,
                 "backbone_ckpt": FLAGS.backbone_ckpt or None,
                 "class_rows_by_name": FLAGS.class_rows_by_name,
                 "deterministic": FLAGS.deterministic,
                 "mlflow_tracking_uri": FLAGS.mlflow_tracking_uri or None,
                 "data_service": FLAGS.data_service or None,
                 "cache": None if FLAGS.cache is None else FLAGS.cache.replace("off", "")}
    if FLAGS.mixed_precision is not None:
        from efficientdet_keras.config import parse_scalar
        overrides["mixed_precision"] = parse_scalar(FLAGS.mixed_precision)
    try:
        run_or_exit(TOOL, train_or_follow, FLAGS.mode, model_dir, spec,
                    dict(batch_size=FLAGS.batch_size, max_images=FLAGS.eval_samples,
                         archive_keep=FLAGS.archive_keep, timeout=FLAGS.eval_timeout),
                    model=FLAGS.model_name, pretrained=FLAGS.pretrained_ckpt or None,
                    hparams=FLAGS.hparams, strategy=FLAGS.strategy,
                    tpu=dict(tpu=FLAGS.tpu, tpu_zone=FLAGS.tpu_zone,
                             gcp_project=FLAGS.gcp_project),
                    seed=FLAGS.tf_random_seed, debug=FLAGS.debug,
                    num_examples_per_epoch=FLAGS.num_examples_per_epoch,
                    eval_samples=FLAGS.eval_samples, eval_images=FLAGS.eval_images,
                    archive_keep=FLAGS.archive_keep, profile=FLAGS.profile,
                    overwrite_config=FLAGS.overwrite_config, config_overrides=overrides)
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


def run():
    run_app(main, __name__)


if __name__ == "__main__":
    run()
