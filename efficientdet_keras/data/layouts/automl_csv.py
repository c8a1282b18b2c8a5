"""AutoML Vision's CSV (Google Cloud's, which TFLite Model Maker reads): TRAIN / VALIDATION /
TEST first, coordinates as fractions, gs:// images found below the bucket or by file name."""

import glob
import os
from typing import Optional

from efficientdet_keras.data.layouts.row import Found, Layout, ReadOptions


def find(path: str) -> Optional[Found]:
    """The folder's AutoML Vision CSV (the first by name, when there are several)."""
    if not os.path.isdir(path):
        return None
    from efficientdet_keras.data.formats.automl_csv import is_automl_csv
    tables = [f for f in sorted(glob.glob(os.path.join(glob.escape(path), "*.csv")))
              if is_automl_csv(f)]
    return Found(path, tables[0], (tables[0],)) if tables else None


def read(found: Found, options: ReadOptions):
    """UNASSIGNED rows are read into train, with a note of how many."""
    from efficientdet_keras.data.formats.automl_csv import read_automl_csv
    from efficientdet_keras.data.layouts.named_dataset import named_boxes_dataset
    splits, unassigned = read_automl_csv(found.parts)
    notes = ["%d UNASSIGNED images read into train" % unassigned] if unassigned else []
    return named_boxes_dataset(found.path, LAYOUT.data_format, {
        split: (found.parts, images) for split, images in splits.items()}, notes=notes,
        title=LAYOUT.title)


LAYOUT = Layout(
    name="automl_csv", data_format="automl_csv", title="CSV (AutoML Vision)",
    writers="AutoML Vision CSV (Google Cloud's, which TFLite Model Maker reads)",
    recognised="a header-less `.csv` whose rows start with `TRAIN`, `VALIDATION`, `TEST` or "
               "`UNASSIGNED`, coordinates as fractions (two corners or four vertices); `gs://` "
               "images found by their path below the bucket, then by file name, beside the "
               "file or in `images/`",
    splits="the first column; `UNASSIGNED` rows are read into train and the printout says how "
           "many",
    sign="the AutoML Vision CSV", find=find, read=read)
