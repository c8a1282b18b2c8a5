"""The values every EfficientDet model starts from (the COCO training recipe), as plain data.

They are the defaults of the key table (keys/). `family.default_config()` wraps them in a
Config; `Config.from_yaml` fills in from them the keys a saved config lacks.
"""

import copy
from typing import Any, Dict

from efficientdet_keras.config.keys import CONFIG_KEYS


def default_values() -> Dict[str, Any]:
    """A fresh nested dict of the defaults shared by every model (no Config, no sharing):
    "nms_configs.method" becomes {"nms_configs": {"method": ...}}."""
    values: Dict[str, Any] = {}
    for row in CONFIG_KEYS:
        *groups, leaf = row.name.split(".")
        node = values
        for group in groups:
            node = node.setdefault(group, {})
        node[leaf] = copy.deepcopy(row.default)
    return values
