"""Which weights a trained model answers with."""

import contextlib


@contextlib.contextmanager
def averaged_weights(model):
    """A context in which `model` holds its moving-average (EMA) weights when it keeps an
    average (`model.ema`, set by the trainer), and its own weights otherwise. The raw weights
    come back on exit, so training continues from them."""
    ema = getattr(model, "ema", None)
    with ema.swapped_in() if ema is not None else contextlib.nullcontext():
        yield
