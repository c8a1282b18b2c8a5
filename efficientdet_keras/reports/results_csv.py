"""model_dir/results.csv: one row per epoch of a training run, and its plots.

Columns: epoch (1-based, as in ckpt-<epoch>), epoch_seconds (wall time of the epoch with its
evaluation and checkpoint), elapsed_seconds (sum over the epochs so far), learning_rate (the
rate of the epoch's last step), the training losses of the Keras logs, then the validation
entries: val_loss (raw weights), the COCO metrics val_AP, val_AP50, ... and the EMA weights'
val_ema_loss, ... An epoch without a COCO evaluation leaves those cells empty. Per-class AP
stays in coco_metrics.json.

    columns, rows = read_results("runs/demo/results.csv")   # rows: [{column: cell text}]
"""

import csv
import io
import os
from typing import Dict, List, Sequence, Tuple

import numpy as np

from efficientdet_keras.reports.plots import plot_results
from efficientdet_keras.utils.fileio import write_text_atomically

RESULTS_CSV = "results.csv"
PLOTS_DIR = "plots"
LEADING_COLUMNS = ("epoch", "epoch_seconds", "elapsed_seconds", "learning_rate")
# Logs keys left out: per-class AP ("val_AP_/<name>"), kept in coco_metrics.json.
_PER_CLASS_PREFIX = "val_AP_/"

Row = Dict[str, str]


def read_results(path: str) -> Tuple[List[str], List[Row]]:
    """(columns, rows) of a results.csv; ([], []) when there is none yet.

    Raises:
      ValueError naming the file when it has no "epoch" column.
    """
    if not os.path.exists(path):
        return [], []
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        columns = list(reader.fieldnames or [])
        rows = [{k: v or "" for k, v in row.items() if k is not None} for row in reader]
    if rows and "epoch" not in columns:
        raise ValueError("%s has no 'epoch' column (columns: %s); move it away to start a "
                         "new one" % (path, ", ".join(columns)))
    return columns, rows


def write_results(path: str, columns: Sequence[str], rows: Sequence[Row]) -> str:
    """Writes rows (missing cells empty) under `columns`, crash-safely; returns `path`."""
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(columns), restval="", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return write_text_atomically(path, text.getvalue())


def format_cell(value) -> str:
    """Seven significant digits: the precision of the float32 values the logs hold."""
    return "%.7g" % float(value)


def epoch_row(epoch: int, seconds: float, elapsed: float, logs: Dict) -> Row:
    """The results.csv row of an epoch (1-based) from its Keras logs (scalars only)."""
    row = {"epoch": str(epoch), "epoch_seconds": "%.1f" % seconds,
           "elapsed_seconds": "%.1f" % elapsed}
    for key, value in logs.items():
        if not key.startswith(_PER_CLASS_PREFIX) and np.ndim(value) == 0:
            row[key] = format_cell(value)
    return row


def merge_row(columns: Sequence[str], rows: Sequence[Row], row: Row) -> Tuple[List[str], List[Row]]:
    """Puts `row` in place of its epoch's row and drops the rows after it.

    A resumed run redoes epochs from its backup: their rows, and any later ones of the
    interrupted run, are replaced as it goes. Columns are the union, earlier ones first.

    Returns:
      (columns, rows) ordered by epoch.
    """
    epoch = int(row["epoch"])
    kept = [r for r in rows if int(r["epoch"]) < epoch] + [row]
    seen = list(columns) + [column for r in kept for column in r]
    merged = [column for column in LEADING_COLUMNS if column in seen]
    for column in seen:
        if column not in merged:
            merged.append(column)
    return merged, kept


class ResultsFile:
    """model_dir/results.csv as a training run fills it, a row per epoch, and its plots
    (model_dir/plots/*.png, when matplotlib is installed: see reports.plots).

    A resumed run keeps the rows before its first epoch. ResultsCallback
    (training.callbacks.results) adds the rows from Keras' hooks.

    Args:
      model_dir: the run directory.
      plots: draw the PNG plots.
    """

    def __init__(self, model_dir: str, plots: bool = True):
        self.path = os.path.join(model_dir, RESULTS_CSV)
        self.plots_dir = os.path.join(model_dir, PLOTS_DIR) if plots else None
        self.columns: List[str] = []
        self.rows: List[Row] = []

    def load(self) -> None:
        """Reads the rows an earlier run wrote (none without a file)."""
        self.columns, self.rows = read_results(self.path)

    def add_epoch(self, epoch: int, seconds: float, logs: Dict) -> None:
        """Writes the row of `epoch` (1-based), which took `seconds`, from its Keras logs in
        place of that epoch's row and those after it (merge_row), then redraws the plots."""
        earlier = [r for r in self.rows if int(r["epoch"]) == epoch - 1]
        elapsed = seconds + (float(earlier[0].get("elapsed_seconds") or 0) if earlier else 0.0)
        self.columns, self.rows = merge_row(self.columns, self.rows,
                                            epoch_row(epoch, seconds, elapsed, logs))
        write_results(self.path, self.columns, self.rows)
        if self.plots_dir:
            plot_results(self.rows, self.plots_dir)
