"""The class-rows benchmark: fine-tuning from a checkpoint that knows some of the data's classes
by name, with its class rows carried over by name against the other ways of starting the head.

A "source" model learns three of the synthetic shapes, named circle, square and cross
(short_run.yaml, from scratch). The "target" data draws square, triangle and circle, numbered in
that order: the source knows two of its three classes by name, under other ids, and has as many
classes. Each arm fine-tunes the source checkpoint on the target data for the same few steps
with the same seed and scores COCO AP on the target's validation images:

  by_name   the default: square and circle start from the source's rows, triangle near the
            prior;
  skipped   no class carried, all near the prior (the target's names changed so that none
            matches), as a head of another class count starts;
  random    no class carried, the class-prediction rows at the initializer's own random
            values (var_exclude_expr on them), whose logits start far from the prior;
  by_count  --noclass_rows_by_name: equal counts take the whole head, each class starting from
            whatever the source had at its id (square from circle's row, and so on).

Used by `python benchmarks/bench.py --what=class_rows`; plain functions, no flags.
"""

import dataclasses
import os
from typing import Dict, List

from benchmarks.common import scratch_dir, training_run
from efficientdet_keras.config import PACKAGED_HPARAMS_DIR

SOURCE_CLASSES = {1: "circle", 2: "square", 3: "cross"}
TARGET_CLASSES = {1: "square", 2: "triangle", 3: "circle"}
IMAGE_SIZE = 128
ARMS = {
    "by_name": {"class_rows_by_name": True},
    "skipped": {"class_rows_by_name": True,
                "label_map": {k: "new " + name for k, name in TARGET_CLASSES.items()}},
    "random": {"class_rows_by_name": False,
               "var_exclude_expr": "class_net/class-predict/(pointwise_kernel|kernel|bias)"},
    "by_count": {"class_rows_by_name": False},
}


@dataclasses.dataclass(frozen=True)
class ClassRowsSettings:
    """The benchmark's sizes: source training steps, fine-tuning steps, images, seeds."""
    source_steps: int = 240
    finetune_steps: int = 40
    train_images: int = 320
    val_images: int = 96
    seeds: tuple = (0, 1)
    batch_size: int = 8
    overrides: str = ""  # --hparams, on top of short_run.yaml for every model.


def shapes_style(classes: Dict[int, str]):
    """The demo's shapes, drawn and named as `classes` says (ids 1..n)."""
    from efficientdet_keras.data.synthetic import SHAPES, SYNTHETIC_LABEL_MAP, shape_mask
    shape_id = {name: k for k, name in SYNTHETIC_LABEL_MAP.items()}
    return dataclasses.replace(
        SHAPES, label_map=dict(classes), name="shapes-" + "-".join(classes.values()),
        mask=lambda class_id, size: shape_mask(shape_id[classes[class_id]], size))


def _config(classes: Dict[int, str], settings: ClassRowsSettings, steps: int, **overrides):
    from efficientdet_keras import get_efficientdet_config
    config = get_efficientdet_config("efficientdet-d0")
    config.override(os.path.join(PACKAGED_HPARAMS_DIR, "short_run.yaml"))
    config.override({"image_size": IMAGE_SIZE, "num_classes": len(classes),
                     "label_map": dict(classes), "batch_size": settings.batch_size,
                     "num_epochs": 1, "steps_per_epoch": steps, **overrides})
    config.override(settings.overrides or None)
    return config


def _dataset(data_dir: str, classes: Dict[int, str], settings: ClassRowsSettings):
    from efficientdet_keras.data.synthetic import write_synthetic_dataset
    style = shapes_style(classes)
    return write_synthetic_dataset(os.path.join(data_dir, style.name), settings.train_images,
                                   settings.val_images, image_size=IMAGE_SIZE, style=style)


def train_source(data_dir: str, settings: ClassRowsSettings, seed: int, log=print) -> str:
    """Trains the source model and returns its run folder (config.yaml and a checkpoint)."""
    from efficientdet_keras.checkpoint import save_ckpt
    from efficientdet_keras.training.runtime import run_settings
    config = _config(SOURCE_CLASSES, settings, settings.source_steps)
    data = _dataset(data_dir, SOURCE_CLASSES, settings)
    run = training_run(config, data, settings.source_steps, seed=seed)
    with run_settings(seed, False):
        model = run.build_model()
        model.fit(run.train_pipeline()(), epochs=1, steps_per_epoch=settings.source_steps,
                  verbose=0)
        folder = scratch_dir("class_rows_source_")
        config.save_yaml(os.path.join(folder, "config.yaml"))
        ema = model.ema.values_by_name() if model.ema is not None else None
        save_ckpt(model, os.path.join(folder, "ckpt-1"), ema_values=ema)
    log("source (%s) trained %d steps, seed %d" % (", ".join(SOURCE_CLASSES.values()),
                                                   settings.source_steps, seed))
    return folder


def fine_tune(source: str, arm: str, data_dir: str, settings: ClassRowsSettings,
              seed: int) -> float:
    """COCO AP on the target's validation images after the arm's fine-tune of `source`."""
    import tf_keras as keras

    from efficientdet_keras.training.callbacks.coco_evaluation import COCOCallback
    from efficientdet_keras.training.run import TrainingRun
    from efficientdet_keras.training.runtime import run_settings
    from efficientdet_keras.data.sources import TFRecordSource
    config = _config(TARGET_CLASSES, settings, settings.finetune_steps, **ARMS[arm])
    data = _dataset(data_dir, TARGET_CLASSES, settings)
    run = TrainingRun(config, scratch_dir("class_rows_%s_" % arm),
                      TFRecordSource(data.train_tfrecord), val_source=TFRecordSource(
                          data.val_tfrecord), val_json=data.val_json,
                      steps_per_epoch=settings.finetune_steps, seed=seed,
                      pretrained_ckpt=source)
    with run_settings(seed, False):
        model = run.build_model()
        val_data, evaluator = run.validation_data()
        history = model.fit(run.train_pipeline()(), epochs=1,
                            steps_per_epoch=settings.finetune_steps,
                            callbacks=[COCOCallback(config, val_data, evaluator)], verbose=0)
        keras.backend.clear_session()
    return float(history.history["val_AP"][-1])


def bench_class_rows(data_dir: str, settings: ClassRowsSettings = ClassRowsSettings(),
                     log=print) -> List[dict]:
    """Each seed: the source, then every arm's fine-tune; prints and returns the rows
    ({"seed", "arm", "AP"})."""
    rows = []
    for seed in settings.seeds:
        source = train_source(data_dir, settings, seed, log)
        for arm in ARMS:
            ap = fine_tune(source, arm, data_dir, settings, seed)
            rows.append({"seed": seed, "arm": arm, "AP": round(ap, 4)})
            log("seed %d %-9s AP %.3f after %d steps" % (seed, arm, ap,
                                                         settings.finetune_steps))
    return rows


ARM_LABELS = {
    "by_name": "carried by name (the default)",
    "skipped": "none carried, all near the prior (as a head of another class count)",
    "random": "none carried, rows at the initializer's scale (`var_exclude_expr` on them)",
    "by_count": "taken by class count (`--noclass_rows_by_name`)",
}


def summary(rows: List[dict], settings: ClassRowsSettings):
    """The table: (columns, one row of cells per arm) with each seed's AP and the median."""
    import statistics
    seeds = sorted({r["seed"] for r in rows})
    columns = ["class rows, then %d fine-tuning steps" % settings.finetune_steps] + [
        "AP, seed %d" % seed for seed in seeds] + ["median AP"]
    cells = []
    for arm in ARMS:
        aps = {r["seed"]: r["AP"] for r in rows if r["arm"] == arm}
        cells.append([ARM_LABELS[arm]] + ["%.3f" % aps[seed] for seed in seeds] +
                     ["%.3f" % statistics.median(aps.values())])
    return columns, cells
