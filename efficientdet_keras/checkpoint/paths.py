"""From what users pass as a checkpoint (a prefix, an index file, a folder) to its prefix."""

import os

import tensorflow as tf

from efficientdet_keras.checkpoint.archive import ARCHIVE_JSON, CheckpointArchive


def resolve_checkpoint_path(path: str) -> str:
    """Returns a checkpoint prefix from a prefix, an index file or a directory.

    A directory means its latest checkpoint, except an archive directory (one
    with archive.json, such as <model_dir>/archive), which means its best.

    Raises:
      FileNotFoundError naming the path when it holds no checkpoint.
    """
    if path.endswith(".index"):
        path = path[:-len(".index")]
    if os.path.isdir(path) and os.path.exists(os.path.join(path, ARCHIVE_JSON)):
        best = CheckpointArchive(path).best()
        if best is None:
            raise FileNotFoundError("Archive %s lists no checkpoint yet" % path)
        return best["path"]
    if os.path.isdir(path):
        latest = tf.train.latest_checkpoint(path)
        if latest is None:
            # A directory without a "checkpoint" state file but with one index.
            indices = sorted(f for f in os.listdir(path) if f.endswith(".index"))
            if len(indices) == 1:
                latest = os.path.join(path, indices[0][:-len(".index")])
        if latest is None:
            raise FileNotFoundError("No checkpoint found in directory %s" % path)
        return latest
    if not tf.io.gfile.exists(path + ".index"):
        raise FileNotFoundError("Checkpoint %s does not exist (no %s.index)" % (path, path))
    return path


def run_file_beside(ckpt: str, file_name: str) -> str:
    """The path of a run's `file_name` (config.yaml, classes.json) for one of its checkpoints
    ("" when there is none): in the checkpoint's folder, or above an archive folder
    (<model_dir>/archive)."""
    folder = ckpt if os.path.isdir(ckpt) else os.path.dirname(ckpt)
    candidates = [folder]
    if os.path.exists(os.path.join(folder, ARCHIVE_JSON)):
        candidates.append(os.path.dirname(os.path.abspath(folder)))
    for candidate in candidates:
        if os.path.exists(os.path.join(candidate, file_name)):
            return os.path.join(candidate, file_name)
    return ""
