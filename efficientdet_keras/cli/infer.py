"""efficientdet-infer: detect objects in image files and draw them.

  efficientdet-infer --model=exported/demo --input=photos/ --output_dir=out/
  efficientdet-infer --model=efficientdet-lite0 --input=photos/ --output_dir=out/
  efficientdet-infer --model=exported/demo-onnx/model.onnx --input='photos/*.jpg' \
      --output_dir=out/ --score_threshold=0.4 --max_boxes=10
  efficientdet-infer --model_dir=runs/demo --ckpt=runs/demo/archive/best --input=photos/ \
      --output_dir=out/
  efficientdet-infer --model=exported/demo --input=aerial.jpg --output_dir=out/ \
      --slice=640 --overlap=0.2
  efficientdet-infer --model=exported/demo --input=clip.mp4 --output_dir=out/ --track

--model is anything efficientdet_keras.Detector loads: a training directory, a checkpoint, a
released model's name, a detection SavedModel, or a .tflite, .onnx or OpenVINO .xml file.
--model_dir and --ckpt name a run and one of its checkpoints; --saved_model_dir and --tflite
are older names of --model. Writes each image with its boxes, class names and scores drawn,
and detections.json: per file, boxes [ymin, xmin, ymax, xmax] in pixels, scores, class ids
and names. --slice detects in overlapping tiles of that many pixels (small objects in large
images), merged with a pass over the whole image. A video file, a stream URL or a camera
index (--input=0) gives an annotated video and one JSON line per frame (<name>.mp4 and
<name>.jsonl); --track keeps each object's id across its frames.
"""

import os

from absl import flags

from efficientdet_keras.cli import flag_groups
from efficientdet_keras.cli.common import HPARAMS_HELP, run_app, run_or_exit

TOOL = "efficientdet-infer"
RENAMED = {"saved_model_dir": "model", "tflite": "model"}
FLAGS = flags.FLAGS
flag_groups.define_model()
flag_groups.define_renamed(RENAMED, {"model": "string"})
flag_groups.define_num_threads()
flags.DEFINE_string("model_dir", "", "Instead of --model: a training directory (its "
                    "config.yaml, and its latest checkpoint unless --ckpt is given).")
flags.DEFINE_string("ckpt", "", "Instead of --model: a checkpoint, with the config of "
                    "--model_dir, else --model_name and --hparams.")
flags.DEFINE_string("model_name", "", "Model, when there is no config.yaml (default: the "
                    "model a released name stands for, else efficientdet-d0).")
flags.DEFINE_string("hparams", "", HPARAMS_HELP)
flags.DEFINE_string("input", "", "An image file, a folder of images or a glob pattern; or a "
                    "video file, a stream URL or a camera index (0).")
flags.DEFINE_string("output_dir", "", "Where annotated images and detections.json go.")
flags.DEFINE_float("score_threshold", 0.3, "Draw and report detections at least this confident.")
flags.DEFINE_integer("max_boxes", 20, "At most this many detections per image.")
flags.DEFINE_enum("tta", None, ["flip"], "Test-time augmentation (default: the config's tta): "
                  "flip also runs each image's mirror image and fuses the two sets of "
                  "detections by weighted box fusion.")
flags.DEFINE_bool("track", False, "With a video: ids that follow each object across frames "
                  "(ByteTrack), in the JSON lines and on the video.")
flags.DEFINE_integer("max_frames", None, "With a video: stop after this many frames (a camera "
                     "or stream has no end; default: all).")
flags.DEFINE_integer("slice", None, "Sliced detection for large images: tiles of this many "
                     "pixels a side, each seen at the model's size, merged with a pass over the "
                     "whole image (default: the whole image only).")
flags.DEFINE_float("overlap", 0.2, "With --slice: the fraction of a tile its neighbours share.")
flags.DEFINE_enum("slice_merge", "nmm", ["nmm", "nms", "wbf"], "With --slice: how overlapping "
                  "tiles' boxes of one object become one: nmm (the box enclosing them, by "
                  "intersection over the smaller box), nms (the best one) or wbf (fused).")


def load_detector(model: str, model_dir: str, ckpt: str, model_name: str, hparams: str,
                  num_threads, tta, slicing=None):
    """The Detector of --model, or of --ckpt / --model_dir with the run's config."""
    from efficientdet_keras.checkpoint.released import find_released
    from efficientdet_keras.inference.detector import Detector
    if model:
        if not (os.path.exists(model) or find_released(model)):
            raise FileNotFoundError("--model %s does not exist (nor is it a released model's "
                                    "name)" % model)
        return Detector(model, model_name=model_name or None, hparams=hparams,
                        num_threads=num_threads, tta=tta, slice=slicing)
    if not (model_dir or ckpt):
        raise ValueError("give --model, --model_dir or --ckpt")
    from efficientdet_keras.inference.loading import load_run_config
    config = load_run_config(model_dir, model_name, hparams, ckpt)
    return Detector.from_checkpoint(ckpt or model_dir, config, tta=tta, slice=slicing)


def slicing_flags(tile, overlap: float, merge: str):
    """--slice, --overlap and --slice_merge as SliceSettings (None without --slice)."""
    from efficientdet_keras.detection.slicing import SliceSettings
    return None if tile is None else SliceSettings(tile, overlap, merge=merge)


def detect(output_dir: str, inputs: str, score_threshold: float, max_boxes: int,
           track: bool = False, max_frames=None, **model) -> None:
    from efficientdet_keras.workflows.detect import (DetectResult, check_video_options,
                                                     detect_inputs)
    if not output_dir:
        raise ValueError("--output_dir is required")
    check_video_options(inputs, track, max_frames)  # Before a model is loaded.
    result = detect_inputs(load_detector(**model), inputs, output_dir,
                           score_threshold=score_threshold, max_boxes=max_boxes, track=track,
                           max_frames=max_frames)
    if isinstance(result, DetectResult):
        print("Annotated images and detections.json in %s" % output_dir)


def main(argv):
    del argv
    flag_groups.take_renamed(FLAGS, TOOL, RENAMED)
    run_or_exit(TOOL, detect, FLAGS.output_dir, FLAGS.input, FLAGS.score_threshold,
                FLAGS.max_boxes, track=FLAGS.track, max_frames=FLAGS.max_frames,
                model=FLAGS.model, model_dir=FLAGS.model_dir, ckpt=FLAGS.ckpt,
                model_name=FLAGS.model_name, hparams=FLAGS.hparams,
                num_threads=FLAGS.num_threads, tta=FLAGS.tta,
                slicing=slicing_flags(FLAGS.slice, FLAGS.overlap, FLAGS.slice_merge))


def run():
    run_app(main, __name__)


if __name__ == "__main__":
    run()
