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

import glob
import os
import sys
from typing import Optional

from absl import flags, logging

from efficientdet_keras.cli.common import run_app
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

    try:
        jobs, label_map = conversion_jobs(args)
    except (OSError, ValueError, KeyError) as e:
        sys.exit("%s: %s" % (TOOL, e))
    for prefix, records, json_path in jobs:
        convert(args, records, prefix, json_path, label_map)
    if FLAGS.data:
        from efficientdet_keras.utils.fileio import write_json_atomically
        path = os.path.join(os.path.dirname(os.path.abspath(FLAGS.output_prefix)),
                            "label_map.json")
        write_json_atomically(path, {str(k): v for k, v in sorted(label_map.items())})
        print("Class names in %s" % path)


def conversion_jobs(args):
    """[(output prefix, records, ground-truth JSON path or "")] and the label map."""
    from efficientdet_keras.data.formats.label_map import read_label_map_file
    label_map = read_label_map_file(args.label_map) if args.label_map else None
    if args.data:
        from efficientdet_keras.data.datasets import open_dataset
        options = flag_groups.data_options(args)
        dataset = open_dataset(args.data, options["voc_origin"], options["data_layout"])
        print(dataset.describe())
        label_map = label_map or dataset.classes.names
        return [("%s-%s" % (args.output_prefix, name), split.records,
                 "%s-%s.json" % (args.output_prefix, name))
                for name, split in dataset.splits.items() if split.records is not None], \
            label_map
    if args.input_format == "voc":
        from efficientdet_keras.data.formats.voc import VOC_LABEL_MAP, load_voc_records
        label_map = label_map or VOC_LABEL_MAP
        records = load_voc_records(args.voc_root, args.voc_split, label_map)
    else:
        from efficientdet_keras.data.formats.coco_json import coco_categories
        from efficientdet_keras.data.formats.coco_records import load_coco_records
        records = load_coco_records(args.coco_json, args.image_dir)
        label_map = label_map or coco_categories(args.coco_json)
    return [(args.output_prefix, records, args.output_json)], label_map


def convert(args, records, output_prefix: str, output_json: str, label_map) -> None:
    """Writes one set of records as shards of output_prefix (and its ground truth)."""
    from efficientdet_keras.data.formats.coco_json import records_to_coco
    from efficientdet_keras.data.tfrecord_writer import shard_paths, write_tfrecords
    if not records:
        sys.exit("%s: the input lists no images" % TOOL)
    stale = sorted(set(glob.glob(glob.escape(output_prefix) + "-?????-of-?????.tfrecord"))
                   - set(shard_paths(output_prefix, args.num_shards)))
    if stale:
        logging.warning("%d shard(s) from an earlier run with another --num_shards remain, "
                        "e.g. %s; a '%s-*' pattern would read them too",
                        len(stale), stale[0], output_prefix)

    try:
        stats = write_tfrecords(records, output_prefix, args.num_shards, label_map)
    except (OSError, ValueError) as e:
        sys.exit("%s: %s" % (TOOL, e))
    if output_json:
        from efficientdet_keras.utils.fileio import write_json_atomically
        try:
            write_json_atomically(output_json,
                                  records_to_coco(stats.written_records, label_map), indent=None)
        except OSError as e:
            sys.exit("%s: %s" % (TOOL, e))
    print("Wrote %d images (%d objects) to %d shard(s) %s-*-of-%05d.tfrecord; skipped %d images%s"
          % (stats.images_written, stats.objects_written, args.num_shards, output_prefix,
             args.num_shards, stats.images_skipped,
             "; ground truth in %s" % output_json if output_json else ""))
    if stats.data_report:
        print("Data report: %s" % ", ".join("%s=%d" % kv for kv in stats.data_report.items()))


def run():
    run_app(main, __name__)


if __name__ == "__main__":
    run()
