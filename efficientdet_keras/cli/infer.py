"""efficientdet-infer: detect objects in image files and draw them.

  efficientdet-infer --saved_model_dir=exported/demo --input=photos/ --output_dir=out/
  efficientdet-infer --ckpt=efficientdet-lite0 --input=photos/ --output_dir=out/
  efficientdet-infer --model_dir=runs/demo --input='photos/*.jpg' --output_dir=out/ \\
      --score_threshold=0.4 --max_boxes=10
  efficientdet-infer --tflite=exported/demo.tflite --input=photos/ --output_dir=out/

Runs efficientdet_keras.Detector on each image. Writes each image with its
boxes, class names and scores drawn, and detections.json: per file, boxes
[ymin, xmin, ymax, xmax] in pixels, scores, class ids and names.
"""

import glob
import os

from absl import flags

from efficientdet_keras.cli.common import (HPARAMS_HELP, load_run_config, run_app,
                                           run_or_exit)
from efficientdet_keras.utils.fileio import write_bytes_atomically, write_json_atomically
from efficientdet_keras.inference.images import load_image

TOOL = "efficientdet-infer"
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif")
FLAGS = flags.FLAGS
flags.DEFINE_string("saved_model_dir", "", "The model to run: a detection SavedModel from "
                    "efficientdet-export (or give --model_dir, --ckpt or --tflite instead).")
flags.DEFINE_string("model_dir", "", "Instead of --saved_model_dir: a training directory "
                    "(its config.yaml, and its latest checkpoint unless --ckpt is given).")
flags.DEFINE_string("ckpt", "", "Instead of --saved_model_dir: a checkpoint, with the "
                    "config of --model_dir, else --model_name and --hparams; or a released "
                    "model's name such as efficientdet-d0 (downloaded once, COCO class names).")
flags.DEFINE_string("tflite", "", "Instead of --saved_model_dir: a .tflite file from "
                    "efficientdet-export --format=tflite (with its .tflite.json), run with "
                    "ai-edge-litert.")
flags.DEFINE_string("model_name", "", "Model, when there is no config.yaml (default: the "
                    "model a released --ckpt name stands for, else efficientdet-d0).")
flags.DEFINE_string("hparams", "", HPARAMS_HELP)
flags.DEFINE_string("input", "", "An image file, a folder of images, or a glob pattern.")
flags.DEFINE_string("output_dir", "", "Where annotated images and detections.json go.")
flags.DEFINE_float("score_threshold", 0.3, "Draw and report detections at least this confident.")
flags.DEFINE_integer("max_boxes", 20, "At most this many detections per image.")
flags.DEFINE_enum("tta", None, ["flip"], "Test-time augmentation (default: the config's tta): "
                  "flip also runs each image's mirror image and fuses the two sets of "
                  "detections by weighted box fusion.")


def list_images(pattern: str):
    if os.path.isdir(pattern):
        paths = [os.path.join(pattern, n) for n in sorted(os.listdir(pattern))]
    else:
        paths = sorted(glob.glob(pattern))
    paths = [p for p in paths if p.lower().endswith(IMAGE_SUFFIXES)]
    if not paths:
        raise FileNotFoundError("no image files match --input %s" % pattern)
    return paths


def load_detector():
    """The Detector the flags name (one of --tflite, --saved_model_dir, --model_dir, --ckpt)."""
    from efficientdet_keras.inference.detector import Detector
    if FLAGS.tflite:
        return Detector(FLAGS.tflite, hparams=FLAGS.hparams, tta=FLAGS.tta)
    if FLAGS.saved_model_dir:
        return Detector(FLAGS.saved_model_dir, tta=FLAGS.tta)
    config = load_run_config(FLAGS.model_dir, FLAGS.model_name, FLAGS.hparams, FLAGS.ckpt)
    return Detector.from_checkpoint(FLAGS.ckpt or FLAGS.model_dir, config, tta=FLAGS.tta)


def infer():
    from efficientdet_keras.utils.drawing import encode_png

    if not (FLAGS.saved_model_dir or FLAGS.model_dir or FLAGS.ckpt or FLAGS.tflite):
        raise ValueError("give --saved_model_dir, --model_dir, --ckpt or --tflite")
    if not FLAGS.output_dir:
        raise ValueError("--output_dir is required")
    if FLAGS.saved_model_dir and not os.path.isdir(FLAGS.saved_model_dir):
        raise FileNotFoundError("--saved_model_dir %s does not exist" % FLAGS.saved_model_dir)
    paths = list_images(FLAGS.input)
    os.makedirs(FLAGS.output_dir, exist_ok=True)
    detector = load_detector()
    report = {}
    for path in paths:
        try:
            image = load_image(path)
        except ValueError:
            print("Skipping %s: not a decodable image" % path)
            continue
        found = detector.detect(image, score_threshold=FLAGS.score_threshold,
                                max_detections=FLAGS.max_boxes)
        name = os.path.splitext(os.path.basename(path))[0] + ".png"
        write_bytes_atomically(os.path.join(FLAGS.output_dir, name),
                               encode_png(detector.draw(image, found)))
        report[os.path.basename(path)] = found.records()
        print("%s: %d detection(s)" % (path, len(found)))
    write_json_atomically(os.path.join(FLAGS.output_dir, "detections.json"), report)
    print("Annotated images and detections.json in %s" % FLAGS.output_dir)


def main(argv):
    del argv
    run_or_exit(TOOL, infer)


def run():
    run_app(main, __name__)


if __name__ == "__main__":
    run()
