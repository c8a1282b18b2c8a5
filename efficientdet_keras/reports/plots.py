"""PNG plots of the rows of a run's results.csv: losses, AP and AP50, learning rate.

matplotlib is optional (the `reports` extra): without it `plot_results` writes nothing
(see `utils.figures`).

    columns, rows = read_results("runs/demo/results.csv")
    plot_results(rows, "runs/demo/plots")
    # -> runs/demo/plots/losses.png, ap.png, learning_rate.png
"""

import os
from typing import Dict, List, Optional, Sequence, Tuple

from efficientdet_keras.utils.figures import matplotlib_available, new_figure, save_figure

# (panel title, [(results.csv column, line label)]) of losses.png: the raw weights' training
# and validation loss, and the EMA weights' validation loss (the weights val_AP measures).
LOSS_PANELS = [(name, [(name, "train"), ("val_" + name, "val"), ("val_ema_" + name, "val EMA")])
               for name in ("loss", "cls_loss", "box_loss")]
AP_LINES = [("val_AP", "AP"), ("val_AP50", "AP50")]
LEARNING_RATE_LINES = [("learning_rate", "learning rate")]


def column_series(rows: Sequence[Dict[str, str]], column: str) -> Tuple[List[int], List[float]]:
    """(epochs, values) of the rows whose `column` cell is filled (not evaluated: empty)."""
    epochs, values = [], []
    for row in rows:
        cell = row.get(column, "")
        if cell != "":
            epochs.append(int(row["epoch"]))
            values.append(float(cell))
    return epochs, values


def _draw_panel(axes, rows, title: str, lines: Sequence[Tuple[str, str]]) -> bool:
    """Draws one line per column that has values; returns whether any had."""
    drawn = False
    for column, label in lines:
        epochs, values = column_series(rows, column)
        if epochs:
            axes.plot(epochs, values, marker="o", markersize=3, label=label)
            drawn = True
    axes.set_title(title)
    axes.set_xlabel("epoch")
    axes.xaxis.get_major_locator().set_params(integer=True)  # Epochs, not 1.25.
    axes.grid(True, alpha=0.3)
    if drawn:
        axes.legend(fontsize="small")
    return drawn


def _plot_panels(rows, panels, path: str) -> Optional[str]:
    """One PNG of side-by-side panels; None (nothing written) when no panel has data."""
    figure = new_figure(len(panels))
    axes = figure.subplots(1, len(panels), squeeze=False)[0]
    drawn = [_draw_panel(ax, rows, title, lines) for ax, (title, lines) in zip(axes, panels)]
    return save_figure(figure, path) if any(drawn) else None


def plot_results(rows: Sequence[Dict[str, str]], plots_dir: str) -> List[str]:
    """Draws losses.png, ap.png and learning_rate.png of results.csv rows into `plots_dir`.

    `rows` are {column: cell text} with an "epoch" column (`results_csv.read_results`).
    A plot whose columns are all empty (ap.png before the first COCO evaluation) is not
    written. Returns the paths written: none without matplotlib.
    """
    if not matplotlib_available():
        return []
    plots = [("losses.png", LOSS_PANELS),
             ("ap.png", [("COCO AP (EMA weights)", AP_LINES)]),
             ("learning_rate.png", [("learning rate", LEARNING_RATE_LINES)])]
    written = [_plot_panels(rows, panels, os.path.join(plots_dir, name)) for name, panels in plots]
    return [path for path in written if path]
