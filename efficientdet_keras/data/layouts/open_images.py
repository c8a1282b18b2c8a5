"""Open Images boxes (datumaro's `open_images`, globox's `openimage`): <split>-annotations-bbox.csv
with the class descriptions CSV, images named by their ImageID."""

import os
from typing import Dict, Optional, Tuple

from efficientdet_keras.data.layouts.row import Found, Layout, ReadOptions


def find(path: str) -> Optional[Found]:
    """{split word in the file name: box file}."""
    if not os.path.isdir(path):
        return None
    from efficientdet_keras.data.formats.open_images import box_files
    files = box_files(path)
    return Found(path, files, tuple(files.values())) if files else None


def read(found: Found, options: ReadOptions):
    """Without a class descriptions CSV the classes are named by their label ids (a note says
    so)."""
    from efficientdet_keras.data.formats.open_images import class_descriptions, read_box_file
    from efficientdet_keras.data.layouts.named_dataset import named_boxes_dataset
    from efficientdet_keras.data.split_names import UNSPLIT_SUBSETS, split_name
    names = class_descriptions(found.path)
    splits: Dict[str, Tuple[str, list]] = {}
    for word, box_file in found.parts.items():
        split = split_name(word) or (
            "train" if word.lower() in UNSPLIT_SUBSETS else None)
        if split is None:
            raise ValueError("%s: %r is not a split (train, validation or test)"
                             % (box_file, word))
        splits[split] = (box_file, read_box_file(box_file, word, names))
    label_ids = names is None and any(name.startswith("/m/") for _, images in splits.values()
                                      for image in images for name, _ in image.objects)
    notes = ["no class descriptions CSV: the classes are named by their Open Images label "
             "ids"] if label_ids else []
    return named_boxes_dataset(found.path, LAYOUT.data_format, splits, notes=notes,
                               title=LAYOUT.title)


LAYOUT = Layout(
    name="open_images", data_format="open_images", title="Open Images CSV",
    writers="Open Images (boxes; datumaro's `open_images`, globox's `openimage`)",
    recognised="`<split>-annotations-bbox.csv` in the folder or `annotations/`, with a "
               "`*class-descriptions*.csv` for the names (else the label ids are the names); "
               "images `<ImageID>.jpg` in `<split>/`, `images/<split>/` or `images/`. "
               "`IsGroupOf` boxes are crowd boxes",
    splits="the file names (`train`, `validation`, `test`)",
    sign="the Open Images CSVs", find=find, read=read)
