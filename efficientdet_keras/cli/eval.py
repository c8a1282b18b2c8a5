"""efficientdet-eval: COCO evaluation of a checkpoint, once or continuously.

  # One checkpoint (or the latest in --model_dir), on TFRecords or COCO JSON + images:
  efficientdet-eval --model_dir=runs/d0 --val_file_pattern='data/val-*.tfrecord' \\
      --val_json_file=data/val.json
  efficientdet-eval --model_name=efficientdet-d0 --ckpt=efficientdet-d0/ \\
      --val_json_file=annotations/instances_val2017.json --image_dir=val2017 \\
      --results_json=detections.json

  # Continuous: evaluate every new checkpoint of a training run once, keep the best:
  efficientdet-eval --model_dir=runs/d0 --val_file_pattern=... --continuous

The config comes from <model_dir>/config.yaml when the trainer wrote one, else
from --model_name; --hparams overrides either. EMA weights are used when the
checkpoint has them.
"""

import json
import os
import re
import sys
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

from absl import app, flags, logging  # noqa: E402

TOOL = "efficientdet-eval"
FLAGS = flags.FLAGS
flags.DEFINE_string("model_name", "efficientdet-d0", "Model, when model_dir has no config.yaml.")
flags.DEFINE_string("model_dir", "", "Training directory: its config.yaml and checkpoints.")
flags.DEFINE_string("ckpt", "", "A checkpoint (prefix or directory); default: latest in model_dir.")
flags.DEFINE_string("hparams", "", "Config overrides: 'k=v,k2=v2' or a YAML file path.")
flags.DEFINE_string("val_file_pattern", "", "TFRecord pattern(s) of the evaluation images.")
flags.DEFINE_string("val_json_file", "", "COCO ground-truth JSON. With --image_dir and no "
                    "--val_file_pattern it is also the image list. Without it, ground truth comes "
                    "from the records.")
flags.DEFINE_string("image_dir", "", "Image folder of --val_json_file.")
flags.DEFINE_integer("batch_size", 8, "Images per batch.")
flags.DEFINE_integer("eval_samples", 0, "Evaluate at most this many images (0: all).")
flags.DEFINE_enum("nms_method", None, ["hard", "gaussian", "combined"], "Override the NMS method.")
flags.DEFINE_float("nms_iou_thresh", None, "Override the NMS IoU threshold (hard, combined).")
flags.DEFINE_float("nms_score_thresh", None, "Override the minimum detection score.")
flags.DEFINE_integer("nms_max_output_size", None, "Override the detections kept per image.")
flags.DEFINE_integer("max_nms_inputs", None, "Override the candidates kept before NMS (0: all).")
flags.DEFINE_bool("use_ema", True, "Load EMA weights when the checkpoint has them.")
flags.DEFINE_enum("backend", "auto", ["auto", "pycocotools", "faster_coco_eval"],
                  "COCO scoring backend.")
flags.DEFINE_string("results_json", "", "Write the detections as a COCO results JSON here.")
flags.DEFINE_bool("continuous", False, "Watch model_dir and evaluate each new checkpoint once.")
flags.DEFINE_integer("eval_timeout", 0, "Continuous: stop after this many seconds without a new "
                     "checkpoint (0: wait until the final epoch's checkpoint).")
flags.DEFINE_integer("archive_keep", 3, "Continuous: how many best checkpoints to archive.")
flags.DEFINE_bool("progress", True, "Show a progress bar.")

_CKPT_NAME = re.compile(r"^ckpt-(\d+)$")


def check_flags():
    """The first problem with the flags, or None. Runs before TensorFlow does any work."""
    if not (FLAGS.val_file_pattern or (FLAGS.val_json_file and FLAGS.image_dir)):
        return "give --val_file_pattern, or --val_json_file with --image_dir"
    for name in ("val_json_file", "image_dir", "model_dir"):
        value = FLAGS[name].value
        if value and not os.path.exists(value):
            return "--%s %s does not exist" % (name, value)
    if not (FLAGS.model_dir or FLAGS.ckpt):
        return "give --model_dir or --ckpt"
    if FLAGS.continuous and not FLAGS.model_dir:
        return "--continuous needs --model_dir"
    if FLAGS.batch_size < 1:
        return "--batch_size must be positive"
    return None


def nms_overrides():
    names = {"method": "nms_method", "iou_thresh": "nms_iou_thresh",
             "score_thresh": "nms_score_thresh", "max_output_size": "nms_max_output_size",
             "max_nms_inputs": "max_nms_inputs"}
    return {key: FLAGS[flag].value for key, flag in names.items() if FLAGS[flag].value is not None}


def load_config():
    from efficientdet_keras import Config, get_efficientdet_config
    config_path = os.path.join(FLAGS.model_dir, "config.yaml") if FLAGS.model_dir else ""
    config = (Config.from_yaml(config_path) if config_path and os.path.exists(config_path)
              else get_efficientdet_config(FLAGS.model_name))
    config.override(FLAGS.hparams)
    config.nms_configs.override(nms_overrides())
    return config


class Evaluation:
    """The model, data and evaluator, built once and reused for every checkpoint."""

    def __init__(self, config):
        from efficientdet_keras import EfficientDetNet
        from efficientdet_keras.data.pipeline import InputPipeline, make_source
        from efficientdet_keras.evaluation import COCOEvaluator
        from efficientdet_keras.evaluation.runner import make_detect_fns

        self.config = config
        source = make_source(FLAGS.val_file_pattern,
                             None if FLAGS.val_file_pattern else FLAGS.val_json_file,
                             FLAGS.image_dir)
        self.pipeline = InputPipeline(config, source, is_training=False,
                                      batch_size=FLAGS.batch_size)
        label_map = config.label_map if isinstance(config.label_map, dict) else None
        self.evaluator = COCOEvaluator(FLAGS.val_json_file or None, label_map=label_map,
                                       backend=FLAGS.backend)
        self.model = EfficientDetNet(config=config)
        self.detect_fns = make_detect_fns(self.model, config)

    def run(self, checkpoint: str):
        from efficientdet_keras import restore_ckpt
        from efficientdet_keras.evaluation.runner import evaluate_dataset

        report = restore_ckpt(self.model, checkpoint, use_ema=FLAGS.use_ema, skip_mismatch=False)
        logging.info("Evaluating %s (%s weights)", report.path,
                     "EMA" if report.loaded_from_ema else "plain")
        metrics, timing = evaluate_dataset(
            self.model, self.pipeline(), self.config, self.evaluator,
            max_images=FLAGS.eval_samples or None, progress=FLAGS.progress,
            detect_fns=self.detect_fns)
        health = self.pipeline.health.summary()
        if any(health.values()):
            logging.warning("Data problems: %s", health)
        return report.path, metrics, timing


def checkpoint_epoch(prefix: str):
    match = _CKPT_NAME.match(os.path.basename(prefix))
    return int(match.group(1)) if match else None


def list_checkpoints(model_dir: str):
    """Checkpoint prefixes named ckpt-<epoch> in model_dir, oldest first."""
    found = []
    for name in os.listdir(model_dir):
        if name.endswith(".index") and checkpoint_epoch(name[:-len(".index")]) is not None:
            found.append(os.path.join(model_dir, name[:-len(".index")]))
    return sorted(found, key=checkpoint_epoch)


def print_metrics(path, metrics, timing):
    from efficientdet_keras.evaluation.runner import format_metrics
    print("\n%s: %d images (network %.1fs, post-processing %.1fs, scoring %.1fs)"
          % (path, timing.images, timing.network, timing.postprocess, timing.scoring))
    print(format_metrics(metrics))


def write_json_atomically(path, data):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)


def evaluate_once(evaluation):
    checkpoint = FLAGS.ckpt or FLAGS.model_dir
    path, metrics, timing = evaluation.run(checkpoint)
    print_metrics(path, metrics, timing)
    if FLAGS.results_json:
        write_json_atomically(FLAGS.results_json, evaluation.evaluator.detection_results())
        print("Detections written to %s" % FLAGS.results_json)


def evaluate_continuously(evaluation):
    """Evaluates each new ckpt-<epoch> once, until the final epoch's checkpoint."""
    import tensorflow as tf

    from efficientdet_keras.archive import CheckpointArchive

    eval_dir = os.path.join(FLAGS.model_dir, "eval")
    os.makedirs(eval_dir, exist_ok=True)
    results_path = os.path.join(eval_dir, "metrics.json")
    results = {}
    if os.path.exists(results_path):  # A restarted evaluator skips what it already did.
        with open(results_path) as f:
            results = json.load(f)
    archive = CheckpointArchive(os.path.join(FLAGS.model_dir, "archive"), keep=FLAGS.archive_keep,
                                monitor="AP")
    writer = tf.summary.create_file_writer(eval_dir)
    final_epoch = int(evaluation.config.num_epochs)
    last_new = time.time()
    while True:
        pending = [p for p in list_checkpoints(FLAGS.model_dir) if os.path.basename(p) not in results]
        for prefix in pending:
            epoch = checkpoint_epoch(prefix)
            _, metrics, timing = evaluation.run(prefix)
            print_metrics(prefix, metrics, timing)
            with writer.as_default(step=epoch):
                for name, value in metrics.items():
                    tf.summary.scalar("coco/" + name, value)
            writer.flush()
            archive.consider(prefix, epoch, metrics)
            results[os.path.basename(prefix)] = dict(metrics, epoch=epoch)
            write_json_atomically(results_path, results)
            last_new = time.time()
        done = [checkpoint_epoch(name) for name in results]
        if done and max(done) >= final_epoch:
            best = archive.best()
            print("Final epoch %d evaluated; best %s with AP %.4f" % (final_epoch, best["path"], best["AP"]))
            return
        if FLAGS.eval_timeout and time.time() - last_new > FLAGS.eval_timeout:
            print("No new checkpoint for %d s; stopping." % FLAGS.eval_timeout)
            return
        time.sleep(5)


def main(argv):
    del argv
    problem = check_flags()
    if problem:
        sys.exit("%s: %s" % (TOOL, problem))
    try:
        config = load_config()
        evaluation = Evaluation(config)
        if FLAGS.continuous:
            evaluate_continuously(evaluation)
        else:
            evaluate_once(evaluation)
    except (ValueError, FileNotFoundError, KeyError) as e:
        sys.exit("%s: %s" % (TOOL, e))


def run():
    app.run(main)


if __name__ == "__main__":
    run()
