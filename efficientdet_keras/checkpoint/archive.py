"""Keeping the best k checkpoints by an evaluation metric, crash-safely.

Layout of `<model_dir>/archive/`:
  ckpt-<epoch>.index, ckpt-<epoch>.data-00000-of-00001   copies of the best checkpoints
  archive.json   {"monitor": "AP", "mode": "max", "checkpoints": [best first, each with
                  name, epoch, the monitored value and all metrics]}

Files are copied under temporary names, fsynced and renamed (data before index,
see fileio.write_files_atomically); the JSON is replaced the same way, and only
then are evicted checkpoints deleted. A
crash at any point leaves every checkpoint listed in archive.json complete.
The trainer's archiving callback and `efficientdet-eval --continuous` (or
`efficientdet-train --mode=eval`) share one archive per model_dir, so both rank
by the same key, ARCHIVE_MONITOR ("AP"): the trainer's callback translates its
Keras log names (val_AP, val_AP50, ...) to the evaluator's (AP, AP50, ...).
An archive.json ranked by another key or mode is an error naming the file.
"""

import glob
import json
import os
import shutil
from typing import Dict, List, Optional

from absl import logging

from efficientdet_keras.utils.fileio import write_files_atomically, write_json_atomically

ARCHIVE_JSON = "archive.json"
# The metric every writer of <model_dir>/archive ranks by (COCO AP of the EMA weights).
ARCHIVE_MONITOR = "AP"
# The files of a checkpoint written by save_ckpt, in the order they are made visible.
CHECKPOINT_SUFFIXES = (".data-00000-of-00001", ".index")


class CheckpointArchive:
    """The best `keep` checkpoints of a run by `monitor` (a key of the metrics dict).

    Args:
      archive_dir: usually <model_dir>/archive; created when needed.
      keep: how many checkpoints to keep.
      monitor: the metric that ranks them (a key of the metrics given to `consider`).
      mode: "max" (higher is better) or "min".
    """

    def __init__(self, archive_dir: str, keep: int = 3, monitor: str = ARCHIVE_MONITOR,
                 mode: str = "max"):
        if mode not in ("max", "min"):
            raise ValueError("mode must be 'max' or 'min', got %r" % mode)
        if keep < 1:
            raise ValueError("keep must be at least 1, got %d" % keep)
        self.archive_dir = archive_dir
        self.keep, self.monitor, self.mode = keep, monitor, mode

    @property
    def json_path(self) -> str:
        return os.path.join(self.archive_dir, ARCHIVE_JSON)

    def entries(self) -> List[Dict]:
        """Archived checkpoints, best first (empty when there is no archive yet).

        Raises:
          ValueError naming archive.json when it ranks by another metric or mode.
        """
        if not os.path.exists(self.json_path):
            return []
        with open(self.json_path) as f:
            data = json.load(f)
        if data.get("monitor") == "val_" + self.monitor:
            data = _from_keras_log_names(data)  # Written by the trainer of version 0.1.
        if (data.get("monitor"), data.get("mode")) != (self.monitor, self.mode):
            raise ValueError("%s ranks checkpoints by %r (%s) but this run ranks by %r (%s); "
                             "move that archive away or rank by the same metric"
                             % (self.json_path, data.get("monitor"), data.get("mode"),
                                self.monitor, self.mode))
        return data["checkpoints"]

    def best(self) -> Optional[Dict]:
        """The best entry, with "path" set to its checkpoint prefix; None when empty."""
        entries = self.entries()
        if not entries:
            return None
        return dict(entries[0], path=os.path.join(self.archive_dir, entries[0]["name"]))

    def _rank_key(self, entry: Dict):
        """Best first; at an equal metric the later epoch first, as the reference's archive
        keeps the newer checkpoint (it has trained longer for the same score)."""
        value = float(entry[self.monitor])
        return (-value if self.mode == "max" else value, -int(entry["epoch"]))

    def consider(self, checkpoint_prefix: str, epoch: int, metrics: Dict[str, float]) -> bool:
        """Archives the checkpoint when it ranks among the best `keep` (a tie with an archived
        one ranks it above the older); returns whether it did.

        Raises:
          KeyError naming the monitored metric when `metrics` lacks it.
        """
        if self.monitor not in metrics:
            raise KeyError("Metric %r to rank checkpoints by is not among %s"
                           % (self.monitor, sorted(metrics)))
        name = "ckpt-%d" % epoch
        entry = {"name": name, "epoch": int(epoch), self.monitor: float(metrics[self.monitor]),
                 "metrics": {k: float(v) for k, v in metrics.items()}}
        current = [e for e in self.entries() if e["name"] != name]
        ranked = sorted(current + [entry], key=self._rank_key)
        kept = ranked[:self.keep]
        if entry not in kept:
            return False
        os.makedirs(self.archive_dir, exist_ok=True)
        copy_checkpoint(checkpoint_prefix, os.path.join(self.archive_dir, name))
        self._write_json(kept)
        for evicted in ranked[self.keep:]:
            for path in glob.glob(os.path.join(self.archive_dir, evicted["name"] + ".*")):
                os.remove(path)
        logging.info("Archived %s (%s=%.4f) in %s", name, self.monitor, entry[self.monitor],
                     self.archive_dir)
        return True

    def _write_json(self, entries: List[Dict]) -> None:
        write_json_atomically(self.json_path, {"monitor": self.monitor, "mode": self.mode,
                                               "checkpoints": entries})


def copy_checkpoint(source_prefix: str, target_prefix: str, hard_link: bool = False) -> str:
    """Copies a checkpoint's files to `target_prefix`; the index appears last, after its data.

    Args:
      hard_link: link the files (os.link) instead of copying, falling back to a copy where
        the filesystem cannot. Safe because checkpoints are never changed in place (a new
        one replaces the files by rename), and a link outlives the removal of its source.

    Returns `target_prefix`. Raises FileNotFoundError naming the source without an index.
    """
    data_files = sorted(glob.glob(glob.escape(source_prefix) + ".data-*"))
    if not os.path.exists(source_prefix + ".index"):
        raise FileNotFoundError("Checkpoint %s does not exist (no .index file)" % source_prefix)
    suffixes = [path[len(source_prefix):] for path in data_files] + [".index"]

    def copy_or_link(source: str, target: str) -> None:
        if hard_link:
            try:
                os.link(source, target)
                return
            except OSError:  # Another filesystem, or one without hard links.
                pass
        shutil.copyfile(source, target)

    def produce(temp_prefix: str) -> None:
        for suffix in suffixes:
            copy_or_link(source_prefix + suffix, temp_prefix + suffix)

    write_files_atomically(target_prefix, suffixes, produce)
    return target_prefix


def _from_keras_log_names(data: Dict) -> Dict:
    """An archive.json ranked by a Keras log name ("val_AP") in the evaluator's names ("AP")."""
    def strip(name):
        return name[len("val_"):] if name.startswith("val_") else name
    entries = []
    for entry in data["checkpoints"]:
        renamed = {strip(k): v for k, v in entry.items() if k != "metrics"}
        # Keras logs mix training losses in; the archive keeps the validation metrics.
        renamed["metrics"] = {strip(k): v for k, v in entry.get("metrics", {}).items()
                              if k.startswith("val_")}
        entries.append(renamed)
    return dict(data, monitor=strip(data["monitor"]), checkpoints=entries)
