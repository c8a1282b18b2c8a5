"""One dataset layout as the registry lists it: its names, the tools that write it, how it is
recognised and split, and its two steps, find(path) -> what was found (None: not this layout)
and read(found, options) -> Dataset.

Light to import (--help lists the titles): a layout module imports its readers inside its
find and read.
"""

import dataclasses
import os
from typing import Any, Callable, Optional, Tuple


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    """What a user can say about data that its files do not: the pixel VOC boxes start from
    (0 or 1; None: as `voc_dataset.voc_pairs_dataset` finds it)."""
    voc_origin: Optional[int] = None


@dataclasses.dataclass(frozen=True)
class Found:
    """What a layout's find() found: the dataset's folder or file, the `parts` its read()
    takes (its files, folders or splits), and the files and folders of annotations it
    `claims`: two layouts that claim none of the same are two datasets in one folder."""
    path: str
    parts: Any = None
    claims: Tuple[str, ...] = ()

    def shares_files_with(self, other: "Found") -> bool:
        """Whether the two claim one file, or one claims a folder the other's files are in."""
        def inside(a, b):
            return a == b or a.startswith(b.rstrip(os.sep) + os.sep)
        mine = [os.path.abspath(p) for p in self.claims]
        theirs = [os.path.abspath(p) for p in other.claims]
        return any(inside(a, b) or inside(b, a) for a in mine for b in theirs)


@dataclasses.dataclass(frozen=True)
class Layout:
    """name: the layout's key (`open_dataset(layout=...)`, --data_layout);
    data_format: what the Dataset is read as (`Dataset.format`: several layouts are YOLO);
    title: what describe() and the --data help call it;
    writers, recognised, splits: the data guide's table (Markdown);
    sign: what the refusal line says was looked for, in a few words;
    find(path): the Found that read() takes, None when `path` (a folder or a file) does not hold it;
    read(found, options): the Dataset;
    fallback: read only when no other layout fits, so never another's rival."""
    name: str
    data_format: str
    title: str
    writers: str
    recognised: str
    splits: str
    sign: str
    find: Callable[[str], Optional[Found]]
    read: Callable[[Found, ReadOptions], Any]
    fallback: bool = False
