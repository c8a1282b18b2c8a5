"""efficientdet-infer: detect objects in image files and draw them.

  efficientdet-infer --saved_model_dir=exported/demo --input=photos/ --output_dir=out/
  efficientdet-infer --model_dir=runs/demo --input='photos/*.jpg' --output_dir=out/ \\
      --score_threshold=0.4 --max_boxes=10
  efficientdet-infer --tflite=exported/demo.tflite --input=photos/ --output_dir=out/

Writes each image with its boxes, class names and scores drawn, and
detections.json: per file, boxes [ymin, xmin, ymax, xmax] in pixels, scores,
class ids and names.
"""

import glob
import json
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

from absl import flags  # noqa: E402

from efficientdet_keras.cli.common import HPARAMS_HELP, run_app, run_or_exit  # noqa: E402
from efficientdet_keras.fileio import write_atomically, write_json_atomically  # noqa: E402

TOOL = "efficientdet-infer"
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif")
FLAGS = flags.FLAGS
flags.DEFINE_string("saved_model_dir", "", "A detection SavedModel from efficientdet-export.")
flags.DEFINE_string("model_dir", "", "Or a training directory (config.yaml and checkpoints).")
flags.DEFINE_string("ckpt", "", "Or a checkpoint (with --model_name / --hparams).")
flags.DEFINE_string("tflite", "", "Or a .tflite file from efficientdet-export --format=tflite "
                    "(with its .tflite.json), run with ai-edge-litert.")
flags.DEFINE_string("model_name", "efficientdet-d0", "Model, when there is no config.yaml.")
flags.DEFINE_string("hparams", "", HPARAMS_HELP)
flags.DEFINE_string("input", "", "An image file, a folder of images, or a glob pattern.")
flags.DEFINE_string("output_dir", "", "Where annotated images and detections.json go.")
flags.DEFINE_float("score_threshold", 0.3, "Draw and report detections at least this confident.")
flags.DEFINE_integer("max_boxes", 20, "At most this many detections per image.")


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
    """A function from encoded image bytes [B] to detections, and the {id: name} map."""
    import tensorflow as tf

    if FLAGS.tflite:
        return tflite_detect_encoded(FLAGS.tflite)
    if FLAGS.saved_model_dir:
        from efficientdet_keras.export.saved_model import LABEL_MAP_FILE
        loaded = tf.saved_model.load(FLAGS.saved_model_dir)
        names_path = os.path.join(FLAGS.saved_model_dir, LABEL_MAP_FILE)
        names = {}
        if os.path.exists(names_path):
            with open(names_path) as f:
                names = {int(k): v for k, v in json.load(f).items()}
        signature = loaded.signatures["image_bytes"]
        return lambda images: signature(images=images), names
    from efficientdet_keras.cli.common import load_model_and_config
    from efficientdet_keras.export.saved_model import DetectionModule
    model, config = load_model_and_config(FLAGS.model_dir, FLAGS.ckpt, FLAGS.model_name,
                                          FLAGS.hparams)
    names = dict(config.label_map) if isinstance(config.label_map, dict) else {}
    module = DetectionModule(model, config)
    # The closure keeps the module alive: its tf.functions hold it only weakly.
    return lambda images: module.detect_encoded(images), names


def tflite_detect_encoded(path: str):
    """The .tflite as load_detector's detector: encoded bytes [1] -> the SavedModel's outputs
    (boxes normalised to the original image, class ids 1..C), and the sidecar's label map."""
    import tensorflow as tf

    from efficientdet_keras.export.tflite_runner import TFLiteDetector
    detector = TFLiteDetector(path)
    label_map = detector.config.label_map
    names = dict(label_map) if isinstance(label_map, dict) else {}

    def detect(images):
        image = tf.io.decode_image(images[0], channels=3, expand_animations=False)
        found = detector.detect(image.numpy())
        height, width = image.shape[:2]
        boxes = found["boxes"] / [height, width, height, width]
        return {"detection_boxes": tf.constant(boxes[None], tf.float32),
                "detection_scores": tf.constant(found["scores"][None], tf.float32),
                "detection_classes": tf.constant(found["classes"][None], tf.float32),
                "num_detections": tf.constant([len(found["scores"])], tf.float32)}

    return detect, names


def draw(image_bytes: bytes, detections, names, path: str) -> None:
    """Draws boxes with "name score" labels and saves the image (Pillow)."""
    import io

    from PIL import Image, ImageDraw

    image = Image.open(io.BytesIO(image_bytes)).convert("RGB")
    canvas = ImageDraw.Draw(image)
    colours = ["#ff4040", "#40ff40", "#4080ff", "#ffff40", "#ff40ff", "#40ffff", "#ff9933"]
    for d in detections:
        ymin, xmin, ymax, xmax = d["box"]
        colour = colours[(d["class"] - 1) % len(colours)]
        canvas.rectangle([xmin, ymin, xmax, ymax], outline=colour, width=2)
        label = "%s %.2f" % (d["name"], d["score"])
        left, top, right, bottom = canvas.textbbox((xmin, ymin), label)
        canvas.rectangle([left, top, right + 2, bottom], fill=colour)
        canvas.text((xmin + 1, ymin), label, fill="black")
    write_atomically(path, lambda f: image.save(f, format="PNG"), binary=True)


def infer():
    import tensorflow as tf

    if not (FLAGS.saved_model_dir or FLAGS.model_dir or FLAGS.ckpt or FLAGS.tflite):
        raise ValueError("give --saved_model_dir, --model_dir, --ckpt or --tflite")
    if not FLAGS.output_dir:
        raise ValueError("--output_dir is required")
    if FLAGS.saved_model_dir and not os.path.isdir(FLAGS.saved_model_dir):
        raise FileNotFoundError("--saved_model_dir %s does not exist" % FLAGS.saved_model_dir)
    paths = list_images(FLAGS.input)
    os.makedirs(FLAGS.output_dir, exist_ok=True)
    detector, names = load_detector()
    report = {}
    for path in paths:
        with open(path, "rb") as f:
            image_bytes = f.read()
        try:
            out = detector(tf.constant([image_bytes]))
        except tf.errors.InvalidArgumentError:
            print("Skipping %s: not a decodable image" % path)
            continue
        height, width = tf.io.decode_image(image_bytes, channels=3,
                                           expand_animations=False).shape[:2]
        detections = []
        for i in range(int(out["num_detections"][0])):
            score = float(out["detection_scores"][0, i])
            if score < FLAGS.score_threshold or len(detections) >= FLAGS.max_boxes:
                break
            box = out["detection_boxes"][0, i].numpy() * [height, width, height, width]
            class_id = int(out["detection_classes"][0, i])
            detections.append({"box": [round(float(v), 2) for v in box], "score": round(score, 4),
                               "class": class_id, "name": names.get(class_id, str(class_id))})
        name = os.path.splitext(os.path.basename(path))[0] + ".png"
        draw(image_bytes, detections, names, os.path.join(FLAGS.output_dir, name))
        report[os.path.basename(path)] = detections
        print("%s: %d detection(s)" % (path, len(detections)))
    write_json_atomically(os.path.join(FLAGS.output_dir, "detections.json"), report)
    print("Annotated images and detections.json in %s" % FLAGS.output_dir)


def main(argv):
    del argv
    run_or_exit(TOOL, infer)


def run():
    run_app(main, __name__)


if __name__ == "__main__":
    run()
