"""A progress bar for work that would otherwise run in silence: items done and items per second.

Built on `keras.utils.Progbar`. On a terminal it redraws one line in place; when stdout is
a log file or a pipe (training under nohup, CI) it prints a single line at the end, so logs
stay readable:

    bar = ProgressBar(len(records), unit_name="image")
    for i, record in enumerate(records, 1):
        ...
        bar.update(i)
    bar.finish()   # the final line, also when the total was unknown or not reached
"""

import sys
import time
from typing import Optional

import tf_keras as keras


class ProgressBar:
    """Counts items (images, records) and shows their rate as "<unit>s/s".

    Args:
      target: the number of items expected, or None when unknown (a TFRecord count).
      unit_name: what an item is ("image", "record").
      verbose: Progbar verbosity; default 1 on a terminal, else 2 (one line at the end).
    """

    def __init__(self, target: Optional[int], unit_name: str = "image",
                 verbose: Optional[int] = None):
        if verbose is None:
            verbose = 1 if sys.stdout.isatty() else 2
        self.rate_name = "%ss/s" % unit_name
        self._bar = keras.utils.Progbar(target, verbose=verbose, unit_name=unit_name,
                                        stateful_metrics=[self.rate_name])
        self._start = time.perf_counter()
        self._finished = False
        self.count = 0

    @property
    def rate(self) -> float:
        """Items per second since the bar was made."""
        return self.count / max(time.perf_counter() - self._start, 1e-9)

    def update(self, count: int) -> None:
        """Sets the number of items done so far."""
        self.count = int(count)
        target = self._bar.target
        self._finished = target is not None and self.count >= target
        self._bar.update(self.count, values=[(self.rate_name, self.rate)])

    def finish(self) -> None:
        """Prints the final line unless `update` already reached the target. With an unknown
        or unreached target the count becomes the target; nothing is printed for 0 items."""
        if self._finished or self.count == 0:
            return
        self._finished = True
        self._bar.target = self.count  # Progbar's final line needs a target.
        self._bar.update(self.count, values=[(self.rate_name, self.rate)], finalize=True)
