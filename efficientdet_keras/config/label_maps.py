"""Class names of the datasets the released models know, selected by `label_map: <name>`.

A config's label_map is a dict {class id: name}, one of the names below, or null. Ids start
at 1 (0 is background). The COCO map uses the 90 ids of the COCO annotation files, which the
released checkpoints predict: 80 names, with ids such as 12 and 26 left unused.
"""

from typing import Dict, Mapping, Optional, Union

COCO_LABEL_MAP: Dict[int, str] = {
    1: "person", 2: "bicycle", 3: "car", 4: "motorcycle", 5: "airplane", 6: "bus", 7: "train",
    8: "truck", 9: "boat", 10: "traffic light", 11: "fire hydrant", 13: "stop sign",
    14: "parking meter", 15: "bench", 16: "bird", 17: "cat", 18: "dog", 19: "horse",
    20: "sheep", 21: "cow", 22: "elephant", 23: "bear", 24: "zebra", 25: "giraffe",
    27: "backpack", 28: "umbrella", 31: "handbag", 32: "tie", 33: "suitcase", 34: "frisbee",
    35: "skis", 36: "snowboard", 37: "sports ball", 38: "kite", 39: "baseball bat",
    40: "baseball glove", 41: "skateboard", 42: "surfboard", 43: "tennis racket", 44: "bottle",
    46: "wine glass", 47: "cup", 48: "fork", 49: "knife", 50: "spoon", 51: "bowl",
    52: "banana", 53: "apple", 54: "sandwich", 55: "orange", 56: "broccoli", 57: "carrot",
    58: "hot dog", 59: "pizza", 60: "donut", 61: "cake", 62: "chair", 63: "couch",
    64: "potted plant", 65: "bed", 67: "dining table", 70: "toilet", 72: "tv", 73: "laptop",
    74: "mouse", 75: "remote", 76: "keyboard", 77: "cell phone", 78: "microwave", 79: "oven",
    80: "toaster", 81: "sink", 82: "refrigerator", 84: "book", 85: "clock", 86: "vase",
    87: "scissors", 88: "teddy bear", 89: "hair drier", 90: "toothbrush",
}

# The 20 Pascal VOC classes in their usual order.
VOC_LABEL_MAP: Dict[int, str] = {
    1: "aeroplane", 2: "bicycle", 3: "bird", 4: "boat", 5: "bottle", 6: "bus", 7: "car",
    8: "cat", 9: "chair", 10: "cow", 11: "diningtable", 12: "dog", 13: "horse",
    14: "motorbike", 15: "person", 16: "pottedplant", 17: "sheep", 18: "sofa", 19: "train",
    20: "tvmonitor",
}

# The Waymo Open Dataset's 2D detection classes, as the older EfficientDet tools numbered them.
WAYMO_LABEL_MAP: Dict[int, str] = {1: "vehicle", 2: "pedestrian", 3: "cyclist"}

NAMED_LABEL_MAPS: Dict[str, Dict[int, str]] = {
    "coco": COCO_LABEL_MAP, "voc": VOC_LABEL_MAP, "waymo": WAYMO_LABEL_MAP}


def label_names(label_map: Union[Mapping, str, None]) -> Optional[Dict[int, str]]:
    """{class id: name} of a config's label_map value: a dict as it is (ids made int), a
    named map ("coco", "voc", "waymo") looked up, None for None.

    Raises:
      ValueError naming the known maps, for another string.
    """
    if label_map is None:
        return None
    if isinstance(label_map, str):
        if label_map not in NAMED_LABEL_MAPS:
            raise ValueError("label_map %r is not a known map: give one of %s, or a dict "
                             "{class id: name}" % (label_map, ", ".join(sorted(NAMED_LABEL_MAPS))))
        return dict(NAMED_LABEL_MAPS[label_map])
    return {int(k): str(v) for k, v in label_map.items()}
