"""EpochProgbarLogger: fit's progress output without per-step work for a line per epoch."""

import numpy as np
import pytest
import tf_keras as keras

from efficientdet_keras.training.callbacks.progress import EpochProgbarLogger

EPOCHS, STEPS = 2, 3


class MetricsCounted(keras.Sequential):
    """A model that counts how often its metrics are asked for (Keras' progress logger
    asks after each step it updates)."""

    asked = 0

    @property
    def metrics(self):
        MetricsCounted.asked += 1
        return super().metrics


def fit(verbose, logger, capsys):
    """(times the metrics were asked for, what fit printed)."""
    model = MetricsCounted([keras.layers.Dense(1, input_shape=(2,))])
    model.compile(optimizer="sgd", loss="mse")
    batch_hooks = keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: None)
    MetricsCounted.asked = 0
    capsys.readouterr()
    model.fit(np.ones([STEPS * 2, 2], np.float32), np.zeros([STEPS * 2, 1], np.float32),
              batch_size=2, epochs=EPOCHS, verbose=verbose,
              callbacks=[batch_hooks] + ([logger] if logger else []))
    return MetricsCounted.asked, capsys.readouterr().out


@pytest.mark.quick
def test_epoch_lines_are_keras_own_without_per_step_work(capsys):
    asked_by_keras, printed_by_keras = fit(2, None, capsys)
    asked, printed = fit(2, EpochProgbarLogger(), capsys)
    assert asked_by_keras - asked == EPOCHS * STEPS  # Keras' logger asks after each step.
    strip = lambda out: [line.split(" - ")[0] for line in out.splitlines()]  # No timings.
    assert strip(printed) == strip(printed_by_keras)
    assert len([line for line in printed.splitlines() if "loss:" in line]) == EPOCHS


@pytest.mark.quick
def test_the_progress_bar_is_keras_own(capsys):
    asked, printed = fit(1, EpochProgbarLogger(), capsys)
    asked_by_keras, _ = fit(1, None, capsys)
    assert asked == asked_by_keras
    assert printed.count("%d/%d" % (STEPS, STEPS)) >= EPOCHS
