"""Checkpoints in the layout of the released ones: variable names, restore, save, the best-k
archive.

Keys are variable names without ":0", e.g. `efficientnet-b0/stem/conv2d/kernel`; EMA values sit
under `<name>/ExponentialMovingAverage`. The package writes its own checkpoints in the same
layout, so released and home-made checkpoints load through the same function.
"""

from efficientdet_keras.checkpoint.names import (EMA_SUFFIX, variable_name,
                                                 wrapper_state_variables)
from efficientdet_keras.checkpoint.restore import (Architecture, RestoreReport,
                                                   infer_architecture, resolve_checkpoint_path,
                                                   restore_ckpt)
from efficientdet_keras.checkpoint.save import ensure_built, save_ckpt

__all__ = ["Architecture", "EMA_SUFFIX", "RestoreReport", "ensure_built", "infer_architecture",
           "resolve_checkpoint_path", "restore_ckpt", "save_ckpt", "variable_name",
           "wrapper_state_variables"]
