"""Every dataset layout `open_dataset` reads, in the order it looks for them: the first whose
find() fits a folder is read. The order settles folders that could pass for two layouts: YOLO's
names file before the label files beside images; Roboflow's COCO before plain COCO; CVAT's XML
before VOC's; TFRecords before the COCO JSON written beside them as ground truth; label files
without any names file last.

Adding a layout: its parser in `data/formats/`, its module here (a `LAYOUT` row), one line in
LAYOUTS."""

from typing import List, Tuple

from efficientdet_keras.data.layouts import (automl_csv, box_csv, coco, createml, cvat, darknet,
                                             kitti, label_studio, labelme, open_images,
                                             roboflow, tfrecord, ultralytics, unnamed_yolo, via,
                                             voc_folders, voc_year)
from efficientdet_keras.data.layouts.row import Layout

LAYOUTS: Tuple[Layout, ...] = (
    ultralytics.LAYOUT,
    darknet.LAYOUT,
    roboflow.LAYOUT,
    voc_year.LAYOUT,
    cvat.LAYOUT,
    voc_folders.LAYOUT,
    labelme.LAYOUT,
    box_csv.LAYOUT,
    automl_csv.LAYOUT,
    open_images.LAYOUT,
    label_studio.LAYOUT,
    createml.LAYOUT,
    via.LAYOUT,
    kitti.LAYOUT,
    tfrecord.LAYOUT,
    coco.LAYOUT,
    unnamed_yolo.LAYOUT,
)


def get_layout(name: str) -> Layout:
    """Raises ValueError naming the layouts when `name` is none of them."""
    for layout in LAYOUTS:
        if layout.name == name:
            return layout
    raise ValueError("unknown data layout %r: choose from %s"
                     % (name, ", ".join(layout.name for layout in LAYOUTS)))


def titles() -> List[str]:
    """The layouts' titles, each once, in the registry's order (the --data help)."""
    return list(dict.fromkeys(layout.title for layout in LAYOUTS))


def refusal(path: str) -> str:
    """The line for a folder that holds none of the layouts: what was looked for."""
    return ("%s holds no dataset this package reads: looked for %s (the data guide says what "
            "each is recognised by)" % (path, ", ".join(layout.sign for layout in LAYOUTS)))
