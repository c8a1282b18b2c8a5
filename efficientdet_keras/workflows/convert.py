"""convert: a dataset into sharded TFRecord files in the Object Detection API layout
(`data.tfrecord_writer`), with the COCO ground truth of the images written.

    result = convert("out/pets", data="datasets/pets")
    # out/pets-train-00000-of-00001.tfrecord, out/pets-train.json, ..., out/label_map.json:
    # a folder train(data="out") reads back.
"""

import collections
import dataclasses
import glob
import os
from typing import Callable, Dict, List, Optional

from absl import logging


@dataclasses.dataclass
class ConvertResult:
    """shards: {output prefix: its TFRecord files}; ground_truth: {output prefix: its COCO
    JSON}; label_map_file: the class names written beside a converted dataset (None for the
    parts); the images and objects written and skipped, and the skipped records by kind."""
    shards: Dict[str, List[str]] = dataclasses.field(default_factory=dict)
    ground_truth: Dict[str, str] = dataclasses.field(default_factory=dict)
    label_map_file: Optional[str] = None
    images_written: int = 0
    objects_written: int = 0
    images_skipped: int = 0
    data_report: collections.Counter = dataclasses.field(default_factory=collections.Counter)


def convert(output_prefix: str, *, data: Optional[str] = None,
            coco_json: Optional[str] = None, image_dir: Optional[str] = None,
            voc_root: Optional[str] = None, voc_split: str = "train",
            label_map: Optional[str] = None, num_shards: int = 1,
            output_json: Optional[str] = None, voc_origin: Optional[int] = None,
            data_layout: Optional[str] = None,
            report: Callable[[str], None] = print) -> ConvertResult:
    """Writes TFRecords of a dataset folder's every split (<output_prefix>-<split>-*.tfrecord,
    <output_prefix>-<split>.json, label_map.json beside them), or of one COCO JSON with its
    images or one VOC split (<output_prefix>-*.tfrecord, and output_json when given).

    Args:
      label_map: a YAML or JSON file of {id: name} (default: the data's classes, the VOC
        classes, or the COCO JSON's categories).
      voc_origin, data_layout: as `open_dataset` takes them.
      report: called with each line worth showing.

    Raises:
      ValueError: a source lists no images, or none of them could be written.
    """
    from efficientdet_keras.data.formats.label_map import read_label_map_file
    names = read_label_map_file(label_map) if label_map else None
    for path in filter(None, (output_prefix, output_json)):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    result = ConvertResult()
    if data:
        from efficientdet_keras.data.datasets import open_dataset
        dataset = open_dataset(data, voc_origin, data_layout)
        report(dataset.describe())
        names = names or dataset.classes.names
        jobs = [("%s-%s" % (output_prefix, split_name), split.records,
                 "%s-%s.json" % (output_prefix, split_name))
                for split_name, split in dataset.splits.items() if split.records is not None]
    elif voc_root:
        from efficientdet_keras.data.formats.voc import VOC_LABEL_MAP, load_voc_records
        names = names or VOC_LABEL_MAP
        jobs = [(output_prefix, load_voc_records(voc_root, voc_split, names), output_json)]
    else:
        from efficientdet_keras.data.formats.coco_json import coco_categories
        from efficientdet_keras.data.formats.coco_records import load_coco_records
        names = names or coco_categories(coco_json)
        jobs = [(output_prefix, load_coco_records(coco_json, image_dir), output_json)]
    for prefix, records, json_path in jobs:
        _write(prefix, records, json_path, names, num_shards, result, report)
    if data:
        from efficientdet_keras.utils.fileio import write_json_atomically
        result.label_map_file = os.path.join(os.path.dirname(os.path.abspath(output_prefix)),
                                             "label_map.json")
        write_json_atomically(result.label_map_file,
                              {str(k): v for k, v in sorted(names.items())})
        report("Class names in %s" % result.label_map_file)
    return result


def _write(prefix: str, records, json_path: Optional[str], names, num_shards: int,
           result: ConvertResult, report) -> None:
    """Writes one set of records as shards of `prefix` (and its ground truth)."""
    from efficientdet_keras.data.formats.coco_json import records_to_coco
    from efficientdet_keras.data.tfrecord_writer import shard_paths, write_tfrecords
    if not records:
        raise ValueError("the input lists no images")
    stale = sorted(set(glob.glob(glob.escape(prefix) + "-?????-of-?????.tfrecord"))
                   - set(shard_paths(prefix, num_shards)))
    if stale:
        logging.warning("%d shard(s) from an earlier run with another --num_shards remain, "
                        "e.g. %s; a '%s-*' pattern would read them too",
                        len(stale), stale[0], prefix)
    stats = write_tfrecords(records, prefix, num_shards, names)
    result.shards[prefix] = shard_paths(prefix, num_shards)
    if json_path:
        from efficientdet_keras.utils.fileio import write_json_atomically
        write_json_atomically(json_path, records_to_coco(stats.written_records, names),
                              indent=None)
        result.ground_truth[prefix] = json_path
    result.images_written += stats.images_written
    result.objects_written += stats.objects_written
    result.images_skipped += stats.images_skipped
    result.data_report.update(stats.data_report or {})
    report("Wrote %d images (%d objects) to %d shard(s) %s-*-of-%05d.tfrecord; skipped %d "
           "images%s" % (stats.images_written, stats.objects_written, num_shards, prefix,
                         num_shards, stats.images_skipped,
                         "; ground truth in %s" % json_path if json_path else ""))
    if stats.data_report:
        report("Data report: %s" % ", ".join("%s=%d" % kv for kv in stats.data_report.items()))
