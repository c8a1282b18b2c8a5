"""Crash-safe file writes shared by the evaluator, callbacks, archive and tools."""

import json
import os


def write_json_atomically(path: str, data, indent: int = 1) -> None:
    """Writes JSON to a temporary file and renames it: readers never see half a file."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=indent)
    os.replace(tmp, path)
