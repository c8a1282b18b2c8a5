"""A Dataset of the layouts whose boxes carry class names (CVAT XML, LabelMe, the CSVs, Label
Studio, CreateML, VIA, KITTI): the classes are numbered from the names the boxes use."""

from typing import Dict, Optional, Sequence

from efficientdet_keras.data.dataset_object import Dataset, DataSplit
from efficientdet_keras.data.formats.classes import DataClasses, indexed_classes, named_classes
from efficientdet_keras.data.sources import RecordsSource
from efficientdet_keras.data.split_names import SPLITS


def named_boxes_dataset(path: str, data_format: str, splits: Dict[str, tuple],
                        class_order: Optional[Sequence[str]] = None,
                        notes: Sequence[str] = (), title: str = "") -> Dataset:
    """{split: (location, [NamedBoxes])}; the classes are class_order (CVAT's declared
    labels) with any other name the boxes use after it, else the names of the boxes, sorted
    (the 20 VOC ids when every name is a VOC class, as for VOC)."""
    from efficientdet_keras.data.formats.named_boxes import named_records, object_names
    used = object_names([image for _, images in splits.values() for image in images])
    if class_order:
        classes = indexed_classes(list(class_order) + [n for n in used if n not in class_order])
        classes = DataClasses(classes.names, dict(classes.names))
    else:
        classes = named_classes(used)

    def loader(split, location, images):
        def load():
            records = named_records(images, classes.names)
            if not records:
                raise ValueError("%s: no image of the %s split was read (the warnings above "
                                 "say why)" % (location, split))
            return RecordsSource(records)
        return load

    found = {split: DataSplit(split, location, loader(split, location, images))
             for split, (location, images) in sorted(splits.items(),
                                                    key=lambda kv: SPLITS.index(kv[0]))}
    return Dataset(path, data_format, classes, found, notes=list(notes), title=title)
