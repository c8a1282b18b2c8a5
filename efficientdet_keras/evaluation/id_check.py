"""Do the images of a data source appear in the ground-truth JSON? Checked before any work.

COCO evaluation with `--val_json_file` matches detections to ground truth by
image id. When the TFRecords (or image list) name their images differently from
the JSON (file names vs numbers, another split, ids written by another tool),
every image would miss its ground truth: pycocotools fails, or AP is silently
wrong. The trainer and the eval tool call `check_source_ids_match` first, so a
mismatch stops the run in one line, before training or evaluation starts.
"""

from typing import Iterable, List, Mapping, Sequence

import numpy as np
import tensorflow as tf

from efficientdet_keras.data.formats.image_ids import ImageId, image_id_to_int64
from efficientdet_keras.data.formats.coco_json import coco_image_ids, read_coco_json

# How many ids of each side an error message shows.
_SHOWN = 3


def source_image_ids(source) -> List[str]:
    """The source_id text of every image of a data source, in reading order.

    Reads the raw records only (no image decoding): for TFRecords one pass over
    the files, for COCO JSON, VOC and synthetic sources just their record lists.
    """
    # Records found broken while reading (see data.formats.records) have no id to check.
    def readable(raw):
        return tf.equal(raw["problem"], "")

    def source_id(raw):
        return raw["source_id"]

    dataset = source.raw_dataset(None, False, None).filter(readable).map(source_id)
    ids = []
    for batch in dataset.batch(4096).prefetch(tf.data.AUTOTUNE):
        ids.extend(value.decode("utf-8", errors="surrogateescape") for value in batch.numpy())
    return ids


def describe_missing_ids(missing: Sequence[ImageId], num_checked: int, where: str,
                         annotation_file: str, file_ids: Iterable[ImageId]) -> str:
    """One line: how many ids are not in the annotation file, with a few of each side."""
    shown_file = [repr(i) for _, i in zip(range(_SHOWN), file_ids)]
    return ("%d of %d image ids of %s are not in %s (e.g. %s; the file has ids like %s). "
            "The source ids (TFRecord image/source_id, or the image list's ids) must be "
            "the file's image ids." % (len(missing), num_checked, where, annotation_file,
                                      ", ".join(repr(i) for i in missing[:_SHOWN]),
                                      ", ".join(shown_file) or "none"))


def check_ids_match(image_ids: Sequence[ImageId], annotation_file: str, where: str,
                    file_ids: Mapping[int, ImageId] = None) -> None:
    """Raises ValueError (one line) when any of `image_ids` is not an image of the file.

    Args:
      image_ids: the ids of the images to evaluate, as their source spells them or as int64.
      annotation_file: the COCO ground-truth JSON.
      where: names the images in the message (e.g. the TFRecord pattern).
      file_ids: {int64: id as spelled} of the file, when already read.
    """
    if file_ids is None:
        file_ids = coco_image_ids(read_coco_json(annotation_file), annotation_file)
    numbers = np.array([image_id_to_int64(i) for i in image_ids], np.int64)
    known = np.isin(numbers, np.fromiter(file_ids, np.int64, len(file_ids)))
    if not known.all():
        missing = [image_ids[i] for i in np.flatnonzero(~known)]
        raise ValueError(describe_missing_ids(missing, len(image_ids), where, annotation_file,
                                              file_ids.values()))


def check_source_ids_match(source, annotation_file: str) -> None:
    """Raises ValueError (one line) when some image of `source` is not in `annotation_file`.

    Images of the file that the source lacks are fine (evaluating part of a set).
    """
    files = list(getattr(source, "files", []))
    if files:
        where = ", ".join(files[:2]) + (" and %d more files" % (len(files) - 2)
                                        if len(files) > 2 else "")
    else:
        where = getattr(source, "annotation_file", None) or type(source).__name__
    check_ids_match(source_image_ids(source), annotation_file, where)
