"""YAML from files someone else wrote (a dataset's data.yaml, a label map, an hparams file),
read safely and within bounds.

`yaml.safe_load` builds no objects, but it does expand aliases: a few lines of nested anchors
(a "billion laughs" file) stand for billions of list items, which a reader walking the result
never finishes. `load_yaml_file` refuses a file over MAX_YAML_BYTES, or one whose aliases
would expand it past MAX_EXPANDED_NODES or refer to themselves, in one line naming the file.
"""

import os
from typing import Any, Dict

import yaml

MAX_YAML_BYTES = 16 * 1024 * 1024
# Nodes the document would have with every alias written out: far above any dataset's or
# config's (COCO's 80 names are ~80 nodes), far below what takes a machine down.
MAX_EXPANDED_NODES = 1_000_000


class YamlOutOfBounds(ValueError):
    """A YAML file too large, or whose aliases expand too far."""


def load_yaml_file(path: str) -> Any:
    """The content of a YAML file (None when empty), as yaml.safe_load gives it.

    Raises:
      OSError as open() does; yaml.YAMLError for malformed YAML; UnicodeDecodeError for a
      file that is not UTF-8; YamlOutOfBounds naming the file for one out of bounds.
    """
    size = os.path.getsize(path)
    if size > MAX_YAML_BYTES:
        raise YamlOutOfBounds("%s is %d MB, more than a YAML file of settings or classes "
                              "(%d MB at most)" % (path, size // 2**20, MAX_YAML_BYTES // 2**20))
    with open(path, encoding="utf-8-sig") as f:
        loader = yaml.SafeLoader(f)
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            _check_expanded_size(path, node)
            return loader.construct_document(node)
        finally:
            loader.dispose()


def _check_expanded_size(path: str, root: yaml.Node) -> None:
    """Counts the nodes the document has with its aliases expanded (each shared node once
    per use), without expanding them."""
    sizes: Dict[int, int] = {}
    in_progress = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in in_progress:
            raise YamlOutOfBounds("%s: an alias refers to a node that contains it" % path)
        in_progress.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(child) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(k) + size(v) for k, v in node.value)
        in_progress.discard(key)
        sizes[key] = total
        if total > MAX_EXPANDED_NODES:
            raise YamlOutOfBounds("%s: its aliases expand it to more than %d items (a YAML "
                                  "alias bomb?); write the values out" % (path, MAX_EXPANDED_NODES))
        return total

    size(root)
