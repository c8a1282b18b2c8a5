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

from efficientdet_keras.cli.common import HPARAMS_HELP, run_app, run_or_exit, user_config_keys

TOOL = "efficientdet-check-data"

FLAGS = flags.FLAGS
flags.DEFINE_string("data", "", "A dataset folder or file (COCO JSON, Roboflow, YOLO data.yaml, "
                    "VOC, TFRecords with a label map), its layout found as efficientdet-train "
                    "--data finds it; its classes are the check's.")
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


def check_flags() -> None:
    """Raises ValueError or FileNotFoundError naming the flag, before TensorFlow works."""
    given = [name for name in ("data", "file_pattern", "json_file", "voc_root")
             if FLAGS[name].value]
    if len(given) != 1:
        raise ValueError("give exactly one of --data, --file_pattern, --json_file (with "
                         "--image_dir) or --voc_root%s"
                         % (" (got --%s)" % ", --".join(given) if given else ""))
    if FLAGS.json_file and not FLAGS.image_dir:
        raise ValueError("--json_file needs --image_dir")
    for name in ("data", "json_file", "image_dir", "voc_root"):
        value = FLAGS[name].value
        if value and not os.path.exists(value):
            raise FileNotFoundError("--%s %s does not exist" % (name, value))
    for pattern in filter(None, FLAGS.file_pattern.split(",")):
        if not glob.glob(pattern.strip()):
            raise FileNotFoundError("--file_pattern %r matches no file" % pattern)
    if FLAGS.preview_png:
        if FLAGS.preview_images < 1:
            raise ValueError("--preview_images must be at least 1, got %d" % FLAGS.preview_images)
        folder = os.path.dirname(FLAGS.preview_png)
        if folder and not os.path.isdir(folder):
            raise FileNotFoundError("--preview_png %s: folder %s does not exist"
                                    % (FLAGS.preview_png, folder))


def make_source_and_label_map(config):
    """The data source of the flags and the class names to show ({id: name} or None)."""
    from efficientdet_keras.data.sources import RecordsSource, make_source
    from efficientdet_keras.config.label_maps import label_names
    label_map = label_names(config.label_map)
    if FLAGS.data:
        from efficientdet_keras.data.formats.classes import classes_into_config
        from efficientdet_keras.data.datasets import open_dataset
        dataset = open_dataset(FLAGS.data)
        source = dataset.source(FLAGS.data_split)
        print(dataset.describe([FLAGS.data_split]))
        for warning in classes_into_config(config, dataset.classes,
                                           user_config_keys(FLAGS.hparams)):
            print("Warning: %s" % warning)
        return source, label_names(config.label_map)
    if FLAGS.voc_root:
        from efficientdet_keras.data.formats.voc import VOC_LABEL_MAP, load_voc_records
        label_map = label_map or VOC_LABEL_MAP
        return RecordsSource(load_voc_records(FLAGS.voc_root, FLAGS.voc_split, label_map)), \
            label_map
    if FLAGS.json_file:
        from efficientdet_keras.data.formats.coco_json import coco_categories
        label_map = label_map or coco_categories(FLAGS.json_file)
    return make_source(FLAGS.file_pattern, FLAGS.json_file, FLAGS.image_dir), label_map


def check_data() -> None:
    check_flags()
    from efficientdet_keras import get_efficientdet_config
    from efficientdet_keras.data.check import (format_report, plot_box_sizes, scan_dataset,
                                               summarize)
    from efficientdet_keras.utils.fileio import write_json_atomically
    config = get_efficientdet_config(FLAGS.model_name).override(FLAGS.hparams)
    source, label_map = make_source_and_label_map(config)
    if FLAGS.preview_png:
        from efficientdet_keras.data.preview import write_preview
        write_preview(FLAGS.preview_png, config, source, FLAGS.preview_images, FLAGS.seed,
                      label_map)
        print("Augmented training images: %s" % FLAGS.preview_png)
    scan = scan_dataset(source, config, max_records=FLAGS.max_records)
    summary = summarize(scan, config, label_map)
    print(format_report(summary))
    if FLAGS.output_png and plot_box_sizes(scan, config, FLAGS.output_png):
        print("Box size chart: %s" % FLAGS.output_png)
    if FLAGS.output_json:
        write_json_atomically(FLAGS.output_json, summary)
        print("Numbers: %s" % FLAGS.output_json)


def main(argv):
    del argv
    run_or_exit(TOOL, check_data)


def run():
    run_app(main, __name__)


if __name__ == "__main__":
    run()
