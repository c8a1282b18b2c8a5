"""EpochTensorBoard: Keras' TensorBoard callback without summary calls that record nothing.

Keras calls every callback's batch hooks once any callback of the list has them (the NaN
guard, the step backup and the signal handler do). tf_keras' TensorBoard then writes each
step's logs as `batch_<name>` scalars at every step's end, also with update_freq="epoch",
where no writer is set and nothing is recorded: host work after every step for nothing.
EpochTensorBoard leaves the step's logs out of that hook under update_freq="epoch"; the
rest of it still runs (the training graph after the first step, profile_batch's trace,
steps per second when asked), and the epoch scalars are written as before.
"""

import tf_keras as keras


class EpochTensorBoard(keras.callbacks.TensorBoard):
    """keras.callbacks.TensorBoard (same arguments) that, with update_freq="epoch" (its
    default), makes no per-step summary calls."""

    def on_train_batch_end(self, batch, logs=None):
        super().on_train_batch_end(batch, None if self.update_freq == "epoch" else logs)
