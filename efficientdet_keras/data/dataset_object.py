"""The Dataset `open_dataset` finds: its format, classes and splits, each split's data source
read once when first asked for, evaluation's ground truth and a description."""

import collections
import dataclasses
from typing import Callable, Dict, List, Optional, Sequence

from efficientdet_keras.data.formats.classes import DataClasses
from efficientdet_keras.data.formats.coco_json import read_coco_json, records_to_coco
from efficientdet_keras.data.formats.records import ImageRecord, with_class_ids
from efficientdet_keras.data.sources import RecordsSource


class DataSplit:
    """One split of a dataset: what it reads, and its source once asked for (read once)."""

    def __init__(self, name: str, location: str, load: Callable[[], object],
                 ground_truth_file: Optional[str] = None):
        self.name = name
        self.location = location
        self.ground_truth_file = ground_truth_file
        self._load = load
        self._source = None

    @property
    def source(self):
        """The split's data source (`data.sources`), read the first time it is asked for."""
        if self._source is None:
            self._source = self._load()
        return self._source

    @property
    def records(self) -> Optional[List[ImageRecord]]:
        """The ImageRecords of a split read from files of annotations (None for TFRecords)."""
        return getattr(self.source, "records", None)


@dataclasses.dataclass
class Dataset:
    """A dataset found by `open_dataset`: its format, its splits and its classes.

    skipped: entries left out while reading, by kind (the warnings named each of them).
    notes: what reading assumed that a user should know (the pixel origin of VOC boxes).
    title: the layout's name in describe() (`data.layouts.registry`).
    """
    path: str
    format: str
    classes: DataClasses
    splits: Dict[str, DataSplit]
    skipped: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    # What reading the data assumed that a user should know (one line each, in describe()).
    notes: List[str] = dataclasses.field(default_factory=list)
    # What describe() calls the layout (the registry's title; the format when none is given).
    title: str = ""

    def split(self, name: str) -> DataSplit:
        """Raises ValueError naming the splits there are when `name` is not one of them."""
        if name not in self.splits:
            raise ValueError("%s has no %s split (it has %s)"
                             % (self.path, name, ", ".join(self.splits) or "none"))
        return self.splits[name]

    def renumbered(self, new_ids: Dict[int, int]) -> "Dataset":
        """The dataset with its classes under new model ids ({old id: new id}, every id given):
        the classes, the records and so the ground truth. Read from annotation files only;
        TFRecords carry their ids in each example.

        Raises:
          ValueError for a TFRecord dataset.
        """
        if self.format == "tfrecord":
            raise ValueError("%s: the class ids of TFRecords are written in each example; "
                             "they cannot be renumbered as they are read" % self.path)

        def renumbered_split(split: DataSplit) -> DataSplit:
            def load():
                return RecordsSource([with_class_ids(r, new_ids) for r in split.records])
            return DataSplit(split.name, split.location, load, split.ground_truth_file)
        return dataclasses.replace(
            self, classes=self.classes.renumbered(new_ids),
            splits={name: renumbered_split(split) for name, split in self.splits.items()})

    def source(self, name: str):
        """The data source (`data.sources`) of a split."""
        return self.split(name).source

    def validation_split(self) -> Optional[str]:
        """The split evaluation uses: val, else test; None when there is neither."""
        return next((name for name in ("val", "test") if name in self.splits), None)

    def ground_truth(self, name: str) -> Optional[dict]:
        """The COCO ground truth of a split, with the model's class ids (what evaluation
        scores against); for TFRecords the JSON beside them, else None (evaluation then
        takes it from the batches)."""
        split = self.split(name)
        if split.ground_truth_file:
            return read_coco_json(split.ground_truth_file)
        records = split.records
        return None if records is None else records_to_coco(records, self.classes.names)

    def describe(self, names: Optional[Sequence[str]] = None) -> str:
        """A few lines: the format, the images and boxes of each split, the classes, and a
        warning for each mistake `data.label_checks` finds (an image in two splits, a class in
        one split only, class names given twice or differing only in case, repeated boxes)."""
        lines = ["Data: %s, %s" % (self.path, self.title or self.format)]
        for name in names or list(self.splits):
            split = self.split(name)
            records = split.records
            if records is None:
                lines.append("  %-5s %d TFRecord file(s) %s" % (
                    name, len(split.source.files), split.location))
                continue
            boxes = sum(len(r.classes) for r in records)
            background = sum(1 for r in records if not len(r.classes))
            lines.append("  %-5s %d images, %d boxes%s  %s" % (
                name, len(records), boxes,
                " (%d images without boxes)" % background if background else "", split.location))
        lines.append("  classes %s" % self.classes.describe())
        data_ids = [self.classes.data_ids[k] for k in sorted(self.classes.names)]
        if data_ids != sorted(self.classes.names) and self.format in ("yolo", "coco", "roboflow"):
            lines.append("  model ids 1..%d are the data's ids %s..%s"
                         % (self.classes.num_classes, data_ids[0], data_ids[-1]))
        if self.classes.dropped:
            repeats = ", ".join(map(str, self.classes.dropped_ids[1:]))
            lines.append("  left out the root category %r (no boxes; the others' supercategory)%s"
                         % (self.classes.dropped, ", and its repeats without boxes (ids %s)"
                            % repeats if repeats else ""))
        lines.extend("  " + note for note in self.notes)
        from efficientdet_keras.data.label_checks import dataset_warnings
        read = {name: self.split(name).records for name in names or list(self.splits)}
        lines.extend("  warning: " + line for line in dataset_warnings(
            self.classes.names, {name: records for name, records in read.items()
                                 if records is not None},
            folders_listed_whole=self.format in ("coco", "roboflow")))
        if self.skipped:
            lines.append("  skipped %s" % ", ".join("%d x %s" % (n, kind) for kind, n
                                                    in sorted(self.skipped.items())))
        return "\n".join(lines)
