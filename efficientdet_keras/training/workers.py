"""Who writes what under multi-worker training: the one rule every writer follows.

Every worker runs the same program, callbacks included (a checkpoint or backup save
reads variables that may need all workers to take part), but only the chief's files
belong in model_dir. Any other worker writes into model_dir/workertemp_<task id>, the
folder tf_keras itself uses for such writes (its TensorBoard and BackupAndRestore), and
removes it when training ends. Single-process runs (the default strategy, MirroredStrategy,
TPUStrategy) have one worker, the chief: model_dir is its write dir.

Reads that must agree across workers stay on model_dir: the backup the run resumes from
(model_dir/backup/chief, read by every worker) and the config.yaml a re-run is checked
against.
"""

import shutil
from typing import Optional

import tensorflow as tf
from tf_keras.src.distribute import distributed_file_utils


def _strategy_or_current(strategy: Optional[tf.distribute.Strategy]) -> tf.distribute.Strategy:
    return strategy if strategy is not None else tf.distribute.get_strategy()


def is_chief(strategy: Optional[tf.distribute.Strategy] = None) -> bool:
    """Whether this worker's files are the run's (the chief, or the only worker)."""
    return bool(_strategy_or_current(strategy).extended.should_checkpoint)


def write_dir(model_dir: str, strategy: Optional[tf.distribute.Strategy] = None) -> str:
    """Where this worker writes what it would write into model_dir: model_dir itself on
    the chief, model_dir/workertemp_<task id> (created) on any other worker."""
    return distributed_file_utils.write_dirpath(model_dir, _strategy_or_current(strategy))


def remove_write_dir(model_dir: str, strategy: Optional[tf.distribute.Strategy] = None) -> None:
    """Removes a non-chief worker's write dir with everything in it; nothing on the chief."""
    if not is_chief(strategy):
        shutil.rmtree(write_dir(model_dir, strategy), ignore_errors=True)
