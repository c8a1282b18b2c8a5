"""Mistakes in a dataset that reading cannot see one record at a time: the same image in two
splits (an evaluation that measures memory, not learning), classes that only one split has
or no box uses, class names that differ only in case or spacing or appear twice, and boxes given twice.

    for line in dataset_warnings(classes.names, {"train": records, "val": val_records}):
        print("  warning:", line)
"""

import collections
import hashlib
import os
from typing import Dict, List, Sequence

import numpy as np

from efficientdet_keras.data.formats.image_header import IMAGE_EXTENSIONS
from efficientdet_keras.data.formats.records import ImageRecord

# Shared images named in a warning; the count says how many more there are.
_NAMED = 3


def dataset_warnings(names: Dict[int, str], splits: Dict[str, Sequence[ImageRecord]],
                     folders_listed_whole: bool = False) -> List[str]:
    """One line per mistake found among the classes ({model id: name}) and the splits'
    records ({split: records}, two splits or more for the checks across splits).

    folders_listed_whole: the layout lists every image of its image folders (COCO JSON), so
      an image file no split reads there is a mistake, not another task's image (VOC's).
    """
    return (_name_warnings(names) + _shared_image_warnings(splits) +
            _class_presence_warnings(names, splits) + _duplicate_box_warnings(splits) +
            (_unread_image_warnings(splits) if folders_listed_whole else []))


def _name_warnings(names: Dict[int, str]) -> List[str]:
    by_key = collections.defaultdict(list)
    for class_id in sorted(names):
        by_key[" ".join(str(names[class_id]).split()).lower()].append(class_id)
    warnings = []
    for ids in by_key.values():
        spelled = [names[k] for k in ids]
        if len(ids) < 2:
            continue
        if len(set(spelled)) == 1:
            warnings.append("class name %r is given to ids %s: their boxes are one class to a "
                            "reader, two to the model" % (spelled[0], ", ".join(map(str, ids))))
        else:
            warnings.append("class names %s differ only in case or spacing (ids %s): one class "
                            "labelled two ways?" % (", ".join(repr(n) for n in spelled),
                                                     ", ".join(map(str, ids))))
    return warnings


def _shared_image_warnings(splits: Dict[str, Sequence[ImageRecord]]) -> List[str]:
    """A split that lists the very images of another (a data.yaml whose val is its train
    folder); else images in two splits: the same file, or files with the same bytes (compared
    only where sizes match, so that a large dataset is not read whole)."""
    files = {split: {os.path.realpath(r.path) for r in records}
             for split, records in splits.items() if records}
    order = list(files)
    same = [(a, b) for i, a in enumerate(order) for b in order[i + 1:] if files[a] == files[b]]
    if same:
        return ["the %s split is the %s split (the same %d images): evaluation then scores "
                "the images the model trained on" % (b, a, len(files[a])) for a, b in same]
    by_size = collections.defaultdict(dict)  # {size: {(device, inode): (split, path)}}
    for split, records in splits.items():
        for record in records:
            try:
                stat = os.stat(record.path)
            except OSError:
                continue  # A missing image is the pipeline's to name.
            same_file = by_size[stat.st_size].setdefault((stat.st_dev, stat.st_ino), {})
            same_file.setdefault(split, record.path)
    shared = collections.defaultdict(list)
    for files in by_size.values():
        if len({split for by_split in files.values() for split in by_split}) < 2:
            continue
        by_content = collections.defaultdict(dict)
        for by_split in files.values():
            content = by_content[_file_hash(next(iter(by_split.values())))]
            for split, path in by_split.items():
                content.setdefault(split, path)
        for group in by_content.values():
            if len(group) > 1:
                shared[tuple(sorted(group))].append(sorted(group.values())[0])
    return ["%d images are in %s (the same file or the same bytes), such as %s: evaluation "
            "then scores images the model trained on" % (
                len(paths), " and ".join(key), ", ".join(os.path.basename(p)
                                                        for p in sorted(paths)[:_NAMED]))
            for key, paths in sorted(shared.items())]


def _file_hash(path: str) -> str:
    digest = hashlib.sha1()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _class_presence_warnings(names: Dict[int, str],
                             splits: Dict[str, Sequence[ImageRecord]]) -> List[str]:
    """Classes with boxes in some splits only, and classes no box uses (a repeated category,
    a label map longer than the data): the model learns those as background."""
    if not splits:
        return []
    present = {split: {int(c) for r in records for c in r.classes}
               for split, records in splits.items()}
    warnings, unused = [], []
    for class_id in sorted(names):
        having = [split for split in splits if class_id in present[split]]
        if not having:
            unused.append(class_id)
        elif len(having) < len(splits):
            lacking = [split for split in splits if split not in having]
            warnings.append("class %r has boxes in %s but none in %s" % (
                names[class_id], " and ".join(having), " and ".join(lacking)))
    if unused:
        shown = ", ".join("%r (id %d)" % (names[k], k) for k in unused[:_NAMED * 4])
        warnings.append("%d classes have no box in %s: %s%s" % (
            len(unused), " or ".join(splits), shown, ", ..." if len(unused) > _NAMED * 4 else ""))
    return warnings


def _duplicate_box_warnings(splits: Dict[str, Sequence[ImageRecord]]) -> List[str]:
    warnings = []
    for split, records in splits.items():
        twice, images = 0, 0
        for record in records:
            if len(record.classes) < 2:
                continue
            rows = np.concatenate([np.round(np.asarray(record.boxes, np.float64), 3),
                                   np.asarray(record.classes, np.float64)[:, None]], axis=1)
            extra = len(rows) - len(set(map(tuple, rows.tolist())))
            if extra:
                twice, images = twice + extra, images + 1
        if twice:
            warnings.append("%s: %d boxes repeat another box of the same class in the same "
                            "image (%d images); a duplicated label line or annotation?"
                            % (split, twice, images))
    return warnings


def _unread_image_warnings(splits: Dict[str, Sequence[ImageRecord]]) -> List[str]:
    """Image files beside the images the splits read that no split reads: left out of a COCO
    file (an image without objects needs an entry with no annotations), or skipped above."""
    read = collections.defaultdict(set)
    for records in splits.values():
        for record in records:
            if "://" not in record.path:
                folder, name = os.path.split(os.path.normpath(record.path))
                read[folder].add(name)
    warnings = []
    for folder in sorted(read):
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        unread = sorted(n for n in names if n.lower().endswith(IMAGE_EXTENSIONS)
                        and n not in read[folder] and os.path.isfile(os.path.join(folder, n)))
        if unread:
            warnings.append("%d image files in %s are read by no split, such as %s: not trained "
                            "on nor evaluated (an image without objects needs an images entry "
                            "with no annotations)" % (len(unread), folder,
                                                      ", ".join(unread[:_NAMED])))
    return warnings
