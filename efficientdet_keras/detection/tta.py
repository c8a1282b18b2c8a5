"""Test-time augmentation by a horizontal flip: a model sees the image and its mirror image,
and the two sets of detections, the second mirrored back, are fused into one by weighted box
fusion (wbf.py), as the reference implementation merges its flip augmentation.
"""

from typing import Dict, Optional

import numpy as np

from efficientdet_keras.detection.wbf import WBF_IOU_THRESHOLD, fuse_detections

# Values of the config key tta (and the Detector's tta argument): None or "" is no
# augmentation.
TTA_MODES = (None, "", "flip")


def check_tta(tta) -> Optional[str]:
    """`tta` if it is a known mode ("flip") or None for none; a one-line ValueError else."""
    if tta not in TTA_MODES:
        raise ValueError("tta must be flip or null (none), got %r" % (tta,))
    return tta or None


def mirror_boxes(boxes: np.ndarray, width: float) -> np.ndarray:
    """Boxes [n, 4] (ymin, xmin, ymax, xmax) of a mirrored image of `width`, in the unmirrored
    image: x becomes width - x (and xmin and xmax swap)."""
    boxes = np.asarray(boxes, np.float32).reshape(-1, 4)
    return np.stack([boxes[:, 0], width - boxes[:, 3], boxes[:, 2], width - boxes[:, 1]], -1)


def merge_flipped(found: Dict[str, np.ndarray], found_in_mirror: Dict[str, np.ndarray],
                  width: float, max_detections: Optional[int] = None,
                  iou_threshold: float = WBF_IOU_THRESHOLD) -> Dict[str, np.ndarray]:
    """The detections of an image (dict of "boxes", "scores", "classes") fused with those of
    its mirror image (boxes in the mirror's coordinates; `width` is the images' width in
    the same units), best first, at most `max_detections`."""
    mirrored = dict(found_in_mirror, boxes=mirror_boxes(found_in_mirror["boxes"], width))
    fused = fuse_detections([found, mirrored], iou_threshold)
    return {key: value[:max_detections] for key, value in fused.items()}
