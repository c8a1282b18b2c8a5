"""EpochProgbarLogger: Keras' progress output, with no work after a step it draws nothing for.

Keras calls every callback's batch hooks once one callback of the list has them (the NaN
guard, the step backup and the signal handler do), and its progress logger then asks the model
for its metrics after every step, a walk over all of the network's layers, also when it prints
one line per epoch (verbose=2) or nothing (verbose=0). With the epoch's steps known, that line
needs nothing from the steps. Keras uses a ProgbarLogger found in the callback list instead of
its own.
"""

import tf_keras as keras


class EpochProgbarLogger(keras.callbacks.ProgbarLogger):
    """Keras' ProgbarLogger (counting steps, as fit's own) that skips its per-step update
    unless it draws a progress bar (verbose=1) or has to count the epoch's steps."""

    def __init__(self):
        super().__init__(count_mode="steps")

    def on_train_batch_end(self, batch, logs=None):
        if self.verbose == 1 or self.target is None:
            super().on_train_batch_end(batch, logs)
