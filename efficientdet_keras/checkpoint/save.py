"""Writing checkpoints in the released layout, atomically."""

import os
from typing import Dict, Mapping, Optional

import tensorflow as tf

from efficientdet_keras.checkpoint.archive import CHECKPOINT_SUFFIXES
from efficientdet_keras.checkpoint.names import EMA_SUFFIX, variable_name
from efficientdet_keras.utils.fileio import write_files_atomically, write_text_atomically


def save_ckpt(model, ckpt_prefix: str, ema_values: Optional[Mapping[str, tf.Tensor]] = None) -> str:
    """Writes the model's variables as a name-based checkpoint, atomically.

    Args:
      model: a built model.
      ckpt_prefix: e.g. "model_dir/ckpt-12"; the directory is created.
      ema_values: optional {variable name: EMA value}, written under
        `<name>/ExponentialMovingAverage`, as in the released checkpoints.

    Returns:
      The checkpoint prefix, now also recorded in the directory's "checkpoint" file.

    Raises:
      FileWriteError: the checkpoint cannot be written (disk full); the message names
        it, no temporary file is left, earlier checkpoints and the state file are
        unchanged.
    """
    directory = os.path.dirname(os.path.abspath(ckpt_prefix))
    os.makedirs(directory, exist_ok=True)
    tensors: Dict[str, tf.Tensor] = {}
    for variable in model.variables:
        tensors[variable_name(variable)] = tf.convert_to_tensor(variable)
    for name, value in (ema_values or {}).items():
        tensors[name + EMA_SUFFIX] = tf.convert_to_tensor(value)
    names = sorted(tensors)

    def save_tensors(temp_prefix: str) -> None:
        tf.raw_ops.SaveV2(prefix=temp_prefix, tensor_names=names,
                          shape_and_slices=[""] * len(names),
                          tensors=[tensors[n] for n in names])

    # The index is renamed last and the state file written after it: a checkpoint
    # is listed only once both of its files are complete.
    write_files_atomically(ckpt_prefix, CHECKPOINT_SUFFIXES, save_tensors,
                           write_errors=(tf.errors.OpError,))
    _write_checkpoint_state(directory, os.path.basename(ckpt_prefix))
    return ckpt_prefix


def _write_checkpoint_state(directory: str, latest: str) -> None:
    """Writes the "checkpoint" file that lists `latest` last (tf.train.latest_checkpoint)."""
    state_path = os.path.join(directory, "checkpoint")
    previous = []
    if os.path.exists(state_path):
        state = tf.train.get_checkpoint_state(directory)
        if state is not None:
            previous = [os.path.basename(p) for p in state.all_model_checkpoint_paths]
    paths = [p for p in previous if p != latest] + [latest]
    text = 'model_checkpoint_path: "%s"\n' % latest
    text += "".join('all_model_checkpoint_paths: "%s"\n' % p for p in paths)
    write_text_atomically(state_path, text)


def ensure_built(model) -> None:
    """Creates a model's variables with one small forward pass if needed."""
    if model.built and model.variables:
        return
    builder = getattr(model, "build_variables", None)
    if builder is None:
        raise ValueError("Model %s is not built; call it on an input first." % model.name)
    builder()
