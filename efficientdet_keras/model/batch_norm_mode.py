"""Training-mode BatchNorm that normalises with its moving statistics while a condition holds.

With a small batch the coarsest feature levels give each BatchNorm only a few values per
channel (at batch 8 and 256 px, P7 is 2x2: 32 values). A network trained on such
per-batch statistics can come to rely on them, and inference, which normalises with the
moving statistics instead, then scores far below what training suggested. Training the
last part of a run with the moving statistics (`batch_norm_fixed_epochs`) lets the weights
adapt to exactly what inference will use.

The condition is a boolean tensor read when the step runs, so one traced training step serves
both parts of the run, a resumed run and a paced schedule alike. While it holds, each
BatchNorm normalises with its moving statistics and leaves them unchanged (Keras'
inference branch), and gamma and beta still train. Set per thread, as a MirroredStrategy
traces each replica's step on its own thread.
"""

import contextlib
import threading
from typing import Optional, Union

import tensorflow as tf

_STATE = threading.local()


def _condition() -> Optional[tf.Tensor]:
    return getattr(_STATE, "condition", None)


@contextlib.contextmanager
def moving_statistics_while(condition: Optional[tf.Tensor]):
    """Within the block (on this thread), training-mode BatchNorms use their moving statistics
    whenever `condition` (a scalar boolean tensor) is true at run time; None changes nothing."""
    previous = _condition()
    _STATE.condition = condition
    try:
        yield
    finally:
        _STATE.condition = previous


def training_mode_of_batch_norm() -> Union[bool, tf.Tensor]:
    """The `training` argument of a BatchNorm called in training: True, or a boolean tensor
    that is false while the condition of `moving_statistics_while` holds."""
    condition = _condition()
    return True if condition is None else tf.logical_not(condition)
