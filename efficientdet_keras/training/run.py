"""One training run, assembled from explicit arguments.

The train command, the TF-Hub fine-tuning path and the benchmarks all build their runs here:

    run = TrainingRun(config, "runs/mine", make_source("train-*.tfrecord"),
                      val_source=make_source("val-*.tfrecord"), val_json="val.json")
    run.fit()

Each step has one method, so a caller can take the pieces it needs:
  build_model()      EfficientDetNetTrain (or the hub trainer), pretrained weights, compile()
  train_pipeline()   the training InputPipeline, starting at the last backup's step
  validation_data()  the validation batches and the COCO evaluator
  build_callbacks()  get_callbacks (COCO evaluation, checkpoints, backup, EMA, reports)
  fit()              all of the above in model_dir's lock (one trainer per folder), the
                     config checked against the run's config.yaml, then Model.fit with
                     NaN recovery (with TensorFlow's op determinism when the config says
                     deterministic)
"""

import contextlib
import os
import sys
from typing import Callable, List, Optional, Sequence, Tuple

import tensorflow as tf
import tf_keras as keras

from efficientdet_keras.config.label_maps import label_names
from efficientdet_keras.config import Config
from efficientdet_keras.data.check import count_records
from efficientdet_keras.data.pipeline import InputPipeline
from efficientdet_keras.evaluation import COCOEvaluator
from efficientdet_keras.training.backup import latest_backup_step
from efficientdet_keras.training.callbacks import get_callbacks
from efficientdet_keras.training.callbacks.plateau import plateau_reached
from efficientdet_keras.training.nan_guard import fit_with_nan_recovery
from efficientdet_keras.training.run_config import check_run_config, steps_per_epoch
from efficientdet_keras.training.runtime import (check_batch_divisible, op_determinism,
                                                 run_seed)
from efficientdet_keras.training.trainer import EfficientDetNetTrain
from efficientdet_keras.training.workers import is_chief, remove_write_dir, write_dir
from efficientdet_keras.utils.run_lock import RunLock

# The folder of model_dir that holds the decoded-image cache of `cache: disk`.
CACHE_DIR = "cache"


class TrainingRun:
    """A training run of `config` in `model_dir`; running it again resumes it.

    Args:
      config: the run's config; `config.steps_per_epoch` is set from the data.
      model_dir: checkpoints, backups, logs, reports and config.yaml go here.
      train_source: the training data (`data.sources.make_source`).
      val_source, val_json: validation data and its COCO JSON ground truth (None: the
        evaluator builds it from the records); no val_source trains without evaluation.
      strategy: a tf.distribute strategy (default: the current one).
      pretrained_ckpt: a checkpoint to start from (its EMA values): a path, or a released
        detector's name such as "efficientdet-d0" (downloaded once).
      steps_per_epoch: None counts the training images (or takes num_examples_per_epoch)
        and divides by the batch size.
      eval_samples: evaluate on at most this many validation images.
      eval_images: validation images drawn at each evaluation (0: none).
      archive_keep: best checkpoints kept in model_dir/archive.
      profile: profile steps 2-4 into TensorBoard.
      seed: the input pipeline's shuffle and augmentation seed; with the config's
        deterministic, also Python's, NumPy's and TensorFlow's (0 when not given).
      overwrite_config: allow a config.yaml that differs in keys that are not resumable.
      on_second_interrupt: what a second Ctrl-C during fit does, for a program that owns its
        process (preemption.StopSignals); None raises KeyboardInterrupt.
      callbacks: Keras callbacks of the caller's, run after the run's own (so their `logs`
        hold val_AP after each evaluation).
    """

    def __init__(self, config: Config, model_dir: str, train_source, val_source=None,
                 val_json: Optional[str] = None, strategy: Optional[tf.distribute.Strategy] = None,
                 pretrained_ckpt: Optional[str] = None, steps_per_epoch: Optional[int] = None,
                 num_examples_per_epoch: Optional[int] = None, eval_samples: Optional[int] = None,
                 eval_images: int = 4, archive_keep: int = 3, profile: bool = False,
                 seed: Optional[int] = None, overwrite_config: bool = False,
                 on_second_interrupt: Optional[Callable[[], None]] = None,
                 callbacks: Sequence[keras.callbacks.Callback] = ()):
        self.config = config
        self.model_dir = model_dir
        self.on_second_interrupt = on_second_interrupt
        self.train_source = train_source
        self.val_source = val_source
        self.val_json = val_json
        self.strategy = strategy or tf.distribute.get_strategy()
        if pretrained_ckpt and config.get("backbone_ckpt"):
            raise ValueError("give one of pretrained_ckpt (%s) and backbone_ckpt (%s): a whole "
                             "detector to fine-tune, or a backbone to start a new one from"
                             % (pretrained_ckpt, config.backbone_ckpt))
        self.pretrained_ckpt = pretrained_ckpt
        self.num_examples_per_epoch = num_examples_per_epoch
        self.eval_samples = eval_samples
        self.eval_images = eval_images
        self.archive_keep = archive_keep
        self.profile = profile
        self.seed = seed
        self.overwrite_config = overwrite_config
        self._steps_per_epoch = steps_per_epoch
        self.callbacks: List[keras.callbacks.Callback] = []
        self.user_callbacks = list(callbacks)

    @property
    def steps_per_epoch(self) -> int:
        """Given, or full batches of the training images (counted once, when not given)."""
        if self._steps_per_epoch is None:
            examples = self.num_examples_per_epoch or count_records(self.train_source)
            self._steps_per_epoch = steps_per_epoch(examples, self.config.batch_size)
        return self._steps_per_epoch

    def build_model(self) -> EfficientDetNetTrain:
        """The compiled trainer in the strategy's scope: the hub trainer when the config names
        a hub_module_url, the pretrained checkpoint's EMA values loaded when given, else the
        config's backbone_ckpt into the backbone. A resumed run's backup replaces either."""
        with self.strategy.scope():
            if self.config.get("hub_module_url"):
                from efficientdet_keras.training.hub_trainer import EfficientDetNetTrainHub
                model = EfficientDetNetTrainHub(self.config)
            else:
                model = EfficientDetNetTrain(self.config)
            if self.pretrained_ckpt:
                report = model.load_pretrained(self.pretrained_ckpt)  # The average too.
                if report.class_rows is not None:
                    print(report.class_rows.describe(self.pretrained_ckpt))
            elif self.config.get("backbone_ckpt"):
                model.load_backbone(self.config.backbone_ckpt)
            model.compile(steps_per_epoch=self.steps_per_epoch)
        return model

    def train_pipeline(self) -> InputPipeline:
        """The training input; a resumed run starts at its backup's step, so it sees a new
        order and replays no batches."""
        return InputPipeline(self.config, self.train_source, is_training=True, seed=self.seed,
                             start_step=latest_backup_step(self.model_dir),
                             cache_dir=os.path.join(self.model_dir, CACHE_DIR))

    def validation_data(self) -> Tuple[Optional[tf.data.Dataset], Optional[COCOEvaluator]]:
        """(validation batches, COCO evaluator), or (None, None) without validation data."""
        if self.val_source is None:
            return None, None
        batch_size = self.config.batch_size
        val_data = InputPipeline(self.config, self.val_source, is_training=False,
                                 batch_size=batch_size)()
        if self.eval_samples:
            val_data = val_data.take(-(-self.eval_samples // batch_size))
        label_map = label_names(self.config.label_map)
        return val_data, COCOEvaluator(self.val_json, label_map=label_map)

    def build_callbacks(self, val_data=None, evaluator=None) -> List[keras.callbacks.Callback]:
        """The package's callbacks for this run (see training/callbacks/)."""
        return get_callbacks(self.config, self.model_dir, val_data, evaluator,
                             eval_samples=self.eval_samples, display_images=self.eval_images,
                             archive_keep=self.archive_keep,
                             profile_batch=(2, 4) if self.profile else 0, strategy=self.strategy,
                             on_second_interrupt=self.on_second_interrupt)

    def fit(self, verbose: Optional[int] = None) -> keras.callbacks.History:
        """Trains for config.num_epochs, resuming from the last backup in model_dir.

        Raises:
          RunConfigMismatchError: model_dir holds a run with another config.
          RunDirectoryInUse: another live process trains in model_dir (its train.lock).
          NonFiniteLossError: a NaN or inf step that the config's nan_recovery_attempts did
            not recover.
        """
        config = self.config
        check_batch_divisible(config.batch_size, self.strategy.num_replicas_in_sync)
        if config.get("deterministic"):  # Initial weights too: seeded before the model.
            self.seed = run_seed(self.seed, True)
            keras.utils.set_random_seed(self.seed)
        config.steps_per_epoch = self.steps_per_epoch
        # One trainer per model_dir; other workers of a multi-worker run write elsewhere.
        with (RunLock(self.model_dir, what="TrainingRun.fit") if is_chief(self.strategy)
              else contextlib.nullcontext()), op_determinism(config.get("deterministic")):
            check_run_config(config, self.model_dir, self.overwrite_config)
            config.save_yaml(write_dir(self.model_dir, self.strategy))
            try:
                return self._fit(verbose)
            finally:  # A non-chief worker's files were only there for the collective saves.
                remove_write_dir(self.model_dir, self.strategy)

    def _fit(self, verbose: Optional[int]) -> Optional[keras.callbacks.History]:
        config = self.config
        stopped = plateau_reached(config.get("patience", 0), self.model_dir)
        if stopped:  # Its plateau ended it before: started again, it does not train on.
            self.callbacks = []
            print(stopped)
            return None
        model = self.build_model()
        pipeline = self.train_pipeline()
        train_data = self.strategy.distribute_datasets_from_function(pipeline)
        val_data, evaluator = self.validation_data()
        self.callbacks = self.build_callbacks(val_data, evaluator)
        self.callbacks.append(keras.callbacks.LambdaCallback(  # The data report of each epoch.
            on_epoch_end=lambda epoch, logs: pipeline.health.log_summary()))
        self.callbacks += self.user_callbacks
        # The progress output last, where fit puts its own: its epoch line shows all the logs.
        self.callbacks.sort(key=lambda callback: isinstance(callback,
                                                            keras.callbacks.ProgbarLogger))
        print("Training %s for %d epochs of %d steps (batch %d, %d replica(s)) in %s"
              % (config.name, config.num_epochs, self.steps_per_epoch, config.batch_size,
                 self.strategy.num_replicas_in_sync, self.model_dir))
        if verbose is None:
            verbose = 1 if sys.stdout.isatty() else 2
        history = fit_with_nan_recovery(
            model, train_data, epochs=config.num_epochs, steps_per_epoch=self.steps_per_epoch,
            validation_data=val_data, callbacks=self.callbacks, verbose=verbose)
        pipeline.health.log_summary()
        return history
