"""A Pascal VOC year folder: Annotations/, JPEGImages/ and ImageSets/Main/<split>.txt (the
devkit's layout; datumaro's and CVAT's VOC exports)."""

import os

from efficientdet_keras.data.layouts.row import Found, Layout, ReadOptions


def find(path: str):
    """The folder, when it holds Annotations/ and ImageSets/Main/."""
    if os.path.isdir(os.path.join(path, "Annotations")) and \
            os.path.isdir(os.path.join(path, "ImageSets", "Main")):
        return Found(path, claims=(os.path.join(path, "Annotations"),))
    return None


def read(found: Found, options: ReadOptions):
    """train and val (else trainval as train) and test from ImageSets/Main; the classes are the
    object names of the annotations. The pixels start at 1 as in the VOC devkit, or at 0 when
    datumaro's labelmap.txt (CVAT's VOC export is datumaro's) sits beside them."""
    from efficientdet_keras.data.formats.label_map import read_datumaro_labelmap
    from efficientdet_keras.data.formats.voc import voc_split_pairs
    from efficientdet_keras.data.layouts.voc_dataset import voc_pairs_dataset
    voc_root = found.path
    main = os.path.join(voc_root, "ImageSets", "Main")
    present = [s for s in ("train", "val", "trainval", "test")
               if os.path.isfile(os.path.join(main, s + ".txt"))]
    files = {"val": "val", "test": "test"}
    files["train"] = "train" if "train" in present else "trainval"
    files = {split: name for split, name in files.items() if name in present}
    if not files:
        raise ValueError("%s has no train.txt, val.txt, trainval.txt or test.txt" % main)
    datumaro_map = os.path.join(voc_root, "labelmap.txt")
    zero_based = datumaro_map if os.path.isfile(datumaro_map) else None
    return voc_pairs_dataset(voc_root, {
        split: (os.path.join(main, name + ".txt"), voc_split_pairs(voc_root, name))
        for split, name in files.items()}, zero_based,
        read_datumaro_labelmap(datumaro_map) if zero_based else None, options.voc_origin,
        LAYOUT.title)


LAYOUT = Layout(
    name="voc", data_format="voc", title="Pascal VOC",
    writers="Pascal VOC (the devkit; datumaro's and CVAT's VOC exports)",
    recognised="`Annotations/`, `JPEGImages/`, `ImageSets/Main/<split>.txt`",
    splits="`train`, `val` (else `trainval` as train), `test`",
    sign="VOC's Annotations/ and ImageSets/Main/", find=find, read=read)
