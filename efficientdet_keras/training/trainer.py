"""EfficientDetNetTrain: EfficientDetNet with the training and evaluation steps for Model.fit.

    model = EfficientDetNetTrain(config)            # inside strategy.scope() when distributed
    model.compile(steps_per_epoch=100)              # optimizer, schedule and losses from config
    model.fit(train_ds, epochs=config.num_epochs, steps_per_epoch=100,
              validation_data=val_ds, callbacks=get_callbacks(config, model_dir, val_ds))

One step (train_step): forward -> detection loss (focal + box (+ IoU)) ->
+ weight_decay * L2 of the trained conv kernels -> gradients of the trained
variables -> summed across replicas -> clipped by global norm (each tensor first
with clip_gradients_per_tensor) -> optimizer -> EMA update. A step whose loss terms or
gradient norm are NaN or inf changes nothing (see training/nan_guard.py). Under tf.distribute
the loss of each replica is normalised by the positives of the whole global
batch, so N replicas make exactly the update one replica makes on the same
global batch.
"""

import re
from typing import Dict, List, Optional

import tensorflow as tf
import tf_keras as keras

from efficientdet_keras.checkpoint import (RestoreReport, checkpoint_location, infer_architecture,
                                           resolve_checkpoint_path, restore_ckpt, variable_name)
from efficientdet_keras.config import Config, get_efficientdet_config
from efficientdet_keras.detection.losses import DetectionLoss
from efficientdet_keras.model import EfficientDetNet
from efficientdet_keras.model.batch_norm_mode import batch_norm_fixed_from, moving_statistics_while
from efficientdet_keras.optimization import is_pruning
from efficientdet_keras.training.backup import finish_backup_writes
from efficientdet_keras.training.ema import ExponentialMovingAverage, is_batch_norm_statistic
from efficientdet_keras.training.grappler import grappler_passes_off, resolve_passes
from efficientdet_keras.training.keras3_objects import check_compile_arguments, door_callbacks
from efficientdet_keras.training.nan_guard import NaNRecoveryState, NonFiniteRecord, run_cond
from efficientdet_keras.training.optimizers import clip_gradients
from efficientdet_keras.training.preemption import release_signal_handlers
from efficientdet_keras.training.schedule_pace import SchedulePace

# Weight decay applies to convolution kernels only (not biases, BatchNorm or fusion weights).
_L2_VARIABLE_PATTERN = re.compile(r".*(kernel|depthwise_kernel|pointwise_kernel)$")


class EfficientDetNetTrain(EfficientDetNet):
    """EfficientDetNet plus `train_step` / `test_step`, frozen variables and EMA.

    Args:
      config: the model config (or model_name for a family default).
      **kwargs: the other arguments of EfficientDetNet.

    Logged by fit: loss (det_loss + reg_l2_loss), cls_loss, box_loss, det_loss,
    reg_l2_loss, iou_loss (when enabled), gradient_norm (before clipping, epoch
    mean), learning_rate and, under float16, loss_scale; nonfinite_steps counts the
    epoch's steps with a NaN or inf loss or gradient norm, which are left out of the
    means (so are the gradient norms of float16 steps the loss-scale optimizer skips).
    """

    def __init__(self, config: Optional[Config] = None, model_name: Optional[str] = None,
                 **kwargs):
        if config is None:
            config = get_efficientdet_config(model_name or "efficientdet-d0")
        if config.get("fold_batch_norm"):
            raise ValueError("fold_batch_norm is for inference (export and evaluation fold "
                             "BatchNorm themselves); a model to train needs its BatchNorms")
        super().__init__(config=config, **kwargs)
        # The step's logs are already the same on every replica and worker (the trackers'
        # results, the learning rate): Keras' default would add up the workers' copies.
        self.distribute_reduction_method = "first"
        self.build_variables()  # Names and freezing need the variables.
        self._freeze_pattern = (re.compile(self.config.var_freeze_expr)
                                if self.config.var_freeze_expr else None)
        self._freeze_batch_norms()
        self._batch_norm_fixed_from = None  # compile() counts batch_norm_fixed_epochs in steps.
        ema = (ExponentialMovingAverage(self, self.config.moving_average_decay)
               if self.config.moving_average_decay else None)
        # The averages belong in checkpoints (BackupAndRestore resumes them) but not
        # among the model's weights, which must match the released checkpoints.
        object.__setattr__(self, "ema", ema)
        if ema is not None:
            self._track_trackable(ema, name="ema")
        self.detection_loss = DetectionLoss(self.config)
        names = ["loss", "det_loss", "cls_loss", "box_loss", "reg_l2_loss", "gradient_norm"]
        if self.config.iou_loss_type:
            names.append("iou_loss")
        # Plain attributes: metric variables must not join the model's weights.
        object.__setattr__(self, "loss_trackers", [keras.metrics.Mean(name) for name in names])
        object.__setattr__(self, "nonfinite_tracker", keras.metrics.Sum("nonfinite_steps"))
        object.__setattr__(self, "nonfinite", NonFiniteRecord(names))
        # Checkpoints (and so the backup a resume reads) hold the recovery's learning-rate scale.
        object.__setattr__(self, "nan_recovery", NaNRecoveryState())
        self._track_trackable(self.nan_recovery, name="nan_recovery")
        # And the schedule's pace, which time_budget sets (training/schedule_pace.py).
        object.__setattr__(self, "schedule_pace", SchedulePace())
        self._track_trackable(self.schedule_pace, name="schedule_pace")

    # --- starting from a checkpoint ---------------------------------------------
    def load_pretrained(self, ckpt_path: str, use_ema: Optional[bool] = None,
                        allow_partial: bool = False) -> RestoreReport:
        """Loads a released (or own) checkpoint to fine-tune from; the EMA, if any, restarts there.

        Args:
          ckpt_path: a checkpoint prefix, its .index file, a directory, or a released
            checkpoint's name such as "efficientdet-d0" (downloaded once into the cache).
          use_ema: None loads the checkpoint's ExponentialMovingAverage values where it has
            them (what the released AP was measured with), False the plain values.
          allow_partial: accept a checkpoint that fills less than half of the variables.

        Variables matching config.var_exclude_expr keep their initial values. When the
        checkpoint and the config's label_map both name their classes (and
        config.class_rows_by_name is on), each class the checkpoint knows by name starts from
        its rows of the class-prediction layer and the others from the focal-loss prior
        (checkpoint/class_rows.py; the report's class_rows says which); otherwise a class head
        of another class count is skipped (see restore_ckpt). Resuming an interrupted run is
        not this: BackupAndRestore does it, with optimizer state and averages.
        """
        class_rows = None
        if self.config.get("class_rows_by_name", True):
            from efficientdet_keras.checkpoint.class_rows import plan_class_rows
            class_rows = plan_class_rows(ckpt_path, self.config.get("label_map"),
                                         self.config.num_classes)
        report = restore_ckpt(self, ckpt_path, use_ema=use_ema,
                              exclude=self.config.get("var_exclude_expr"),
                              allow_partial=allow_partial, class_rows=class_rows)
        if self.ema is not None:
            self.ema.reset_to_model()  # Average from the loaded weights, not the random ones.
        return report

    def load_backbone(self, ckpt_path: str) -> RestoreReport:
        """Loads an ImageNet EfficientNet checkpoint into the backbone (EMA values where it
        has them); the BiFPN and heads keep their initial values.

        Args:
          ckpt_path: a path, or a released backbone's name such as "efficientnet-b0" or
            "efficientnet-lite0" (downloaded once into the cache).

        Raises:
          ValueError: the checkpoint holds more than a backbone (a whole detector belongs in
            load_pretrained), or another backbone than the config's.
        """
        path = resolve_checkpoint_path(checkpoint_location(ckpt_path))
        architecture = infer_architecture(tf.train.load_checkpoint(path)
                                          .get_variable_to_shape_map())
        if not architecture.backbone_only:
            raise ValueError("backbone_ckpt %s holds %s, not an ImageNet backbone: start from "
                             "it with pretrained_ckpt (--pretrained_ckpt)"
                             % (ckpt_path, architecture.describe()))
        return self.load_pretrained(path)

    # --- what is trained -----------------------------------------------------
    def is_frozen(self, variable: tf.Variable) -> bool:
        return bool(self._freeze_pattern and self._freeze_pattern.match(variable_name(variable)))

    def _freeze_batch_norms(self) -> None:
        """Frozen BatchNorms run in inference mode, so their statistics stay put."""
        if self._freeze_pattern is None:
            return
        for layer in self.submodules:
            if isinstance(layer, keras.layers.BatchNormalization) and layer.weights and \
                    self.is_frozen(layer.weights[0]):
                layer.trainable = False

    @property
    def variables_to_train(self) -> List[tf.Variable]:
        return [v for v in self.trainable_variables if not self.is_frozen(v)]

    def l2_loss(self, variables: List[tf.Variable]) -> tf.Tensor:
        """weight_decay * sum(v^2) / 2 over the conv kernels among `variables` (float32)."""
        kernels = [v for v in variables if _L2_VARIABLE_PATTERN.match(variable_name(v))]
        if not kernels or not self.config.weight_decay:
            return tf.constant(0.0)
        return self.config.weight_decay * tf.add_n(
            [tf.nn.l2_loss(tf.cast(v, tf.float32)) for v in kernels])

    # --- compile -------------------------------------------------------------
    def compile(self, optimizer=None, loss=None, steps_per_epoch: Optional[int] = None,
                steps_per_execution=None, jit_compile=None, **kwargs):
        """Builds optimizer, schedule and losses from the config unless given.

        Args:
          optimizer: overrides `get_optimizer(config, steps_per_epoch)`.
          loss: overrides the DetectionLoss; called as loss(labels, class_outputs, box_outputs)
            and returning a dict with at least "det_loss".
          steps_per_epoch: sets the learning-rate schedule (default config.steps_per_epoch).
          steps_per_execution, jit_compile: default to the config's values.

        Keras 3 optimizers, Keras losses and compiled metrics stop with one line (see
        training/keras3_objects.py).
        """
        check_compile_arguments(optimizer, loss, kwargs.get("metrics"),
                                kwargs.get("weighted_metrics"))
        steps = steps_per_epoch or self.config.get("steps_per_epoch")
        self._batch_norm_fixed_from = batch_norm_fixed_from(self.config, steps)
        if optimizer is None:
            from efficientdet_keras.training.optimizers import get_optimizer
            if not steps:
                raise ValueError("compile() needs steps_per_epoch (or config.steps_per_epoch) to "
                                 "build the learning-rate schedule")
            optimizer = get_optimizer(self.config, int(steps), lr_scale=self.nan_recovery.lr_scale,
                                      pace=self.schedule_pace)
        if loss is not None:
            self.detection_loss = loss
        super().compile(
            optimizer=optimizer,
            steps_per_execution=steps_per_execution or self.config.steps_per_execution,
            jit_compile=self.config.jit_compile if jit_compile is None else jit_compile, **kwargs)
        # Slots now, not in the first trace: a tf.function whose first trace creates variables
        # is traced a second time, which doubled the time to the first training step.
        with self.distribute_strategy.scope():
            self.optimizer.build(self.variables_to_train)

    # --- fit and evaluate: their steps run with the config's Grappler passes off -----
    # Callbacks of Keras 3 are run or refused at the door (training/keras3_objects.py).
    def fit(self, *args, **kwargs):
        kwargs["callbacks"] = door_callbacks(kwargs.get("callbacks"), "fit", self.optimizer)
        try:
            with grappler_passes_off(resolve_passes(self.config.get("grappler_off"))):
                return super().fit(*args, **kwargs)
        finally:  # Keras skips on_train_end when fit raises: the handlers go back here,
            # and the backup being written is written before fit ends.
            release_signal_handlers(kwargs.get("callbacks"))
            finish_backup_writes(kwargs.get("callbacks"))

    def evaluate(self, *args, **kwargs):
        kwargs["callbacks"] = door_callbacks(kwargs.get("callbacks"), "evaluate")
        with grappler_passes_off(resolve_passes(self.config.get("grappler_off"))):
            return super().evaluate(*args, **kwargs)

    def predict(self, *args, **kwargs):
        kwargs["callbacks"] = door_callbacks(kwargs.get("callbacks"), "predict")
        return super().predict(*args, **kwargs)

    # --- metrics ---------------------------------------------------------------
    def _update_trackers(self, values: Dict[str, tf.Tensor],
                         counted: Optional[Dict[str, tf.Tensor]] = None) -> Dict[str, tf.Tensor]:
        """Epoch means of the step values (what the progress bar and History show).

        counted: {name: scalar bool}; a value whose entry is False is left out of its mean.
        """
        results = {}
        for tracker in self.loss_trackers:
            if tracker.name in values:
                value, keep = values[tracker.name], (counted or {}).get(tracker.name)
                if keep is None:
                    tracker.update_state(value)
                else:  # A zero weight alone would still add NaN * 0 = NaN to the sum.
                    tracker.update_state(tf.where(keep, value, tf.zeros_like(value)),
                                         sample_weight=tf.cast(keep, value.dtype))
                results[tracker.name] = tracker.result()
        return results

    @property
    def metrics(self):
        return self.loss_trackers + [self.nonfinite_tracker] + super().metrics

    # --- the steps ---------------------------------------------------------------
    def _detection_losses(self, labels, class_outputs, box_outputs):
        """Detection losses whose sum over replicas is the global-batch loss."""
        replica = tf.distribute.get_replica_context()
        positives = tf.reduce_sum(tf.cast(labels["num_positives"], tf.float32))
        global_positives = replica.all_reduce(tf.distribute.ReduceOp.SUM, positives)
        labels = dict(labels, num_positives=global_positives)
        return self.detection_loss(labels, class_outputs, box_outputs)

    @staticmethod
    def _global_sums(losses: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
        replica = tf.distribute.get_replica_context()
        return {name: replica.all_reduce(tf.distribute.ReduceOp.SUM, value)
                for name, value in losses.items()}

    # Traced as written: the steps use tf.cond and Python loops over Python lists only, and
    # AutoGraph's conversion of every layer call they reach is a large share of the first
    # step's trace. Layers called from here are not converted either.
    @tf.autograph.experimental.do_not_convert
    def train_step(self, data):
        # Around the whole step: grad_checkpoint's recomputed forwards need the same mode.
        with moving_statistics_while(self._batch_norm_fixed_now()):
            return self._train_step(data)

    def _batch_norm_fixed_now(self) -> Optional[tf.Tensor]:
        """Whether this step is among the last batch_norm_fixed_epochs of the planned
        schedule (as paced by a time budget), or None when the key is off."""
        if self._batch_norm_fixed_from is None:
            return None
        position = self.schedule_pace.position(self.optimizer.iterations)
        return position >= self._batch_norm_fixed_from

    def _train_step(self, data):
        images, labels = data
        replica = tf.distribute.get_replica_context()
        variables = self.variables_to_train
        optimizer = self.optimizer
        # Read before the forward pass updates them, to undo that on a non-finite step.
        statistics = [tf.identity(v) for v in self._batch_norm_statistics]
        if is_pruning(self.config):  # tfmot's step: masks updated and applied, once per step.
            from efficientdet_keras.optimization.pruning_keras import update_masks
            update_masks(self, optimizer.iterations + 1)
        with tf.GradientTape() as tape:
            class_outputs, box_outputs = self(images, training=True)
            losses = self._detection_losses(labels, class_outputs, box_outputs)
            reg_l2_loss = self.l2_loss(variables)
            # Gradients are summed over replicas: each carries 1/N of the L2 term.
            total = losses["det_loss"] + reg_l2_loss / replica.num_replicas_in_sync
            scaled = (optimizer.get_scaled_loss(total)
                      if isinstance(optimizer, keras.mixed_precision.LossScaleOptimizer) else total)
        grads = tape.gradient(scaled, variables)
        if isinstance(optimizer, keras.mixed_precision.LossScaleOptimizer):
            grads = optimizer.get_unscaled_gradients(grads)
        grads = replica.all_reduce(tf.distribute.ReduceOp.SUM, grads)
        grads, gradient_norm = clip_gradients(grads, self.config.clip_gradients_norm,
                                              self.config.clip_gradients_per_tensor)

        logs = self._global_sums(losses)
        logs["reg_l2_loss"] = reg_l2_loss
        logs["loss"] = logs["det_loss"] + reg_l2_loss
        logs["gradient_norm"] = gradient_norm
        # A step after a non-finite one changes nothing either: NaNGuard may read the record
        # only some steps later (or after the rest of a steps_per_execution call).
        stopped = self.nonfinite.stopped
        finite = self._step_is_finite(logs)
        healthy = finite & tf.logical_not(stopped)
        self.nonfinite.record(tf.logical_not(finite | stopped), optimizer.iterations + 1, logs)
        with tf.init_scope():  # Slots made outside the cond: there even when step 1 is skipped.
            optimizer.build(variables)
        run_cond(healthy, self._apply_update, self._restore_statistics, grads, statistics)
        if self.ema is not None:
            # After the cond, which orders it after the update or the restored statistics; a
            # skipped step averages nothing. Out of the cond, its hundreds of shadows and
            # sources are not branch inputs, which keeps the first step's trace short.
            self.ema.update(optimizer.iterations, apply=healthy)

        counted = {name: healthy for name in logs}
        counted["gradient_norm"] = healthy & tf.math.is_finite(gradient_norm)
        logs = self._update_trackers(logs, counted)
        self.nonfinite_tracker.update_state(tf.cast(tf.logical_not(finite | stopped), tf.float32))
        logs["nonfinite_steps"] = self.nonfinite_tracker.result()
        logs["learning_rate"] = self._current_learning_rate()
        if isinstance(optimizer, keras.mixed_precision.LossScaleOptimizer):
            logs["loss_scale"] = tf.cast(optimizer.loss_scale, tf.float32)  # After this step.
        return logs

    # --- the NaN guard -------------------------------------------------------------
    @property
    def _batch_norm_statistics(self) -> List[tf.Variable]:
        return [v for v in self.non_trainable_variables if is_batch_norm_statistic(v)]

    def _step_is_finite(self, logs: Dict[str, tf.Tensor]) -> tf.Tensor:
        """True unless a loss term, or the gradient norm, is NaN or inf (scalar bool).

        Under dynamic loss scaling a non-finite gradient with a finite loss is taken for a
        float16 overflow, which the LossScaleOptimizer skips itself while lowering its
        scale, as long as the scale can explain it (NonFiniteRecord.overflow_explains).
        """
        losses_finite = tf.reduce_all(tf.stack(
            [tf.reduce_all(tf.math.is_finite(value)) for name, value in logs.items()
             if name != "gradient_norm"]))
        gradient_finite = tf.math.is_finite(logs["gradient_norm"])
        if not self._scales_loss_dynamically:
            return losses_finite & gradient_finite
        overflow = losses_finite & tf.logical_not(gradient_finite)
        explained = self.nonfinite.overflow_explains(overflow, self.optimizer.loss_scale)
        return losses_finite & (gradient_finite | explained)

    @property
    def _scales_loss_dynamically(self) -> bool:
        optimizer = self.optimizer
        return isinstance(optimizer, keras.mixed_precision.LossScaleOptimizer) and \
            optimizer.dynamic

    def _apply_update(self, grads, statistics) -> None:
        """A healthy step: the optimizer update (the EMA follows, in train_step)."""
        del statistics
        self.optimizer.apply_gradients(zip(grads, self.variables_to_train),
                                       skip_gradients_aggregation=True)

    def _restore_statistics(self, grads, statistics) -> None:
        """A skipped step: the BatchNorm statistics its forward pass moved are put back."""
        del grads
        for variable, value in zip(self._batch_norm_statistics, statistics):
            variable.assign(value)

    @tf.autograph.experimental.do_not_convert
    def test_step(self, data):
        images, labels = data
        class_outputs, box_outputs = self(images, training=False)
        logs = self._global_sums(self._detection_losses(labels, class_outputs, box_outputs))
        reg_l2_loss = self.l2_loss(self.variables_to_train)
        logs["reg_l2_loss"] = reg_l2_loss
        logs["loss"] = logs["det_loss"] + reg_l2_loss
        return self._update_trackers(logs)

    def _current_learning_rate(self) -> tf.Tensor:
        """The rate of the step just taken (Keras keeps a schedule's value in a variable)."""
        optimizer = self.optimizer
        if isinstance(optimizer, keras.mixed_precision.LossScaleOptimizer):
            optimizer = optimizer.inner_optimizer
        # A tensor: cast alone would return the variable itself, which later steps change.
        return tf.cast(tf.convert_to_tensor(optimizer.learning_rate), tf.float32)
