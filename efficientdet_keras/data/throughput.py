"""How fast a training input pipeline makes images on this host, read on its own (as fast as
it comes, nothing consuming them)."""

import math
import time

# Batches read untimed first: tracing the maps, filling the shuffle and prefetch buffers.
WARMUP_BATCHES = 2
# The timed read takes at least this many batches, so a small batch is not timed over a
# handful of images.
MIN_TIMED_BATCHES = 3


def training_images_per_second(config, source, timed_images: int,
                               warmup_batches: int = WARMUP_BATCHES) -> float:
    """Images/s that the training InputPipeline of `config` makes from `source` (a
    data.sources source): warmup_batches untimed batches, then batches of config.batch_size
    holding at least `timed_images` images (and at least MIN_TIMED_BATCHES of them), timed."""
    from efficientdet_keras.data.pipeline import InputPipeline
    pipeline = InputPipeline(config, source, is_training=True, seed=0)
    batches = iter(pipeline())
    for _ in range(warmup_batches):
        next(batches)
    timed_batches = max(MIN_TIMED_BATCHES, math.ceil(timed_images / pipeline.batch_size))
    start = time.perf_counter()
    for _ in range(timed_batches):
        next(batches)
    return timed_batches * pipeline.batch_size / (time.perf_counter() - start)
