"""The published checkpoints the package fetches by name: the registry, and name lookup.

Where the addresses come from:
- COCO detectors: the checkpoint tables of the EfficientDet README (google/automl,
  efficientdet/README.md). D0-D7x are the "coco2" releases, whose AP that table lists;
  Lite0-Lite4 the "coco" Lite releases (.tgz). The table's Lite3x link reads
  "efficientdet-lite3x..gz"; the registry uses "efficientdet-lite3x.tgz", the name its
  siblings follow.
- ImageNet backbones: the EfficientNet README (tensorflow/tpu, models/official/efficientnet):
  b0-b7 trained with AutoAugment ("ckptsaug", the ones the EfficientDet recipe starts from) and
  lite0-lite4 ("lite").

Checksums: none is published for any of these archives, and none can be taken here (no
network), so `sha256` is None. In its place every archive is checked for what it claims to
be: it must unpack to the listed folder, hold a name-based checkpoint, and its variable names
and shapes must be those of the named model (`checkpoint.architecture`). The digest of each
downloaded archive is kept beside it in the cache (download.py), so a mirror can be compared,
and an organisation can pin the digests of the archives it mirrors (digests.py).
"""

import dataclasses
import os
from typing import Dict, Optional

DEFAULT_BASE_URL = "https://storage.googleapis.com/cloud-tpu-checkpoints"
DETECTOR, BACKBONE = "detector", "backbone"


@dataclasses.dataclass(frozen=True)
class ReleasedCheckpoint:
    """One published checkpoint archive.

    name: what users pass ("efficientdet-d0", "efficientnet-b0").
    path: the archive below the base address ("efficientdet/coco2/efficientdet-d0.tar.gz").
    unpacks_to: the folder the archive holds ("efficientdet-d0").
    kind: DETECTOR (a whole COCO detector) or BACKBONE (an ImageNet EfficientNet).
    model_name: the EfficientDet model a detector is (its config), or the backbone's name.
    label_map: the built-in class names of a detector's classes (config.label_maps).
    sha256: the archive's digest, None where none is published.
    """
    name: str
    path: str
    unpacks_to: str
    kind: str
    model_name: str
    label_map: Optional[str] = None
    sha256: Optional[str] = None

    @property
    def file_name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


def _detector(name: str, folder: str, suffix: str) -> ReleasedCheckpoint:
    return ReleasedCheckpoint(name, "efficientdet/%s/%s%s" % (folder, name, suffix), name,
                              DETECTOR, name, label_map="coco")


def _backbone(name: str, folder: str) -> ReleasedCheckpoint:
    return ReleasedCheckpoint(name, "efficientnet/%s/%s.tar.gz" % (folder, name), name,
                              BACKBONE, name)


RELEASED_CHECKPOINTS: Dict[str, ReleasedCheckpoint] = {entry.name: entry for entry in (
    *(_detector("efficientdet-d%s" % d, "coco2", ".tar.gz")
      for d in ("0", "1", "2", "3", "4", "5", "6", "7", "7x")),
    *(_detector("efficientdet-lite%s" % d, "coco", ".tgz")
      for d in ("0", "1", "2", "3", "3x", "4")),
    *(_backbone("efficientnet-b%d" % b, "ckptsaug") for b in range(8)),
    *(_backbone("efficientnet-lite%d" % b, "lite") for b in range(5)),
)}


def find_released(name_or_path) -> Optional[ReleasedCheckpoint]:
    """The registry entry `name_or_path` names; None when it names none, or when a file or
    folder of that name exists (a path always wins over a name)."""
    if not isinstance(name_or_path, str) or name_or_path not in RELEASED_CHECKPOINTS:
        return None
    if os.path.exists(name_or_path) or os.path.exists(name_or_path + ".index"):
        return None
    return RELEASED_CHECKPOINTS[name_or_path]
