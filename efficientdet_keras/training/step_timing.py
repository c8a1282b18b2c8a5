"""When each training step of a `fit` ends, for timing steps: `StepEndTimes` and `step_seconds`."""

import time
from typing import List, Sequence

import tf_keras as keras


class StepEndTimes(keras.callbacks.Callback):
    """A Keras callback whose `ends` lists when each training batch ended (perf_counter).

    Args:
      wait_for_device: take the step's logs as numbers, which makes each batch end wait for
        the step to finish on the device (a GPU runs behind the host otherwise). False leaves
        the logs on the device, to time fit as it runs without a callback that reads them.
    """

    def __init__(self, wait_for_device: bool = True):
        super().__init__()
        self._supports_tf_logs = not wait_for_device
        self.ends: List[float] = []

    def on_train_batch_end(self, batch, logs=None):
        self.ends.append(time.perf_counter())


def step_seconds(ends: Sequence[float], warmup_steps: int) -> List[float]:
    """Seconds of each step after the first `warmup_steps` (tracing, first kernel calls),
    from StepEndTimes' ends."""
    return [b - a for a, b in zip(ends[warmup_steps - 1:-1], ends[warmup_steps:])]
