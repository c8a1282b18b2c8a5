"""check_data: what a dataset holds, as the model will see it, and how the anchors fit (the
numbers of `data.check`), from a dataset folder or the older parts (TFRecords, a COCO JSON
with its images, a VOC year folder).

    result = check_data(data="datasets/pets", split="val", output_png="box_sizes.png")
    print(result.report)
"""

import dataclasses
from typing import Callable, Optional

from efficientdet_keras.workflows.train import user_config_keys


@dataclasses.dataclass
class CheckResult:
    """summary: the numbers (what output_json holds); report: the printout; chart, numbers,
    preview: the files written (None when not asked for, or, for the chart, without
    matplotlib)."""
    summary: dict
    report: str
    chart: Optional[str] = None
    numbers: Optional[str] = None
    preview: Optional[str] = None


def check_data(*, data: Optional[str] = None, split: str = "train",
               file_pattern: Optional[str] = None, json_file: Optional[str] = None,
               image_dir: Optional[str] = None, voc_root: Optional[str] = None,
               voc_split: str = "train", model: str = "efficientdet-d0", hparams="",
               output_png: Optional[str] = None, output_json: Optional[str] = None,
               max_records: int = 0, preview_png: Optional[str] = None,
               preview_images: int = 16, seed: int = 0, voc_origin: Optional[int] = None,
               data_layout: Optional[str] = None,
               report: Callable[[str], None] = print) -> CheckResult:
    """Reads every record of one source as training does and sums it up.

    Args:
      data, split: a dataset folder or file in any layout `open_dataset` reads (voc_origin
        and data_layout as it takes them), and the split to check; its classes are the
        check's. Or file_pattern (TFRecords), json_file with image_dir, or voc_root with
        voc_split.
      model, hparams: the config whose input size and anchors the boxes are measured with.
      output_png: the box sizes drawn against the anchor sizes (needs matplotlib).
      output_json: the summary as JSON.
      max_records: check at most this many records (0: all).
      preview_png, preview_images, seed: a grid of the first training images as the
        training pipeline makes them, with their boxes.
      report: called with each line worth showing (the dataset found, the report).

    Returns:
      CheckResult.
    """
    from efficientdet_keras import get_efficientdet_config
    from efficientdet_keras.data.check import (format_report, plot_box_sizes, scan_dataset,
                                               summarize)
    config = get_efficientdet_config(model).override(hparams)
    source, label_map = _source_and_label_map(
        config, hparams, report, data=data, split=split, file_pattern=file_pattern,
        json_file=json_file, image_dir=image_dir, voc_root=voc_root, voc_split=voc_split,
        voc_origin=voc_origin, data_layout=data_layout)
    result = CheckResult({}, "")
    if preview_png:
        from efficientdet_keras.data.preview import write_preview
        write_preview(preview_png, config, source, preview_images, seed, label_map)
        result.preview = preview_png
        report("Augmented training images: %s" % preview_png)
    scan = scan_dataset(source, config, max_records=max_records)
    result.summary = summarize(scan, config, label_map)
    result.report = format_report(result.summary)
    report(result.report)
    if output_png and plot_box_sizes(scan, config, output_png):
        result.chart = output_png
        report("Box size chart: %s" % output_png)
    if output_json:
        from efficientdet_keras.utils.fileio import write_json_atomically
        write_json_atomically(output_json, result.summary)
        result.numbers = output_json
        report("Numbers: %s" % output_json)
    return result


def _source_and_label_map(config, hparams, report, *, data, split, file_pattern, json_file,
                          image_dir, voc_root, voc_split, voc_origin, data_layout):
    """The data source to check and the class names to show ({id: name} or None)."""
    from efficientdet_keras.config.label_maps import label_names
    from efficientdet_keras.data.sources import RecordsSource, make_source
    label_map = label_names(config.label_map)
    if data:
        from efficientdet_keras.data.datasets import open_dataset
        from efficientdet_keras.data.formats.classes import classes_into_config
        dataset = open_dataset(data, voc_origin, data_layout)
        source = dataset.source(split)
        report(dataset.describe([split]))
        for warning in classes_into_config(config, dataset.classes, user_config_keys(hparams)):
            report("Warning: %s" % warning)
        return source, label_names(config.label_map)
    if voc_root:
        from efficientdet_keras.data.formats.voc import VOC_LABEL_MAP, load_voc_records
        label_map = label_map or VOC_LABEL_MAP
        return RecordsSource(load_voc_records(voc_root, voc_split, label_map)), label_map
    if json_file:
        from efficientdet_keras.data.formats.coco_json import coco_categories
        label_map = label_map or coco_categories(json_file)
    return make_source(file_pattern, json_file, image_dir), label_map
