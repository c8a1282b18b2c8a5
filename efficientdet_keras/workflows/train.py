"""train: a detector trained on a dataset folder, files, or the built-in demo set, in one call.

    from efficientdet_keras import train
    result = train("runs/pets", data="datasets/pets", pretrained="efficientdet-d0",
                   hparams="batch_size=8,num_epochs=20")
    print(result.summary())       # the last COCO metrics and the best checkpoint
    result.best_checkpoint        # runs/pets/archive/ckpt-17, what evaluate() and export() take

Calling it again with the same model_dir resumes the run from its last backup. The run itself
is `training.run.TrainingRun`; this module finds its data, classes and config.
"""

import dataclasses
import os
from typing import Callable, Dict, Iterable, Optional, Sequence

from efficientdet_keras.workflows.train_data import (DataSpec, find_training_data,
                                                     write_demo_data)


@dataclasses.dataclass
class TrainResult:
    """A finished run: its folder, the best archived checkpoint (None without evaluation)
    with its epoch and metrics, the last evaluation's epoch and COCO metrics, and Keras'
    History of the fit."""
    model_dir: str
    best_checkpoint: Optional[str] = None
    best: Optional[Dict] = None
    last_epoch: Optional[int] = None
    last_metrics: Optional[Dict[str, float]] = None
    history: object = None

    def summary(self) -> str:
        """The last evaluation's metrics table and the best checkpoint's line."""
        from efficientdet_keras.checkpoint.archive import ARCHIVE_MONITOR
        from efficientdet_keras.evaluation.runner import format_metrics
        lines = []
        if self.last_metrics:
            lines += ["COCO metrics after epoch %d (EMA weights):" % self.last_epoch,
                      format_metrics(self.last_metrics)]
        if self.best:
            lines.append("Best checkpoint: %s (epoch %d, %s %.4f)" % (
                self.best_checkpoint, self.best["epoch"], ARCHIVE_MONITOR,
                self.best[ARCHIVE_MONITOR]))
        return "\n".join(lines)


def build_config(model: str = "efficientdet-d0", hparams="", demo: bool = False,
                 overrides: Optional[dict] = None, strategy: str = ""):
    """The run's config: the model's family default, the packaged demo.yaml for the demo,
    then `hparams` (a "k=v" string, a YAML file or a dict), then `overrides` (the keys given
    as arguments; None values left out). Mixed precision defaults to bfloat16 on TPUs."""
    from efficientdet_keras.config import PACKAGED_HPARAMS_DIR, get_efficientdet_config
    from efficientdet_keras.training.runtime import default_precision
    config = get_efficientdet_config(model)
    config.mixed_precision = None  # Unset unless a file or an override sets it.
    if demo:  # The packaged file, whatever the working directory holds.
        config.override(os.path.join(PACKAGED_HPARAMS_DIR, "demo.yaml"))
    config.override(hparams or "")
    config.override({k: v for k, v in (overrides or {}).items() if v is not None})
    config.mixed_precision = default_precision(strategy, config.mixed_precision)
    return config


def user_config_keys(hparams) -> set:
    """The top-level config keys `hparams` sets (a string, YAML file or dict): the keys a
    dataset's classes must not overwrite."""
    from efficientdet_keras.config.overrides import override_mappings
    if isinstance(hparams, dict):
        return set(hparams)
    return {key for mapping in override_mappings(hparams or "") for key in mapping}


def train(model_dir: str, *, data: Optional[str] = None, model: str = "efficientdet-d0",
          pretrained: Optional[str] = None, hparams="", evaluate: bool = True,
          parts: Optional[DataSpec] = None, demo: bool = False,
          demo_images: Optional[int] = None,
          voc_origin: Optional[int] = None, data_layout: Optional[str] = None,
          strategy: str = "", tpu: Optional[dict] = None, seed: Optional[int] = None, debug: bool = False,
          num_examples_per_epoch: Optional[int] = None, eval_samples: Optional[int] = None,
          eval_images: int = 4, archive_keep: int = 3, profile: bool = False,
          overwrite_config: bool = False, config_overrides: Optional[dict] = None,
          on_second_interrupt: Optional[Callable[[], None]] = None,
          callbacks: Sequence = (), report: Callable[[str], None] = print) -> TrainResult:
    """Trains (and evaluates after each epoch) a detector in `model_dir`; resumes a run there.

    Args:
      model_dir: checkpoints, backups, logs, reports and config.yaml go here.
      data: a dataset folder or file in any layout `open_dataset` reads; its classes set
        num_classes and label_map unless `hparams` sets them. Or `parts` (a DataSpec of
        TFRecord patterns, COCO JSON and image folders), or `demo` (the synthetic shapes,
        `demo_images` of them (default: `parts`' count, else 1000), with the packaged
        hparams/demo.yaml).
      voc_origin: the pixel the VOC boxes of `data` start from, 0 or 1 (None: found as
        `open_dataset` says).
      data_layout: the layout to read `data` as, a name in the data guide's table (None: the
        one its files show; a folder that holds two datasets needs it).
      model: the family member, efficientdet-d0 ... d7x, efficientdet-lite0 ... lite4.
      pretrained: a detector checkpoint to fine-tune (its EMA values): a path or a released
        name such as "efficientdet-d0"; classes it knows by name keep its class rows.
      hparams: config overrides: "k=v,k2=v2", a YAML file (a path, or a packaged file's
        name such as "voc.yaml"), or a dict.
      evaluate: COCO evaluation after each epoch and the best-checkpoint archive.
      strategy: "" (the default device), "gpus", "multi-worker" or "tpu".
      tpu: the TPU's tpu, tpu_zone and gcp_project (training.runtime.get_strategy).
      seed: Python, NumPy and TensorFlow seed (None: unseeded unless the config is
        deterministic).
      debug: run eagerly, checking tensors for NaN and inf.
      num_examples_per_epoch: images per epoch (None: counted).
      eval_samples: evaluate on at most this many validation images.
      eval_images: validation images drawn at each evaluation (0: none).
      archive_keep: best checkpoints kept in model_dir/archive.
      profile: profile steps 2-4 into TensorBoard.
      overwrite_config: allow a config.yaml that differs in keys a resumed run keeps.
      on_second_interrupt: what a second Ctrl-C during fit does (None: KeyboardInterrupt).
      config_overrides: config keys set after `hparams` (batch_size, num_epochs, ...).
      callbacks: Keras callbacks run after the run's own; their `logs` hold val_AP.
      report: called with each line worth showing (the dataset found).

    Returns:
      TrainResult.
    """
    spec = parts or DataSpec()
    spec = dataclasses.replace(spec, data=data or spec.data, demo=demo or spec.demo,
                               demo_images=demo_images or spec.demo_images,
                               voc_origin=spec.voc_origin if voc_origin is None else voc_origin,
                               data_layout=data_layout or spec.data_layout)
    from efficientdet_keras.training.runtime import get_strategy
    from efficientdet_keras.training.workers import is_chief
    from efficientdet_keras.utils.run_lock import RunLock
    # Before any other TensorFlow op: MultiWorkerMirroredStrategy joins its cluster here.
    strategy_name, strategy = strategy, get_strategy(strategy, **(tpu or {}))
    os.makedirs(model_dir, exist_ok=True)
    settings = dict(model=model, pretrained=pretrained, hparams=hparams, evaluate=evaluate,
                    seed=seed, debug=debug, num_examples_per_epoch=num_examples_per_epoch,
                    eval_samples=eval_samples, eval_images=eval_images,
                    archive_keep=archive_keep, profile=profile,
                    overwrite_config=overwrite_config, config_overrides=config_overrides,
                    on_second_interrupt=on_second_interrupt, callbacks=callbacks, report=report,
                    strategy_name=strategy_name)
    # A non-chief worker writes into its own folder: it takes no lock.
    if not is_chief(strategy):
        return _train(model_dir, spec, strategy, **settings)
    with RunLock(model_dir, "efficientdet-train"):  # Before anything is written.
        return _train(model_dir, spec, strategy, **settings)


def _train(model_dir: str, spec: DataSpec, strategy, *, model, pretrained, hparams, evaluate,
           seed, debug, config_overrides, report, strategy_name, **run_settings
           ) -> TrainResult:
    from efficientdet_keras.evaluation import check_source_ids_match
    from efficientdet_keras.training.run import TrainingRun
    from efficientdet_keras.training.time_budget import TimeBudgetReached
    from efficientdet_keras.training.runtime import run_seed, run_settings as global_settings
    from efficientdet_keras.training.workers import write_dir
    from efficientdet_keras.utils.fileio import remove_stale_temporary_files
    # model_dir itself, or a non-chief worker's temporary folder for the same files.
    files_dir = write_dir(model_dir, strategy)
    remove_stale_temporary_files(files_dir)
    demo_data = write_demo_data(spec, files_dir) if spec.demo else None
    config = build_config(model, hparams, spec.demo,
                          dict(config_overrides or {}, strategy=strategy_name), strategy_name)
    found = find_training_data(spec, config, files_dir, evaluate=evaluate,
                               fixed_keys=user_config_keys(hparams), demo_data=demo_data,
                               report=report)
    if evaluate and found.val_json:  # Before any training.
        check_source_ids_match(found.val, found.val_json)
    seed = run_seed(seed, config.deterministic)
    with global_settings(seed, debug, config.mixed_precision):
        run = TrainingRun(config, model_dir, found.train,
                          val_source=found.val if evaluate else None, val_json=found.val_json,
                          strategy=strategy, pretrained_ckpt=pretrained or None,
                          steps_per_epoch=config.get("steps_per_epoch"), seed=seed,
                          **run_settings)
        try:
            history = run.fit()
        except TimeBudgetReached as used_up:  # A planned end, its step backed up.
            report("Stopped: %s" % used_up)
            history = None
    return run_result(model_dir, run.callbacks, history)


def run_result(model_dir: str, callbacks: Iterable, history=None) -> TrainResult:
    """The TrainResult of a fitted run, read from its COCO and checkpoint callbacks."""
    from efficientdet_keras.training.callbacks.checkpoints import CheckpointCallback
    from efficientdet_keras.training.callbacks.coco_evaluation import COCOCallback
    callbacks = list(callbacks)
    result = TrainResult(model_dir, history=history)
    coco = next((c for c in callbacks if isinstance(c, COCOCallback)), None)
    if coco is not None and coco.history:
        result.last_epoch = max(coco.history)
        result.last_metrics = coco.history[result.last_epoch]
    checkpoints = next((c for c in callbacks if isinstance(c, CheckpointCallback)), None)
    best = checkpoints.archive.best() if checkpoints is not None else None
    if best:
        result.best, result.best_checkpoint = best, best["path"]
    return result
