"""efficientdet-check-data: what a dataset holds, as the model will see it, and how the anchors fit.

  efficientdet-check-data --data=datasets/pets --data_split=val
  efficientdet-check-data --file_pattern='tfrecord/train-*' --hparams=voc.yaml
  efficientdet-check-data --json_file=val.json --image_dir=val2017 --model_name=efficientdet-d0
  efficientdet-check-data --voc_root=VOCdevkit/VOC2012 --voc_split=train --hparams=voc.yaml

Reads every record the way training does and prints: images, records training would skip
(each named, with the reason), boxes per image, the records with more objects than
max_instances_per_image (how many, the most objects, the objects dropped), boxes and images
per class, box sizes and aspect ratios in pixels at the model's input size, the share of
boxes that no anchor matches at IoU >= 0.5 with the config's anchors, and anchor_scale /
aspect_ratios from a small grid that leave fewer boxes unmatched (with the --hparams string
to use). --output_png draws the box sizes against the anchor sizes (needs matplotlib, the
`reports` extra); --output_json writes the numbers. --preview_png writes a grid of the first
--preview_images training images as the training pipeline makes them (augmentation from
--hparams, seeded by --seed), with their boxes and class names drawn (data/preview.py),
before the check reads the records.
"""

import glob
import os

from absl import flags

from efficientdet_keras.cli.common import HPARAMS_HELP, run_app, run_or_exit
from efficientdet_keras.cli import flag_groups
from efficientdet_keras.cli.flag_groups import flag_values

TOOL = "efficientdet-check-data"

FLAGS = flags.FLAGS
flag_groups.define_data("Its classes are the check's.")
flags.DEFINE_string("data_split", "train", "--data: the split to check (train, val or test).")
flags.DEFINE_string("file_pattern", "", "TFRecord pattern(s) to check (comma-separated).")
flags.DEFINE_string("json_file", "", "A COCO instances JSON to check (with --image_dir).")
flags.DEFINE_string("image_dir", "", "The image folder of --json_file.")
flags.DEFINE_string("voc_root", "", "A VOC year folder (Annotations/, ImageSets/, JPEGImages/).")
flags.DEFINE_string("voc_split", "train", "--voc_root: the ImageSets/Main split.")
flags.DEFINE_string("model_name", "efficientdet-d0", "Model whose input size and anchors to use.")
flags.DEFINE_string("hparams", "", HPARAMS_HELP)
flags.DEFINE_string("output_png", "box_sizes.png", "Where to write the box size chart "
                    "('' for none).")
flags.DEFINE_string("output_json", "", "Also write the numbers as JSON here.")
flags.DEFINE_integer("max_records", 0, "Check at most this many records (0: all).", lower_bound=0)
flags.DEFINE_string("preview_png", "", "Write a grid of augmented training images with their "
                    "boxes here ('' for none).")
flags.DEFINE_integer("preview_images", 16, "--preview_png: how many training images.")
flags.DEFINE_integer("seed", 0, "--preview_png: the training pipeline's seed (order and "
                     "augmentation draws).")


def check_flags(args) -> None:
    """Raises ValueError or FileNotFoundError naming the flag, before TensorFlow works."""
    given = [name for name in ("data", "file_pattern", "json_file", "voc_root")
             if getattr(args, name)]
    if len(given) != 1:
        raise ValueError("give exactly one of --data, --file_pattern, --json_file (with "
                         "--image_dir) or --voc_root%s"
                         % (" (got --%s)" % ", --".join(given) if given else ""))
    if args.json_file and not args.image_dir:
        raise ValueError("--json_file needs --image_dir")
    for name in ("data", "json_file", "image_dir", "voc_root"):
        value = getattr(args, name)
        if value and not os.path.exists(value):
            raise FileNotFoundError("--%s %s does not exist" % (name, value))
    for pattern in filter(None, args.file_pattern.split(",")):
        if not glob.glob(pattern.strip()):
            raise FileNotFoundError("--file_pattern %r matches no file" % pattern)
    if args.preview_png:
        if args.preview_images < 1:
            raise ValueError("--preview_images must be at least 1, got %d" % args.preview_images)
        folder = os.path.dirname(args.preview_png)
        if folder and not os.path.isdir(folder):
            raise FileNotFoundError("--preview_png %s: folder %s does not exist"
                                    % (args.preview_png, folder))


def check_data(args) -> None:
    check_flags(args)
    from efficientdet_keras.workflows.check_data import check_data as check
    check(data=args.data or None, split=args.data_split, file_pattern=args.file_pattern or None,
          json_file=args.json_file or None, image_dir=args.image_dir or None,
          voc_root=args.voc_root or None, voc_split=args.voc_split, model=args.model_name,
          hparams=args.hparams, output_png=args.output_png or None,
          output_json=args.output_json or None, max_records=args.max_records,
          preview_png=args.preview_png or None, preview_images=args.preview_images,
          seed=args.seed, **flag_groups.data_options(args))


def main(argv):
    del argv
    run_or_exit(TOOL, check_data, flag_values(FLAGS))


def run():
    run_app(main, __name__)


if __name__ == "__main__":
    run()
