"""The data a model is scored on, opened one way for training and for evaluation.

    val = open_validation_data("datasets/pets", config, files_dir="runs/pets")
    val.source, val.ground_truth      # what CheckpointEvaluation / COCOCallback take

The dataset's classes meet the model's config by one rule (`data.formats.classes`): the
data's class count and names go into the config except for the keys that are fixed (the
ones a user set, or all of them for a trained model), and each disagreement is a warning line.
When the fixed label_map holds the data's names in another order, the data's classes take
the model's ids by name first (`match_classes_by_name`).
"""

import dataclasses
import os
import tempfile
from typing import Callable, Iterable, Optional

from absl import logging

# What a trained model's classes are: fixed, whatever the data says.
MODEL_CLASS_KEYS = frozenset({"num_classes", "label_map"})


@dataclasses.dataclass
class ValidationData:
    """A split to score on: its data source, its COCO ground truth (a JSON path with the
    model's class ids; None: taken from the records) and, for a dataset folder, the
    dataset and the split's name."""
    source: object
    ground_truth: Optional[str]
    dataset: object = None
    split: Optional[str] = None


def match_classes_by_name(config, dataset, fixed_keys: Iterable[str] = ()):
    """The dataset, its classes renumbered as the config's label_map numbers them when that map
    is fixed and holds every class name of the data in another order (or more names): data
    written by another tool, or in another layout, then scores and trains against the model's
    own ids. Said in one line; otherwise the dataset as it is."""
    from efficientdet_keras.config.label_maps import label_names
    from efficientdet_keras.data.formats.classes import ids_matched_by_name
    if "label_map" not in set(fixed_keys) or config.label_map is None or \
            dataset.format == "tfrecord":
        return dataset
    model_names = label_names(config.label_map) or {}
    new_ids = ids_matched_by_name(dataset.classes, model_names)
    if not new_ids:
        return dataset
    moved = ["%s %d -> %d" % (dataset.classes.names[k], k, v)
             for k, v in sorted(new_ids.items()) if k != v]
    logging.info("%s: classes matched to the model's by name (%s)", dataset.path,
                 ", ".join(moved))
    return dataset.renumbered(new_ids)


def take_classes(config, dataset, fixed_keys: Iterable[str] = ()) -> None:
    """The dataset's classes into `config` where `fixed_keys` leave them free (one warning
    line per disagreement; ValueError for class ids the model cannot predict)."""
    from efficientdet_keras.data.formats.classes import classes_into_config
    for warning in classes_into_config(config, dataset.classes, fixed_keys):
        logging.warning("%s: %s", dataset.path, warning)


def open_validation_data(data: str, config, *, split: Optional[str] = None,
                         fixed_keys: Iterable[str] = MODEL_CLASS_KEYS,
                         files_dir: Optional[str] = None, dataset=None,
                         report: Optional[Callable[[str], None]] = None,
                         voc_origin: Optional[int] = None,
                         data_layout: Optional[str] = None) -> ValidationData:
    """The validation split of a dataset folder or file in any layout `open_dataset` reads.

    Args:
      data: the dataset's path.
      config: the model's config; the data's classes go into it where `fixed_keys` allow
        (MODEL_CLASS_KEYS, the default: compared only, as for a trained model).
      split: the split to score (default: val, else test).
      files_dir: where the split's ground truth is written as COCO JSON with the model's
        class ids (default: a temporary folder kept until the process ends).
      dataset: the already opened dataset of `data`, if the caller has it.
      report: called with the dataset's description of the split (None: not described).
      voc_origin: the pixel VOC boxes start from, 0 or 1 (None: found; `open_dataset`).
      data_layout: the layout to read `data` as (None: the one its files show).

    Raises:
      ValueError naming the dataset when it has no such split.
    """
    from efficientdet_keras.data.datasets import open_dataset
    dataset = match_classes_by_name(config, dataset if dataset is not None
                                    else open_dataset(data, voc_origin, data_layout), fixed_keys)
    split = split or dataset.validation_split()
    if split is None:
        raise ValueError("%s has no val or test split to evaluate on; name a split, train "
                         "without evaluation (--mode=train), or add one" % dataset.path)
    if split not in dataset.splits:
        raise ValueError("%s has no split %r (it has %s)"
                         % (dataset.path, split, ", ".join(dataset.splits)))
    if report is not None:
        report(dataset.describe([split]))
    # A trained model's classes are compared with the data's, never changed (not even a
    # missing label_map filled in).
    take_classes(config.copy() if MODEL_CLASS_KEYS <= set(fixed_keys) else config, dataset,
                 fixed_keys)
    return ValidationData(dataset.source(split), write_ground_truth(dataset, split, files_dir),
                          dataset, split)


def write_ground_truth(dataset, split: str, files_dir: Optional[str] = None) -> Optional[str]:
    """The split's COCO ground truth written as <files_dir>/<split>_ground_truth.json, or None
    when the data's records carry it."""
    from efficientdet_keras.utils.fileio import write_json_atomically
    ground_truth = dataset.ground_truth(split)
    if ground_truth is None:
        return None
    if files_dir is None:
        files_dir = _process_temporary_dir()
    return write_json_atomically(os.path.join(files_dir, "%s_ground_truth.json" % split),
                                 ground_truth, indent=None)


def _process_temporary_dir() -> str:
    """A folder removed when the process ends."""
    import atexit
    import shutil
    folder = tempfile.mkdtemp(prefix="efficientdet-eval-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder
