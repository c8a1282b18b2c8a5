"""What the host spends to feed an accelerator: the training input pipeline's images per
CPU-second, this package's and the reference implementation's side by side (bench.py
--what=host).

Each side runs in a fresh process of its own (`python benchmarks/host_feed.py package|reference
TFRECORDS SIZE BATCH BATCHES`), alternating, on the same TFRecords: the process counts the CPU
seconds (user and system, every thread) it spends producing BATCHES batches after a warm-up,
and prints one JSON line. The reference's side runs in the environment that
`../shared/reference/automl/setup.sh` builds (its `python` wrapper); without it that side is
skipped with one line.
"""

import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# The reference environment: setup.sh's default folder, or $EFFICIENTDET_REFERENCE.
REFERENCE_ENV = os.environ.get("EFFICIENTDET_REFERENCE", os.path.join(
    os.environ.get("TMPDIR", "/tmp"), "efficientdet-reference"))
# Batches read before the count starts: traced functions, filled shuffle and prefetch buffers.
WARMUP_BATCHES = 8


def cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


def images_per_cpu_second(iterator, batches: int, batch_size: int) -> dict:
    """Reads WARMUP_BATCHES, then `batches` batches from `iterator`; the images per CPU-second
    and per wall second of the second part."""
    for _ in range(WARMUP_BATCHES):
        next(iterator)
    cpu, wall = cpu_seconds(), time.perf_counter()
    for _ in range(batches):
        next(iterator)
    cpu, wall = cpu_seconds() - cpu, time.perf_counter() - wall
    images = batches * batch_size
    return {"images_per_cpu_second": images / cpu, "images_per_second": images / wall,
            "cpu_ms_per_image": 1e3 * cpu / images}


def package_iterator(tfrecords: str, image_size: int, batch_size: int):
    """The package's training pipeline at its defaults (flip and scale jitter), as fit gets it."""
    sys.path.insert(0, os.path.dirname(HERE))
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    from efficientdet_keras import get_efficientdet_config
    from efficientdet_keras.data.pipeline import InputPipeline
    from efficientdet_keras.data.sources import TFRecordSource

    config = get_efficientdet_config("efficientdet-d0")
    config.override({"image_size": image_size, "batch_size": batch_size, "num_classes": 90})
    return iter(InputPipeline(config, TFRecordSource(tfrecords), is_training=True, seed=0)())


def reference_iterator(tfrecords: str, image_size: int, batch_size: int):
    """The reference's InputReader at its defaults (flip and scale jitter), on the same
    records (run with the reference environment's python)."""
    import dataloader  # noqa: F401 (the reference's modules, on its PYTHONPATH)
    import hparams_config

    config = hparams_config.get_detection_config("efficientdet-d0")
    config.override({"image_size": image_size, "num_classes": 90})
    params = config.as_dict()
    reader = dataloader.InputReader(tfrecords, is_training=True)
    return iter(reader(params, batch_size=batch_size))


def reference_python() -> str:
    """The reference environment's python wrapper, or '' when it is not built."""
    path = os.path.join(REFERENCE_ENV, "python")
    return path if os.access(path, os.X_OK) else ""


def measure(side: str, tfrecords: str, image_size: int, batch_size: int, batches: int) -> dict:
    """One fresh process of `side` ('package' or 'reference'); its JSON result."""
    python = sys.executable if side == "package" else reference_python()
    command = [python, os.path.abspath(__file__), side, tfrecords, str(image_size),
               str(batch_size), str(batches)]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError("the %s pipeline failed (exit status %d):\n%s"
                           % (side, done.returncode, done.stderr[-3000:]))
    return json.loads(lines[-1])


def side_by_side(tfrecords: str, image_size: int, batch_size: int, batches: int,
                 rounds: int) -> dict:
    """{side: [result of each round]} for 'package' and, when its environment is built,
    'reference': `rounds` rounds, the two sides alternating within each."""
    sides = ["package"] + (["reference"] if reference_python() else [])
    results = {side: [] for side in sides}
    for _ in range(rounds):
        for side in sides:
            results[side].append(measure(side, tfrecords, image_size, batch_size, batches))
    return results


def main(argv) -> None:
    side, tfrecords, image_size, batch_size, batches = argv[1:6]
    make = package_iterator if side == "package" else reference_iterator
    iterator = make(tfrecords, int(image_size), int(batch_size))
    print(json.dumps(images_per_cpu_second(iterator, int(batches), int(batch_size))))


if __name__ == "__main__":
    main(sys.argv)
