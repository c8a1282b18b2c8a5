"""Label map files: class ids and names from JSON, YAML or an Object Detection API .pbtxt."""

import re
from typing import Dict, List


def read_label_map_file(path: str) -> Dict[int, str]:
    """{id: name} from a JSON or YAML mapping (or a config file's label_map key), or an
    Object Detection API .pbtxt (`item { id: 1 name: 'cat' }`).

    Raises:
      ValueError naming the file when it cannot be read or is not such a mapping.
    """
    if path.endswith(".pbtxt"):
        with open(path) as f:
            text = f.read()
        items = {}
        for block in re.findall(r"item\s*\{(.*?)\}", text, re.S):
            found_id = re.search(r"\bid\s*:\s*(\d+)", block)
            # The readable display_name when there is one (name is often an id like /m/01g317).
            found_name = (re.search(r"\bdisplay_name\s*:\s*[\"']([^\"']*)[\"']", block) or
                          re.search(r"\bname\s*:\s*[\"']([^\"']*)[\"']", block))
            if found_id and found_name:
                items[int(found_id.group(1))] = found_name.group(1)
        if not items:
            raise ValueError("label map %s holds no `item { id: ... name: ... }` entries" % path)
        return items
    import yaml
    from efficientdet_keras.utils.yaml_files import load_yaml_file
    try:
        data = load_yaml_file(path)  # YAML is a superset of JSON.
    except (OSError, yaml.YAMLError, UnicodeDecodeError) as e:
        # YAML errors span several lines; the tools report errors on one.
        raise ValueError("cannot read label map %s: %s" % (path, " ".join(str(e).split()))) \
            from None
    if isinstance(data, dict) and isinstance(data.get("label_map"), dict):
        data = data["label_map"]
    try:
        if not isinstance(data, dict) or not data:
            raise TypeError
        return {int(k): str(v) for k, v in data.items()}
    except (TypeError, ValueError):
        raise ValueError("label map %s must be a mapping of integer ids to names, e.g. "
                         "{1: cat, 2: dog}" % path) from None


def read_datumaro_labelmap(path: str) -> List[str]:
    """The class names of datumaro's (and CVAT's) VOC labelmap.txt, in its order, without its
    background row: `# label:color_rgb:parts:actions` then `name:r,g,b::` a line."""
    with open(path, encoding="utf-8-sig") as f:
        names = [line.split(":", 1)[0].strip() for line in f
                 if line.strip() and not line.lstrip().startswith("#")]
    return [name for name in names if name and name != "background"]
