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
from absl import logging

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


def batch_norm_fixed_from(config, steps_per_epoch: Optional[int]) -> Optional[float]:
    """The planned schedule's step from which BatchNorm trains with its moving statistics
    (config.batch_norm_fixed_epochs); None when the key is 0, or
    when it covers the whole run (a warning says so): statistics that never followed a batch
    would normalise nothing.

    Raises:
      ValueError: the key is set and there is no steps_per_epoch to count its epochs in.
    """
    epochs = float(config.get("batch_norm_fixed_epochs") or 0.0)
    if not epochs:
        return None
    if epochs >= config.num_epochs:
        logging.warning("batch_norm_fixed_epochs=%g covers all %g epochs of the run: BatchNorm "
                        "trains on batch statistics throughout instead", epochs, config.num_epochs)
        return None
    if not steps_per_epoch:
        raise ValueError("batch_norm_fixed_epochs=%g needs steps_per_epoch (compile's argument "
                         "or the config's) to know where its epochs start" % epochs)
    return float(int((config.num_epochs - epochs) * steps_per_epoch))
