"""matplotlib figures drawn off screen and saved as PNG, with matplotlib optional.

matplotlib comes with the `reports` extra. Callers ask `matplotlib_available` first, which
logs once per process when it is missing. Figures use matplotlib's object API (no pyplot),
so no global backend is set and nothing is shown on screen.

    if matplotlib_available():
        figure = new_figure(panels=2)
        left, right = figure.subplots(1, 2)
        ...
        save_figure(figure, "runs/demo/plots/chart.png")
"""

import io
import os

from absl import logging

from efficientdet_keras.utils.fileio import write_bytes_atomically

_MISSING_NOTE_LOGGED = []  # Non-empty once the "no matplotlib" note was logged.
# Figure size in inches at 100 dpi.
_PANEL_SIZE = (5.0, 3.6)


def matplotlib_available() -> bool:
    """Whether matplotlib imports; without it, logs one note per process."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        if not _MISSING_NOTE_LOGGED:
            logging.info("matplotlib is not installed: run plots and precision-recall curves "
                         "are skipped (pip install 'efficientdet_keras[reports]' to get them)")
            _MISSING_NOTE_LOGGED.append(True)
        return False
    return True


def new_figure(panels: int = 1):
    """A matplotlib Figure of `panels` side-by-side panels' size (call matplotlib_available
    first)."""
    from matplotlib.figure import Figure
    return Figure(figsize=(_PANEL_SIZE[0] * panels, _PANEL_SIZE[1]), dpi=100,
                  layout="constrained")


def save_figure(figure, path: str) -> str:
    """Writes a figure as PNG, crash-safely; returns `path`."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    return write_bytes_atomically(path, buffer.getvalue())
