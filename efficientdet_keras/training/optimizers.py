"""Optimizers and learning-rate schedules for training EfficientDet.

The recipe follows the original EfficientDet training:

* Linear scaling rule. `config.learning_rate` is tuned for a global batch of
  64 (`DEFAULT_BATCH_SIZE`); a different global batch multiplies it by
  `batch_size / 64`, so the step size per example stays about the same.
* Warmup. For the first `lr_warmup_epoch` epochs the rate grows linearly from
  `config.lr_warmup_init` to the (scaled) peak rate; large rates on a freshly
  initialised detector otherwise tend to diverge. As in the released
  EfficientDet, the warmup start is NOT scaled with the batch.
* Decay. After warmup, `lr_decay_method` decides the rest: "cosine" (half a
  cosine from the peak down to 0 at the last step), "stepwise" (x0.1 at
  `first_lr_drop_epoch`, x0.01 at `second_lr_drop_epoch`), "polynomial"
  (`(1 - progress) ** poly_lr_power`) or "constant".

Schedules take the optimizer's step counter (often an int64 tensor), compute in
float32, run inside `tf.function`, and serialise to plain numbers, so an
optimizer saved with a model can be rebuilt exactly.

Gradient clipping is not part of the optimizers: the trainer calls
`clip_gradients` (global norm, optionally each tensor first) after the
all-reduce, before `apply_gradients`.
"""

import math
from typing import List, Optional, Sequence, Tuple

import tensorflow as tf
import tf_keras as keras

from efficientdet_keras.config.precision import policy_name
from efficientdet_keras.training.schedule_pace import PacedSchedule, SchedulePace

DEFAULT_BATCH_SIZE = 64

LR_DECAY_METHODS = ("cosine", "stepwise", "polynomial", "constant")
OPTIMIZERS = ("sgd", "adam", "rmsprop")

_SERIALIZABLE_PACKAGE = "efficientdet_keras"


def scaled_learning_rates(config) -> Tuple[float, float]:
    """Returns (peak_lr, warmup_init_lr): the peak scaled to the global batch, the start as given.

    `config.batch_size` is the global batch (all replicas together);
    `config.learning_rate` is for a batch of `DEFAULT_BATCH_SIZE`.
    `config.lr_warmup_init` is the rate of step 0 whatever the batch (the
    released recipe scales only the peak).
    """
    scale = config.batch_size / DEFAULT_BATCH_SIZE
    return config.learning_rate * scale, config.lr_warmup_init


class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Base class: linear warmup, then the decay a subclass gives in `_after_warmup`.

    During steps [0, warmup_steps) the rate goes linearly from `warmup_init_lr`
    to `peak_lr`; from `warmup_steps` on it is `_after_warmup(step)`, which
    starts at `peak_lr`. `warmup_steps == 0` means no warmup at all.
    """

    def __init__(self, peak_lr: float, warmup_init_lr: float, warmup_steps: int,
                 total_steps: int, name: str = None):
        super().__init__()
        self.peak_lr = float(peak_lr)
        self.warmup_init_lr = float(warmup_init_lr)
        self.warmup_steps = int(warmup_steps)
        self.total_steps = int(total_steps)
        self.name = name or type(self).__name__

    def __call__(self, step):
        with tf.name_scope(self.name):
            step = tf.cast(step, tf.float32)
            # max(.., 1) keeps the division finite when there is no warmup; the
            # warmup branch is then never selected anyway.
            warmup_fraction = step / float(max(self.warmup_steps, 1))
            warmup_lr = self.warmup_init_lr + (self.peak_lr - self.warmup_init_lr) * warmup_fraction
            # tf.where, not a Python `if`: `step` is a tensor inside tf.function.
            return tf.where(step < float(self.warmup_steps), warmup_lr, self._after_warmup(step))

    def _after_warmup(self, step: tf.Tensor) -> tf.Tensor:
        raise NotImplementedError

    def _decay_progress(self, step: tf.Tensor) -> tf.Tensor:
        """Fraction of the decay done, 0 at warmup_steps, 1 at total_steps and after.

        When total_steps <= warmup_steps there is no room to decay: the decay
        counts as finished, so the rate after warmup is the decay's final value
        (0 for cosine and polynomial). Training stops at total_steps, so these
        values are never used in a real run; they are only finite and defined.
        """
        decay_steps = self.total_steps - self.warmup_steps
        if decay_steps <= 0:  # Python ints, fixed at construction.
            return tf.ones_like(step)
        progress = (step - float(self.warmup_steps)) / float(decay_steps)
        return tf.clip_by_value(progress, 0.0, 1.0)

    def get_config(self):
        return dict(peak_lr=self.peak_lr, warmup_init_lr=self.warmup_init_lr,
                    warmup_steps=self.warmup_steps, total_steps=self.total_steps,
                    name=self.name)


@keras.saving.register_keras_serializable(package=_SERIALIZABLE_PACKAGE)
class CosineDecaySchedule(WarmupSchedule):
    """Warmup, then `0.5 * peak * (1 + cos(pi * progress))`: peak to 0 at total_steps, 0 after."""

    def _after_warmup(self, step):
        return 0.5 * self.peak_lr * (1.0 + tf.cos(math.pi * self._decay_progress(step)))


@keras.saving.register_keras_serializable(package=_SERIALIZABLE_PACKAGE)
class StepwiseSchedule(WarmupSchedule):
    """Warmup, then peak; x0.1 from first_drop_step, x0.01 from second_drop_step.

    total_steps is kept for symmetry with the other schedules and not used.
    """

    def __init__(self, peak_lr: float, warmup_init_lr: float, warmup_steps: int,
                 total_steps: int, first_drop_step: int, second_drop_step: int,
                 name: str = None):
        super().__init__(peak_lr, warmup_init_lr, warmup_steps, total_steps, name)
        self.first_drop_step = int(first_drop_step)
        self.second_drop_step = int(second_drop_step)

    def _after_warmup(self, step):
        factor = tf.where(step >= float(self.second_drop_step), 0.01,
                          tf.where(step >= float(self.first_drop_step), 0.1, 1.0))
        return self.peak_lr * factor

    def get_config(self):
        return dict(super().get_config(), first_drop_step=self.first_drop_step,
                    second_drop_step=self.second_drop_step)


@keras.saving.register_keras_serializable(package=_SERIALIZABLE_PACKAGE)
class PolynomialSchedule(WarmupSchedule):
    """Warmup, then `peak * (1 - progress) ** power`: 0 at total_steps and after."""

    def __init__(self, peak_lr: float, warmup_init_lr: float, warmup_steps: int,
                 total_steps: int, power: float, name: str = None):
        super().__init__(peak_lr, warmup_init_lr, warmup_steps, total_steps, name)
        self.power = float(power)

    def _after_warmup(self, step):
        return self.peak_lr * tf.pow(1.0 - self._decay_progress(step), self.power)

    def get_config(self):
        return dict(super().get_config(), power=self.power)


@keras.saving.register_keras_serializable(package=_SERIALIZABLE_PACKAGE)
class ConstantSchedule(WarmupSchedule):
    """Warmup, then the peak rate for ever."""

    def _after_warmup(self, step):
        return tf.fill(tf.shape(step), self.peak_lr)


@keras.saving.register_keras_serializable(package=_SERIALIZABLE_PACKAGE)
class ScaledSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """`schedule(step) * scale`: NaN recovery lowers `scale`, a variable checkpoints hold.

    Args:
      schedule: the schedule being scaled.
      scale: a float32 tf.Variable (NaNRecoveryState.lr_scale) or a number.
    """

    def __init__(self, schedule: keras.optimizers.schedules.LearningRateSchedule, scale):
        super().__init__()
        self.schedule = schedule
        self.scale = scale

    def __call__(self, step):
        return self.schedule(step) * tf.cast(self.scale, tf.float32)

    def get_config(self):  # The scale as a number: a rebuilt optimizer starts from its value.
        return dict(schedule=keras.optimizers.schedules.serialize(self.schedule),
                    scale=float(self.scale))

    @classmethod
    def from_config(cls, config):
        return cls(keras.optimizers.schedules.deserialize(config["schedule"]), config["scale"])


def learning_rate_schedule(config, steps_per_epoch: int) -> WarmupSchedule:
    """Builds the schedule named by `config.lr_decay_method`.

    Epoch-valued keys (lr_warmup_epoch, first/second_lr_drop_epoch, num_epochs)
    become steps as `int(epochs * steps_per_epoch)`; rates come from
    `scaled_learning_rates(config)`.

    Raises:
      ValueError: steps_per_epoch < 1, or an unknown lr_decay_method.
    """
    if steps_per_epoch < 1:
        raise ValueError("steps_per_epoch must be at least 1, got %r" % (steps_per_epoch,))
    peak_lr, warmup_init_lr = scaled_learning_rates(config)

    def to_steps(epochs):
        return int(epochs * steps_per_epoch)

    common = dict(peak_lr=peak_lr, warmup_init_lr=warmup_init_lr,
                  warmup_steps=to_steps(config.lr_warmup_epoch),
                  total_steps=to_steps(config.num_epochs))
    method = config.lr_decay_method
    if method == "cosine":
        return CosineDecaySchedule(**common)
    if method == "stepwise":
        return StepwiseSchedule(first_drop_step=to_steps(config.first_lr_drop_epoch),
                                second_drop_step=to_steps(config.second_lr_drop_epoch), **common)
    if method == "polynomial":
        return PolynomialSchedule(power=config.poly_lr_power, **common)
    if method == "constant":
        return ConstantSchedule(**common)
    raise ValueError("Unknown lr_decay_method %r; choose one of %s"
                     % (method, ", ".join(LR_DECAY_METHODS)))


# Keras's own SGD and Adam update each variable with several small ops, which on a CPU cost
# more in executor overhead than in arithmetic, and lengthen tracing. TensorFlow's training
# kernels do the same update in one op.
# Same slots, names and math, so checkpoints and results do not change.

@keras.saving.register_keras_serializable(package=_SERIALIZABLE_PACKAGE)
class FusedSGD(keras.optimizers.SGD):
    """keras.optimizers.SGD whose dense momentum update is one ResourceApplyKerasMomentum op
    (m = momentum * m - lr * g; v += m, what Keras computes). Nesterov, no momentum and sparse
    gradients take Keras's own path."""

    def update_step(self, gradient, variable):
        if isinstance(gradient, tf.IndexedSlices) or self.nesterov or not self.momentum:
            return super().update_step(gradient, variable)
        m = self.momentums[self._index_dict[self._var_key(variable)]]
        return tf.raw_ops.ResourceApplyKerasMomentum(
            var=variable.handle, accum=m.handle, lr=tf.cast(self.learning_rate, variable.dtype),
            grad=gradient, momentum=tf.cast(self.momentum, variable.dtype), use_nesterov=False)


@keras.saving.register_keras_serializable(package=_SERIALIZABLE_PACKAGE)
class FusedAdam(keras.optimizers.Adam):
    """keras.optimizers.Adam whose dense update is one ResourceApplyAdam op (the same moment
    updates and bias-corrected step as Keras). AMSGrad, adaptive epsilon and sparse gradients
    take Keras's own path."""

    def update_step(self, gradient, variable):
        if isinstance(gradient, tf.IndexedSlices) or self.amsgrad or self.adaptive_epsilon:
            return super().update_step(gradient, variable)
        index = self._index_dict[self._var_key(variable)]
        dtype = variable.dtype
        local_step = tf.cast(self.iterations + 1, dtype)
        return tf.raw_ops.ResourceApplyAdam(
            var=variable.handle, m=self._momentums[index].handle,
            v=self._velocities[index].handle,
            beta1_power=tf.pow(tf.cast(self.beta_1, dtype), local_step),
            beta2_power=tf.pow(tf.cast(self.beta_2, dtype), local_step),
            lr=tf.cast(self.learning_rate, dtype), beta1=tf.cast(self.beta_1, dtype),
            beta2=tf.cast(self.beta_2, dtype), epsilon=tf.cast(self.epsilon, dtype),
            grad=gradient, use_nesterov=False)


def get_optimizer(config, steps_per_epoch: int, lr_scale: Optional[tf.Variable] = None,
                  pace: Optional[SchedulePace] = None) -> keras.optimizers.Optimizer:
    """Builds the optimizer named by `config.optimizer`, driven by `learning_rate_schedule`.

    "sgd" is FusedSGD with `config.momentum`; "adam" is FusedAdam with
    `beta_1 = config.momentum` (as the released trainer did) and Keras defaults
    otherwise (both compute Keras's update, fused); "rmsprop" is Keras's RMSprop
    with `config.momentum`, `rho = config.rmsprop_rho` and
    `epsilon = config.rmsprop_epsilon`. Gradient
    clipping is not set here (the trainer clips itself). When
    the precision policy is mixed_float16 the optimizer is wrapped in a
    `LossScaleOptimizer`, which float16 gradients need to avoid underflow:
    dynamic loss scaling, or the fixed scale `config.loss_scale` when it is a
    number; bfloat16 has float32's range and needs none.
    With `pace` (a SchedulePace) the schedule is a PacedSchedule at its pace (time_budget
    fits the decay into the budget with it); with `lr_scale` (a float32 variable) it is then
    a ScaledSchedule by it.

    Raises:
      ValueError: an unknown optimizer or lr_decay_method, or steps_per_epoch < 1.
    """
    name = config.optimizer
    if name not in OPTIMIZERS:
        raise ValueError("Unknown optimizer %r; choose one of %s" % (name, ", ".join(OPTIMIZERS)))
    schedule = learning_rate_schedule(config, steps_per_epoch)
    if pace is not None:
        schedule = PacedSchedule(schedule, pace)
    if lr_scale is not None:
        schedule = ScaledSchedule(schedule, lr_scale)
    if name == "sgd":
        optimizer = FusedSGD(schedule, momentum=config.momentum)
    elif name == "adam":
        optimizer = FusedAdam(schedule, beta_1=config.momentum)
    else:
        optimizer = keras.optimizers.RMSprop(schedule, rho=config.rmsprop_rho,
                                             momentum=config.momentum,
                                             epsilon=config.rmsprop_epsilon)
    if policy_name(config.mixed_precision) == "mixed_float16":  # Also True on a GPU.
        loss_scale = config.get("loss_scale")
        if loss_scale in (None, "dynamic"):
            optimizer = keras.mixed_precision.LossScaleOptimizer(optimizer)
        else:
            optimizer = keras.mixed_precision.LossScaleOptimizer(
                optimizer, dynamic=False, initial_scale=float(loss_scale))
    return optimizer


def clip_gradients(grads: Sequence[Optional[tf.Tensor]], clip_norm: Optional[float],
                   per_tensor: bool = False) -> Tuple[List[Optional[tf.Tensor]], tf.Tensor]:
    """Clips gradients to `clip_norm`: by their global norm, optionally each tensor first.

    Args:
      grads: gradients of any shapes (None entries stay None).
      clip_norm: the limit; None or <= 0 leaves the gradients unchanged.
      per_tensor: first scale each gradient whose own L2 norm exceeds clip_norm
        down to clip_norm, as the released EfficientDet trainer did, then clip
        the global norm.

    Returns:
      (the clipped gradients, shapes unchanged; the global norm before any clipping, float32).
      As tf.clip_by_global_norm, a non-finite global norm makes every gradient NaN.

    Each tensor's squared norm is computed once and the scales are worked out on the vector of
    them, so each gradient costs two ops (its norm and one multiply); tf.clip_by_norm plus
    tf.clip_by_global_norm take several times as many, each adding step and tracing time.
    """
    present = [g for g in grads if g is not None]
    if not present:
        return list(grads), tf.constant(0.0)
    squared = 2.0 * tf.stack([tf.nn.l2_loss(tf.cast(g, tf.float32)) for g in present])
    gradient_norm = tf.sqrt(tf.reduce_sum(squared))
    if not clip_norm or clip_norm <= 0:
        return list(grads), gradient_norm
    scales = tf.ones_like(squared)
    if per_tensor:  # A zero gradient has norm 0: its scale stays 1.
        scales = clip_norm / tf.maximum(tf.sqrt(squared), clip_norm)
    clipped_norm = tf.sqrt(tf.reduce_sum(squared * tf.square(scales)))
    global_scale = tf.where(tf.math.is_finite(clipped_norm),
                            clip_norm / tf.maximum(clipped_norm, clip_norm), float("nan"))
    factors = iter(tf.unstack(scales * global_scale))
    return [None if g is None else g * tf.cast(next(factors), g.dtype) for g in grads], \
        gradient_norm
