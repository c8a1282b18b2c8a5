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

Saves and EMA swaps read every variable across workers; on_read_variables_reduced_together
batches those reads into one collective.
"""

import contextlib
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


def _on_read_means(variables):
    """The synchronised-on-read MEAN variables among `variables`."""
    return [v for v in variables
            if isinstance(v, tf.distribute.DistributedValues) and isinstance(v, tf.Variable)
            and v.synchronization == tf.VariableSynchronization.ON_READ
            and v.aggregation == tf.VariableAggregation.MEAN and v.dtype.is_floating]


@contextlib.contextmanager
def on_read_variables_reduced_together(variables, strategy):
    """Under MultiWorkerMirroredStrategy, makes the cross-replica reads of `variables`
    that are synchronised on read (BatchNorm moving statistics and their EMA shadows)
    take their values from one batched all-reduce done on entry, instead of one eager
    collective per variable and read, as TensorFlow does (each one a round trip between
    the workers, which makes a backup of a whole model slow).

    The values read are the same cross-replica means, computed on entry: use it only
    around code that reads each such variable before writing it (a checkpoint save, an
    EMA swap). They reach the reads through each variable's `_get_cross_replica` (what a
    checkpoint's save spec and a cross-replica read call) until the block ends.
    Elsewhere (one process, MirroredStrategy) it does nothing.
    """
    on_read = (_on_read_means(variables)
               if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) else [])
    reduced = strategy.extended.batch_reduce_to(
        tf.distribute.ReduceOp.MEAN, [(v, v) for v in on_read]) if on_read else []
    means = [strategy.experimental_local_results(value)[0] for value in reduced]
    try:
        for variable, mean in zip(on_read, means):
            variable._get_cross_replica = (lambda mean=mean: mean)
        yield
    finally:
        for variable in on_read:
            variable.__dict__.pop("_get_cross_replica", None)
