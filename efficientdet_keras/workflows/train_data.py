"""The data of a training run, however it is named: a dataset folder, files one part at a time
(TFRecords, COCO JSON with an image folder), or the built-in demo set.

    data = DataSpec(data="datasets/pets")
    found = find_training_data(data, config, files_dir="runs/pets", evaluate=True)
    found.train, found.val, found.val_json
"""

import dataclasses
import os
from typing import Callable, Iterable, Optional

from efficientdet_keras.workflows.validation_data import (match_classes_by_name,
                                                        open_validation_data, take_classes)

# The synthetic demo images' size and the share of them kept for validation.
DEMO_IMAGE_SIZE = 256
DEMO_VALIDATION_SHARE = 10


@dataclasses.dataclass
class DataSpec:
    """What names a run's data: one of `data` (a dataset folder or file in any layout
    `open_dataset` reads), `demo` (the built-in synthetic shapes, `demo_images` training
    images), or the parts: train_file_pattern / val_file_pattern (TFRecords), train_json with
    image_dir, val_json_file (COCO ground truth; with val_image_dir, also the image list).
    voc_origin: the pixel VOC boxes of `data` start from, 0 or 1 (None: found).
    data_layout: the registry's layout to read `data` as (None: the one its files show)."""
    data: Optional[str] = None
    demo: bool = False
    demo_images: int = 1000
    train_file_pattern: Optional[str] = None
    val_file_pattern: Optional[str] = None
    train_json: Optional[str] = None
    image_dir: Optional[str] = None
    val_json_file: Optional[str] = None
    val_image_dir: Optional[str] = None
    voc_origin: Optional[int] = None
    data_layout: Optional[str] = None


@dataclasses.dataclass
class TrainingData:
    """The sources a run reads: training (None when only evaluating), validation (None
    without evaluation), the validation ground truth JSON (None: from the records), and the
    dataset they were found in (None for TFRecord parts and the demo)."""
    train: object
    val: object
    val_json: Optional[str]
    dataset: object = None


def write_demo_data(spec: DataSpec, files_dir: str):
    """The synthetic demo dataset under <files_dir>/synthetic, written once."""
    from efficientdet_keras.data.synthetic import write_synthetic_dataset
    return write_synthetic_dataset(os.path.join(files_dir, "synthetic"),
                                   num_train=spec.demo_images,
                                   num_val=max(1, spec.demo_images // DEMO_VALIDATION_SHARE),
                                   image_size=DEMO_IMAGE_SIZE, show_progress=True)


def find_training_data(spec: DataSpec, config, files_dir: str, *, train: bool = True,
                       evaluate: bool = True, fixed_keys: Iterable[str] = (),
                       demo_data=None, report: Callable[[str], None] = print) -> TrainingData:
    """The training and validation sources `spec` names; a dataset's classes go into `config`
    except for `fixed_keys` (the keys the user set), and <files_dir>/classes.json maps the
    model's class ids to the data's. The validation ground truth is written into files_dir.

    train, evaluate: whether the run trains, and whether it evaluates.
    demo_data: the demo set (`write_demo_data`) when spec.demo.
    report: called with the found dataset's description.
    """
    from efficientdet_keras.data.sources import make_source
    if demo_data is not None:
        config.label_map = dict(demo_data.label_map)
        return TrainingData(make_source(demo_data.train_tfrecord),
                            make_source(demo_data.val_tfrecord), demo_data.val_json)
    dataset = _open_dataset(spec, train)
    if dataset is not None:
        dataset = match_classes_by_name(config, dataset, fixed_keys)
    if dataset is None:
        return TrainingData(
            make_source(spec.train_file_pattern, spec.train_json, spec.image_dir) if train
            else None,
            make_source(spec.val_file_pattern, None if spec.val_file_pattern
                        else spec.val_json_file, spec.val_image_dir) if evaluate else None,
            spec.val_json_file or None)
    found = TrainingData(dataset.source("train") if train else None, None, None, dataset)
    split = dataset.validation_split() if evaluate else None
    report(dataset.describe([s for s in ("train" if train else None, split)
                             if s in dataset.splits]))
    if evaluate and not spec.data and spec.val_file_pattern:
        # TFRecord validation beside COCO JSON training.
        found.val, found.val_json = make_source(spec.val_file_pattern), spec.val_json_file
        take_classes(config, dataset, fixed_keys)
    elif evaluate:  # Its classes go into the config as it opens.
        validation = open_validation_data(dataset.path, config, fixed_keys=fixed_keys,
                                          files_dir=files_dir, dataset=dataset)
        found.val, found.val_json = validation.source, validation.ground_truth
    else:
        take_classes(config, dataset, fixed_keys)
    from efficientdet_keras.utils.fileio import write_json_atomically
    write_json_atomically(os.path.join(files_dir, "classes.json"),
                          dataset.classes.as_json(dataset.format))
    return found


def _open_dataset(spec: DataSpec, train: bool):
    """The dataset `spec.data` names, or the COCO JSON parts as one (their classes come from
    the JSON); None for TFRecord parts."""
    from efficientdet_keras.data.datasets import coco_dataset, open_dataset
    if spec.data:
        return open_dataset(spec.data, spec.voc_origin, spec.data_layout)
    if spec.train_json and train:
        splits = {"train": (spec.train_json, spec.image_dir)}
        if spec.val_json_file and spec.val_image_dir and not spec.val_file_pattern:
            splits["val"] = (spec.val_json_file, spec.val_image_dir)
        return coco_dataset(spec.train_json, splits)
    return None
