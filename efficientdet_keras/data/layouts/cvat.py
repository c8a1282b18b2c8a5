"""CVAT for images 1.1 XML (CVAT's task, job and project exports; datumaro's and globox's
`cvat`): in the folder or annotations/, split by the images' `subset` or by the file names; or
in split folders beside their images (globox's train/annotations.xml)."""

import glob
import os
from typing import Dict, List, Optional, Tuple

from efficientdet_keras.data.layouts.row import Found, Layout, ReadOptions

def find(path: str) -> Optional[Found]:
    """(the CVAT XML files, {file in a split folder: that split})."""
    if not os.path.isdir(path):
        return None
    from efficientdet_keras.data.formats.cvat_xml import is_cvat_file
    from efficientdet_keras.data.split_names import split_folders
    in_splits = {f: split for split, folder in split_folders(path).items()
                 for f in sorted(glob.glob(os.path.join(glob.escape(folder), "*.xml")))
                 if is_cvat_file(f)}
    files = [f for where in (path, os.path.join(path, "annotations"))
             for f in sorted(glob.glob(os.path.join(glob.escape(where), "*.xml")))
             if is_cvat_file(f)] + list(in_splits)
    return Found(path, (files, in_splits), tuple(files)) if files else None


def read(found: Found, options: ReadOptions):
    """The classes in the order the files declare them (then any other name the boxes use).
    Data never split is train, unless a file of its own names the split."""
    from efficientdet_keras.data.formats.cvat_xml import read_cvat_file
    from efficientdet_keras.data.layouts.named_dataset import named_boxes_dataset
    from efficientdet_keras.data.split_names import UNSPLIT_SUBSETS, split_name
    files, in_splits = found.parts
    labels: List[str] = []
    splits: Dict[str, Tuple[str, list]] = {}
    for xml_file in files:
        file_labels, subsets = read_cvat_file(xml_file)
        labels += [name for name in file_labels if name not in labels]
        stem = os.path.splitext(os.path.basename(xml_file))[0]
        for subset, images in subsets.items():
            split = split_name(subset) if subset.lower() not in UNSPLIT_SUBSETS else \
                in_splits.get(xml_file) or split_name(stem) or "train"
            if split is None:
                raise ValueError("%s: subset %r is not a split (train, validation or test)"
                                 % (xml_file, subset))
            location, before = splits.get(split, ("", []))
            splits[split] = (",".join(filter(None, [location, xml_file])), before + images)
    return named_boxes_dataset(found.path, LAYOUT.data_format, splits, labels,
                               title=LAYOUT.title)


LAYOUT = Layout(
    name="cvat", data_format="cvat", title="CVAT for images XML",
    writers="CVAT for images 1.1 XML (CVAT's task, job and project exports; datumaro's and "
            "globox's `cvat`)",
    recognised="`.xml` files whose root is `<annotations>`, in the folder, `annotations/` or the "
               "split folders (globox writes `train/annotations.xml`); images in `images/`, "
               "`images/<subset>/` or beside the file. Boxes (turned ones as the upright box "
               "around them), polygons, ellipses and masks are boxes; polylines, points, "
               "cuboids and skeletons are left out with a warning",
    splits="the images' `subset` (`Train`, `Validation`, `Test`; `default` is train), else the "
           "file names (`train.xml`, `val.xml`)",
    sign="CVAT XML", find=find, read=read)
