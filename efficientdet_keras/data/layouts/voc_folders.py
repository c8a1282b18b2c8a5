"""Pascal VOC XMLs beside their images, or in a folder of their own with the images elsewhere
in the dataset folder (Label Studio's Annotations/, labelformat's and FiftyOne's labels/)."""

import os
from typing import Optional

from efficientdet_keras.data.layouts.row import Found, Layout, ReadOptions


def find(path: str) -> Optional[Found]:
    """{split: folder} of VOC XMLs: in split folders (train/, valid/, test/), else in the
    folder itself (as train), else in the folders below it that hold VOC annotations, split
    by their names or train."""
    if not os.path.isdir(path):
        return None
    from efficientdet_keras.data.formats.voc import is_voc_annotation
    from efficientdet_keras.data.split_names import split_folders, split_folders_below

    def has_xml(folder):
        return any(name.lower().endswith(".xml") for name in os.listdir(folder))
    folders = {split: folder for split, folder in split_folders(path).items()
               if has_xml(folder)}
    if not folders and has_xml(path):
        folders["train"] = path
    if not folders:
        folders = split_folders_below(path, lambda folder, files: any(
            is_voc_annotation(os.path.join(folder, f))
            for f in sorted(f for f in files if f.lower().endswith(".xml"))[:10]))
    return Found(path, folders, tuple(folders.values())) if folders else None


def read(found: Found, options: ReadOptions):
    """The classes are the XMLs' object names. The tools that export this layout write pixels
    from 0, seen in a box coordinate of 0 (else they are taken to start at 1, as in the VOC
    devkit)."""
    from efficientdet_keras.data.formats.voc import voc_folder_pairs
    from efficientdet_keras.data.image_index import ImageIndex
    from efficientdet_keras.data.layouts.voc_dataset import voc_pairs_dataset
    index = ImageIndex(found.path)
    return voc_pairs_dataset(found.path, {split: (folder, voc_folder_pairs(folder, index))
                                          for split, folder in found.parts.items()}, None, None,
                             options.voc_origin, LAYOUT.title)


LAYOUT = Layout(
    name="voc_folders", data_format="voc", title="Pascal VOC",
    writers="VOC XMLs beside their images (Roboflow's, supervision's, labelImg's and globox's VOC "
            "exports), or in a folder of their own (Label Studio's `Annotations/`, labelformat's "
            "and FiftyOne's `labels/`, pylabel's)",
    recognised="`*.xml` beside the images in `train/`, `valid/`, `test/`, else in the folder "
               "itself, else any folder below it (two levels down) whose XMLs are VOC annotations "
               "with boxes; an image not beside its XML is found by the file name its `<path>` or "
               "`<filename>` gives, anywhere in the dataset folder",
    splits="the folder names (the folder itself is train)",
    sign="VOC XMLs", find=find, read=read)
