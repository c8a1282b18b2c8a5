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
from efficientdet_keras.workflows.train import user_config_keys

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


def make_source_and_label_map(args, config):
    """The data source of the flags and the class names to show ({id: name} or None)."""
    from efficientdet_keras.data.sources import RecordsSource, make_source
    from efficientdet_keras.config.label_maps import label_names
    label_map = label_names(config.label_map)
    if args.data:
        from efficientdet_keras.data.formats.classes import classes_into_config
        from efficientdet_keras.data.datasets import open_dataset
        options = flag_groups.data_options(args)
        dataset = open_dataset(args.data, options["voc_origin"], options["data_layout"])
        source = dataset.source(args.data_split)
        print(dataset.describe([args.data_split]))
        for warning in classes_into_config(config, dataset.classes,
                                           user_config_keys(args.hparams)):
            print("Warning: %s" % warning)
        return source, label_names(config.label_map)
    if args.voc_root:
        from efficientdet_keras.data.formats.voc import VOC_LABEL_MAP, load_voc_records
        label_map = label_map or VOC_LABEL_MAP
        return RecordsSource(load_voc_records(args.voc_root, args.voc_split, label_map)), \
            label_map
    if args.json_file:
        from efficientdet_keras.data.formats.coco_json import coco_categories
        label_map = label_map or coco_categories(args.json_file)
    return make_source(args.file_pattern, args.json_file, args.image_dir), label_map


def check_data(args) -> None:
    check_flags(args)
    from efficientdet_keras import get_efficientdet_config
    from efficientdet_keras.data.check import (format_report, plot_box_sizes, scan_dataset,
                                               summarize)
    from efficientdet_keras.utils.fileio import write_json_atomically
    config = get_efficientdet_config(args.model_name).override(args.hparams)
    source, label_map = make_source_and_label_map(args, config)
    if args.preview_png:
        from efficientdet_keras.data.preview import write_preview
        write_preview(args.preview_png, config, source, args.preview_images, args.seed,
                      label_map)
        print("Augmented training images: %s" % args.preview_png)
    scan = scan_dataset(source, config, max_records=args.max_records)
    summary = summarize(scan, config, label_map)
    print(format_report(summary))
    if args.output_png and plot_box_sizes(scan, config, args.output_png):
        print("Box size chart: %s" % args.output_png)
    if args.output_json:
        write_json_atomically(args.output_json, summary)
        print("Numbers: %s" % args.output_json)


def main(argv):
    del argv
    run_or_exit(TOOL, check_data, flag_values(FLAGS))


def run():
    run_app(main, __name__)


if __name__ == "__main__":
    run()
