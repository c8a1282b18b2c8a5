"""efficientdet-create-tfrecord: COCO JSON or Pascal VOC into sharded TFRecord files.

Examples are in the Object Detection API layout (`data.formats.tf_example.record_to_tf_example`):
image bytes stored as they are on disk (no re-encoding), boxes normalised to 0..1; VOC
examples also hold each object's difficult, truncated and view (the XML's pose).
Shards are named <output_prefix>-00000-of-00004.tfrecord and filled round-robin.

  # Every split of a dataset folder (COCO JSON, Roboflow, YOLO, VOC; see --data), as
  # out/pets-train-*.tfrecord, out/pets-val-*.tfrecord, their ground truth out/pets-val.json,
  # and out/label_map.json: a folder efficientdet-train --data=out reads back.
  efficientdet-create-tfrecord --data=datasets/pets --output_prefix=out/pets

  efficientdet-create-tfrecord --input_format=voc --voc_root=VOCdevkit/VOC2012 \\
      --voc_split=val --output_prefix=tfrecord/voc-val --num_shards=4 \\
      --output_json=tfrecord/voc-val.json

--output_json writes the COCO ground truth of the images actually written
(skipped images are left out), from `records_to_coco`. Evaluation needs it for VOC;
for COCO it is an optional copy of the input (annotation ids renumbered; iscrowd, areas
and segmentations kept). Annotations without a segmentation get "segmentation": [], and
VOC ones "ignore": 1 for difficult objects (which are also iscrowd), else 0.

Every record gets the training pipeline's checks (`data.decode`): records it would
skip (missing, unreadable or corrupt images, mismatched box and label lists) are
skipped with the same "Data: ..." warning naming the record, and boxes it would drop
or clip (NaN, inverted, empty, a class id outside the label map) are dropped or clipped
before writing; the counts end the output as a data report. Each shard is
written under a hidden temporary name and renamed only when all shards are
complete, so an interrupted run leaves nothing that looks like finished output.
Paths are local files (the final rename is os.replace).
"""

import os
import sys
from typing import Optional

from absl import flags

from efficientdet_keras.cli.common import run_app, run_or_exit
from efficientdet_keras.cli import flag_groups
from efficientdet_keras.cli.flag_groups import flag_values

TOOL = "efficientdet-create-tfrecord"

FLAGS = flags.FLAGS
flag_groups.define_data(
    "Writes every split as <output_prefix>-<split>-*.tfrecord with <output_prefix>-<split>.json, "
    "and label_map.json beside them.")
flags.DEFINE_enum("input_format", None, ["coco", "voc"], "The annotation format to read "
                  "(without --data).")
flags.DEFINE_string("coco_json", "", "COCO: the instances JSON file.")
flags.DEFINE_string("image_dir", "", "COCO: the folder holding the images named in the JSON.")
flags.DEFINE_string("voc_root", "", "VOC: a year folder holding Annotations/, ImageSets/ and "
                    "JPEGImages/, e.g. VOCdevkit/VOC2012.")
flags.DEFINE_string("voc_split", "train",
                    "VOC: the ImageSets/Main split (train, val, trainval...).")
flags.DEFINE_string("label_map", "", "Optional YAML or JSON file of {id: name} (or a config file "
                    "with a label_map key). Default: the VOC classes, or the COCO JSON categories.")
flags.DEFINE_string("output_prefix", "", "Output path prefix, e.g. out/train writes "
                    "out/train-00000-of-00004.tfrecord ...")
flags.DEFINE_integer("num_shards", 1, "Number of output files.", lower_bound=1)
flags.DEFINE_string("output_json", "", "Optional COCO ground-truth JSON of the written images.")


def check_flags(args) -> Optional[str]:
    """The first problem with the flags as an error message, or None. Touches no TensorFlow."""
    if args.data:
        if args.input_format or args.coco_json or args.voc_root:
            return "--data names the whole dataset; drop --input_format, --coco_json, --voc_root"
        if not os.path.exists(args.data):
            return "--data %s does not exist" % args.data
    elif args.input_format is None:
        return "--input_format is required (coco or voc), or --data"
    elif args.input_format == "voc":
        if not args.voc_root:
            return "--voc_root is required with --input_format=voc"
        if not os.path.isdir(args.voc_root):
            return "--voc_root %s is not a directory" % args.voc_root
    else:
        for name in ("coco_json", "image_dir"):
            if not getattr(args, name):
                return "--%s is required with --input_format=coco" % name
        if not os.path.isfile(args.coco_json):
            return "--coco_json %s is not a file" % args.coco_json
        if not os.path.isdir(args.image_dir):
            return "--image_dir %s is not a directory" % args.image_dir
    if args.label_map and not os.path.isfile(args.label_map):
        return "--label_map %s is not a file" % args.label_map
    if not args.output_prefix:
        return "--output_prefix is required, e.g. --output_prefix=out/train"
    if args.output_prefix.endswith(os.sep):
        return "--output_prefix %s names a directory; add a file name prefix" % args.output_prefix
    for path in (args.output_prefix, args.output_json):
        if not path:
            continue
        directory = os.path.dirname(os.path.abspath(path))
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as e:
            return "cannot create output directory %s: %s" % (directory, e.strerror or e)
        if not os.access(directory, os.W_OK | os.X_OK):
            return "output directory %s is not writable" % directory
    return None


def main(argv):
    del argv
    args = flag_values(FLAGS)
    problem = check_flags(args)
    if problem:
        sys.exit("%s: %s" % (TOOL, problem))
    from efficientdet_keras.workflows.convert import convert
    run_or_exit(TOOL, convert, args.output_prefix, data=args.data or None,
                coco_json=args.coco_json or None, image_dir=args.image_dir or None,
                voc_root=args.voc_root if args.input_format == "voc" else None,
                voc_split=args.voc_split,
                label_map=args.label_map or None, num_shards=args.num_shards,
                output_json=args.output_json or None, **flag_groups.data_options(args))


def run():
    run_app(main, __name__)


if __name__ == "__main__":
    run()
