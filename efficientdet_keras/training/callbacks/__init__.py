"""The Keras callbacks of a training run, and `get_callbacks`, their standard list.

Each callback of a run's reports has its module here: COCOCallback (coco_evaluation),
CheckpointCallback (checkpoints), StopOnPlateau (plateau: config.patience), ResultsCallback
(results: model_dir/results.csv with its plots in model_dir/plots), MLflowTracker
(mlflow_tracker), EpochTensorBoard (tensorboard) and EpochProgbarLogger (progress: Keras'
progress output); reports/ writes the files they
leave. The callbacks that make a run recoverable live with the mechanism they drive: StepBackup
(training.backup), StopOnSignal (training.preemption) and NaNGuard (training.nan_guard).
"""

import os
from typing import Optional

from efficientdet_keras.optimization import is_pruning
from efficientdet_keras.training.backup import BACKUP_DIR, StepBackup
from efficientdet_keras.training.callbacks.checkpoints import CheckpointCallback
from efficientdet_keras.training.callbacks.coco_evaluation import COCOCallback
from efficientdet_keras.training.callbacks.mlflow_tracker import MLflowTracker
from efficientdet_keras.training.callbacks.plateau import StopOnPlateau
from efficientdet_keras.training.callbacks.progress import EpochProgbarLogger
from efficientdet_keras.training.callbacks.results import ResultsCallback
from efficientdet_keras.training.callbacks.tensorboard import EpochTensorBoard
from efficientdet_keras.training.nan_guard import NaNGuard
from efficientdet_keras.training.preemption import StopOnSignal
from efficientdet_keras.training.time_budget import StopAtTimeBudget
from efficientdet_keras.training.workers import is_chief, write_dir


def get_callbacks(config, model_dir: str, val_dataset=None, evaluator=None,
                  eval_samples: Optional[int] = None, display_images: int = 4,
                  archive_keep: int = 3, profile_batch=0, strategy=None,
                  on_second_interrupt=None):
    """The standard callback list for a training run in model_dir.

    Order matters: COCO evaluation first, so the checkpoint archive, StopOnPlateau (with
    config.patience), TensorBoard and any user callback after them see val_AP in `logs`.
    StepBackup (a BackupAndRestore) in model_dir/backup makes an interrupted run resume at
    the step of its last backup (every config.backup_steps steps and at each epoch end),
    with optimizer state and EMA; StopAtTimeBudget (with config.time_budget) and
    StopOnSignal, after it, end fit with TimeBudgetReached once the budget is used, or
    TrainingStopped once a SIGTERM or Ctrl-C, each with its step backed up (`on_second_interrupt`: what a second
    Ctrl-C does instead of raising KeyboardInterrupt; see preemption.StopSignals). NaNGuard, first, raises
    NonFiniteLossError after a step with a NaN or inf loss or gradient norm, before the
    epoch's evaluation, checkpoint or backup and before any step backup
    (fit_with_nan_recovery answers it when the config allows nan_recovery_attempts). With
    model_optimizations.prune, tfmot's pruning step
    update comes first (kernels and their averages masked before evaluation and checkpoints)
    and PruningSummaries follows TensorBoard (sparsity in model_dir/metrics). EpochTensorBoard
    writes the epoch logs for TensorBoard and profiles the steps profile_batch names.
    EpochProgbarLogger, last, is fit's progress output (a bar with verbose=1, a line per
    epoch with verbose=2) without per-step work for the line; keep it last among callbacks
    added after the list, as TrainingRun does.
    ResultsCallback writes model_dir/results.csv and plots/ after each epoch. With
    config.mlflow_tracking_uri, MLflowTracker (after it) logs the run to MLflow, from the
    chief only; without mlflow installed that is MissingExtraError.
    `display_images` validation images (0: none) are drawn, ground truth beside the
    detections, at each COCO evaluation into model_dir/eval_images (COCOCallback).
    Under multi-worker training (`strategy`, default the current one) only the chief
    writes into model_dir; every other worker writes the same files into its
    workers.write_dir, and all of them resume from the chief's backup.
    """
    backup_dir = os.path.join(model_dir, BACKUP_DIR)  # Keras' BackupAndRestore knows the rule.
    model_dir = write_dir(model_dir, strategy)
    # First: at an epoch end it looks for a non-finite step before anything is written.
    guard = NaNGuard(config.get("nan_recovery_attempts", 0),
                     config.get("nan_recovery_lr_factor", 0.5))
    callbacks = [guard]
    summaries = [EpochTensorBoard(log_dir=model_dir, profile_batch=profile_batch)]
    if is_pruning(config):
        from efficientdet_keras.optimization.pruning_keras import training_callbacks
        pruning_step, sparsity_summaries = training_callbacks(model_dir)
        callbacks.append(pruning_step)
        summaries.append(sparsity_summaries)
    if val_dataset is not None:
        callbacks.append(COCOCallback(config, val_dataset, evaluator, model_dir,
                                      max_images=eval_samples, eval_images=display_images))
    callbacks.append(CheckpointCallback(model_dir, archive_keep=archive_keep))
    if config.get("patience"):
        if val_dataset is None:
            raise ValueError("patience=%d stops training on a validation AP that stops "
                             "improving: it needs evaluation (validation data)"
                             % config.patience)
        callbacks.append(StopOnPlateau(config.patience, model_dir))
    # After the evaluation and checkpoint: the row holds val_AP and the epoch's whole time.
    callbacks.append(ResultsCallback(model_dir))
    if config.get("mlflow_tracking_uri") and is_chief(strategy):
        # After ResultsCallback: an epoch's row of results.csv is there when it uploads.
        callbacks.append(MLflowTracker(model_dir, config.mlflow_tracking_uri,
                                       config.get("mlflow_experiment"), config=config))
    callbacks += summaries
    # Last: its epoch-end backup comes after the epoch's evaluation and checkpoint.
    backup = StepBackup(backup_dir, config.get("backup_steps", 0), guard=guard)
    # After the backup: on SIGTERM or Ctrl-C, the step backed up, fit ends with TrainingStopped.
    callbacks.append(backup)
    if config.get("time_budget"):  # After the backup, as StopOnSignal: the step is backed up.
        callbacks.append(StopAtTimeBudget(config.time_budget, model_dir, backup))
    callbacks.append(StopOnSignal(backup, on_second_interrupt))
    # Last, where fit puts its own: its epoch line shows the logs of all the others.
    callbacks.append(EpochProgbarLogger())
    return callbacks
