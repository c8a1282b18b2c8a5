"""The images under a dataset folder, by file name: how a reader finds an image that its
annotation names by a path that is not where the export put it (an absolute path on the
labelling machine, Label Studio's `../../upload/...`, an `images/` or `data/` folder the
annotations do not mention).

Only the dataset's own folder is searched, never above it: a file of the same name elsewhere on
the disk is another image.
"""

import os
from typing import Dict, Iterable, List, Optional

from efficientdet_keras.data.formats.image_header import IMAGE_EXTENSIONS

# Folders deeper than this below the dataset folder are not searched: exports put their images
# one or two levels down (data/, images/train/, train/images/).
MAX_DEPTH = 3


class ImageIndex:
    """{file name: [paths]} of the image files in `root` and its folders, listed on first use."""

    def __init__(self, root: str):
        self.root = os.path.abspath(root)
        self._by_name: Optional[Dict[str, List[str]]] = None
        self._by_stem: Dict[str, List[str]] = {}

    def paths(self, name: str) -> List[str]:
        """The images under the root whose file name is `name`'s last part, nearest first."""
        self._list()
        base = os.path.basename(str(name).replace("\\", "/"))
        return self._by_name.get(base, [])

    def image_for_stem(self, stem: str, near: str) -> Optional[str]:
        """The image named `stem` with any image extension (the layouts whose label files
        name their image only by their own name: KITTI), the one nearest `near` first."""
        self._list()
        return _nearest(self._by_stem.get(stem, []), near)

    def _list(self):
        if self._by_name is None:
            self._by_name = _list_images(self.root)
            for name, paths in self._by_name.items():
                self._by_stem.setdefault(os.path.splitext(name)[0], []).extend(paths)

    def folder_holding(self, names: Iterable[str]) -> Optional[str]:
        """The folder that holds the most of `names` (by file name), None when none does."""
        counts: Dict[str, int] = {}
        for name in names:
            for path in self.paths(name)[:1]:
                folder = os.path.dirname(path)
                counts[folder] = counts.get(folder, 0) + 1
        if not counts:
            return None
        return max(counts, key=lambda folder: (counts[folder], -folder.count(os.sep)))

    def resolve(self, named: str, near: str) -> Optional[str]:
        """The file an annotation names: `named` itself (absolute, or relative to `near`) when
        it exists, else the image of that file name under the root, the one in `near` first."""
        path = os.path.join(near, str(named).replace("\\", "/"))
        if os.path.isfile(path):
            return path
        return _nearest(self.paths(named), near)


def _nearest(candidates: List[str], near: str) -> Optional[str]:
    """The candidate sharing the longest folder path with `near` (the first of equals)."""
    if not candidates:
        return None
    near = os.path.abspath(near)
    return max(candidates, key=lambda p: len(os.path.commonpath([p, near])))


def _list_images(root: str) -> Dict[str, List[str]]:
    by_name: Dict[str, List[str]] = {}
    for folder, subfolders, files in os.walk(root):
        depth = os.path.relpath(folder, root).count(os.sep) + (folder != root)
        subfolders[:] = sorted(d for d in subfolders if not d.startswith(".")) \
            if depth < MAX_DEPTH else []
        for name in sorted(files):
            if name.lower().endswith(IMAGE_EXTENSIONS):
                by_name.setdefault(name, []).append(os.path.join(folder, name))
    return by_name
