"""A learning-rate schedule whose remaining part can be run faster or slower, so that its
decay ends at the last step a time budget allows.

The schedule (warm-up, then cosine, stepwise, polynomial or constant) is planned for
num_epochs. With a time budget, StopAtTimeBudget (time_budget.py) measures the steps as the run
goes and calls `SchedulePace.fit` with the number of steps the budget has left: from the current
step on, the planned schedule is walked at `rate` of its steps per step, so its decay reaches
its end (0 for cosine) at the budget's last step instead of after num_epochs. The rate changes
no rate already used: the schedule goes on from where it stands, so the learning rate has no jump.
The warm-up keeps its length. The pace lives in the model's checkpoints, so a resumed run goes
on at the pace it had, and fits again from there with the budget it has left.
"""

from typing import Optional

import tensorflow as tf
import tf_keras as keras

from efficientdet_keras.training.state_variables import scalar_variable


class SchedulePace(tf.Module):
    """Where a run stands on its planned schedule.

    Before `anchor_step` the schedule runs as planned (position = step); from it on, the
    position is `anchor_position + (step - anchor_step) * rate`.

    Attributes:
      anchor_step, anchor_position, rate: float32 variables; (0, 0, 1) is the plan itself.
    """

    def __init__(self, anchor_step: float = 0.0, anchor_position: float = 0.0,
                 rate: float = 1.0):
        super().__init__(name="schedule_pace")
        with tf.init_scope():
            self.anchor_step = scalar_variable(float(anchor_step), tf.float32, "anchor_step")
            self.anchor_position = scalar_variable(float(anchor_position), tf.float32,
                                                   "anchor_position")
            self.rate = scalar_variable(float(rate), tf.float32, "rate")

    def position(self, step):
        """The planned schedule's step that `step` of the run stands at (float32)."""
        step = tf.cast(step, tf.float32)
        paced = self.anchor_position + (step - self.anchor_step) * self.rate
        return tf.where(step < self.anchor_step, step, paced)

    def values(self) -> dict:
        return {"anchor_step": float(self.anchor_step.numpy()),
                "anchor_position": float(self.anchor_position.numpy()),
                "rate": float(self.rate.numpy())}

    def fit(self, step: int, steps_left: float, warmup_steps: int, total_steps: int) -> float:
        """Paces the rest of the schedule so that it ends after `steps_left` more steps.

        Args:
          step: the run's next step (optimizer.iterations).
          steps_left: the steps the budget has room for from `step` on.
          warmup_steps, total_steps: the planned schedule's.

        Returns:
          The new rate (1: as planned; 2: the decay runs twice as fast). It is never below the
          rate that ends the schedule at total_steps: the run stops there whatever the budget.
        """
        anchor = max(float(step), float(warmup_steps))  # The warm-up keeps its length.
        position = float(warmup_steps) if step < warmup_steps else \
            float(self.position(float(step)).numpy())
        remaining = float(total_steps) - position
        if remaining <= 0:  # The decay is done: nothing is left to pace.
            return float(self.rate.numpy())
        end = min(float(step) + max(float(steps_left), 1.0), float(total_steps))
        rate = remaining / max(end - anchor, 1.0)
        self.anchor_step.assign(anchor)
        self.anchor_position.assign(position)
        self.rate.assign(rate)
        return rate


@keras.saving.register_keras_serializable(package="efficientdet_keras")
class PacedSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """`schedule(pace.position(step))`: the planned schedule at the pace SchedulePace sets.

    Args:
      schedule: a WarmupSchedule (optimizers.py), with warmup_steps and total_steps.
      pace: a SchedulePace, or its values as a dict (a rebuilt optimizer keeps them).
    """

    def __init__(self, schedule: keras.optimizers.schedules.LearningRateSchedule, pace):
        super().__init__()
        self.schedule = schedule
        self.pace = pace if isinstance(pace, SchedulePace) else SchedulePace(**pace)

    def __call__(self, step):
        return self.schedule(self.pace.position(step))

    def get_config(self):
        return dict(schedule=keras.optimizers.schedules.serialize(self.schedule),
                    pace=self.pace.values())

    @classmethod
    def from_config(cls, config):
        return cls(keras.optimizers.schedules.deserialize(config["schedule"]), config["pace"])


def paced_schedule(optimizer) -> Optional[PacedSchedule]:
    """The PacedSchedule driving `optimizer` (inside a loss-scale optimizer or a
    ScaledSchedule), or None when its learning rate is not paced."""
    optimizer = getattr(optimizer, "inner_optimizer", optimizer)
    schedule = getattr(optimizer, "_learning_rate", None)
    while schedule is not None and not isinstance(schedule, PacedSchedule):
        schedule = getattr(schedule, "schedule", None)
    return schedule
