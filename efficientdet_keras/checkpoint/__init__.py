"""Checkpoints in the layout of the released ones: variable names, restore, save, the best-k
archive, and the released checkpoints by name (registry and download).

Keys are variable names without ":0", e.g. `efficientnet-b0/stem/conv2d/kernel`; EMA values sit
under `<name>/ExponentialMovingAverage`. The package writes its own checkpoints in the same
layout, so released and home-made checkpoints load through the same function.
"""

from efficientdet_keras.checkpoint.architecture import Architecture, infer_architecture
from efficientdet_keras.checkpoint.download import (ReleasedCheckpointInvalid,
                                                    ReleasedCheckpointUnavailable,
                                                    checkpoint_location, released_checkpoint_dir)
from efficientdet_keras.checkpoint.names import (EMA_SUFFIX, variable_name,
                                                 wrapper_state_variables)
from efficientdet_keras.checkpoint.paths import resolve_checkpoint_path
from efficientdet_keras.checkpoint.released import (RELEASED_CHECKPOINTS, ReleasedCheckpoint,
                                                    find_released)
from efficientdet_keras.checkpoint.restore import RestoreReport, restore_ckpt
from efficientdet_keras.checkpoint.save import ensure_built, save_ckpt

__all__ = ["Architecture", "EMA_SUFFIX", "RELEASED_CHECKPOINTS", "ReleasedCheckpoint",
           "ReleasedCheckpointInvalid", "ReleasedCheckpointUnavailable", "RestoreReport",
           "checkpoint_location", "ensure_built", "find_released", "infer_architecture",
           "released_checkpoint_dir", "resolve_checkpoint_path", "restore_ckpt", "save_ckpt",
           "variable_name", "wrapper_state_variables"]
