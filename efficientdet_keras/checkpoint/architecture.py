"""What a checkpoint's variable names and shapes tell about the network that wrote them.

Read to name the model a checkpoint belongs to: in restore errors, and to check that a
downloaded release holds the model it is published as.
"""

import dataclasses
import re
from typing import List, Mapping, Optional

from efficientdet_keras.checkpoint.names import EMA_SUFFIX

# Scopes of the released layout.
_BACKBONE_SCOPE = re.compile(r"^(efficientnet-(?:b|lite)\d+)/")
_FPN_CELL = re.compile(r"^fpn_cells/cell_(\d+)/")
_CLASS_HEAD_REPEAT = re.compile(r"^class_net/class-(\d+)/")
_FPN_BN_BETA = re.compile(r"^fpn_cells/cell_0/.*/bn/beta$")
_DETECTOR_SCOPES = ("fpn_cells/", "resample_p", "class_net/", "box_net/")


@dataclasses.dataclass(frozen=True)
class Architecture:
    """What variable names and shapes tell about the network that has them.

    backbone: the EfficientNet scope ("efficientnet-b1", "efficientnet-lite0") or None.
    fpn_num_filters: channels of the BiFPN (None without BiFPN variables).
    fpn_cell_repeats, box_class_repeats: counts of fpn_cells/cell_<i> and class_net/class-<i>.
    has_detector_parts: any BiFPN, extra level or head variable at all.
    """
    backbone: Optional[str]
    fpn_num_filters: Optional[int]
    fpn_cell_repeats: int
    box_class_repeats: int
    has_detector_parts: bool

    @property
    def backbone_only(self) -> bool:
        """An EfficientNet classification checkpoint (or any backbone without detector parts)."""
        return self.backbone is not None and not self.has_detector_parts

    def family_names(self) -> List[str]:
        """The EfficientDet models (config.MODEL_NAMES) with this architecture."""
        from efficientdet_keras.config import MODEL_NAMES, get_efficientdet_config
        names = []
        for name in MODEL_NAMES:
            config = get_efficientdet_config(name)
            if (config.backbone_name, config.fpn_num_filters, config.fpn_cell_repeats,
                    config.box_class_repeats) == (self.backbone, self.fpn_num_filters,
                                                  self.fpn_cell_repeats, self.box_class_repeats):
                names.append(name)
        return names

    def describe(self) -> str:
        """E.g. "efficientdet-d1 (efficientnet-b1 backbone, 4 BiFPN cells of 88 filters, 3 head
        repeats)" or "an EfficientNet-b0 classification checkpoint"."""
        if self.backbone_only:
            return "an EfficientNet-%s classification checkpoint" % self.backbone.split("-", 1)[1]
        if not self.has_detector_parts:
            return "no EfficientDet or EfficientNet model"
        parts = "%s backbone, %d BiFPN cells of %s filters, %d head repeats" % (
            self.backbone or "unknown", self.fpn_cell_repeats, self.fpn_num_filters,
            self.box_class_repeats)
        names = self.family_names()
        return "%s (%s)" % (" or ".join(names) if names else "an unlisted EfficientDet variant",
                            parts)


def infer_architecture(shapes: Mapping[str, list]) -> Architecture:
    """Reads an Architecture from {name: shape}: checkpoint keys or a model's variables."""
    names = sorted(name for name in shapes if not name.endswith(EMA_SUFFIX))
    backbones = sorted({m.group(1) for m in map(_BACKBONE_SCOPE.match, names) if m})
    cells = {m.group(1) for m in map(_FPN_CELL.match, names) if m}
    head_repeats = {m.group(1) for m in map(_CLASS_HEAD_REPEAT.match, names) if m}
    fpn_filters = next((list(shapes[n])[0] for n in names if _FPN_BN_BETA.match(n)), None)
    return Architecture(
        backbone=backbones[0] if len(backbones) == 1 else None,
        fpn_num_filters=fpn_filters, fpn_cell_repeats=len(cells),
        box_class_repeats=len(head_repeats),
        has_detector_parts=any(n.startswith(_DETECTOR_SCOPES) for n in names))
