"""The short-run benchmark: D0 from scratch on small synthetic datasets, AP by epoch.

Two datasets, each trained with the preset a user would pick for it:
  demo    the demo's shapes at 256 px, hparams/demo.yaml (3 epochs of 80 steps, batch 8);
  glyphs  benchmarks/synthetic_glyphs.py (made to look unlike the demo) at 128 px, 512 training and
          96 validation images, hparams/short_run.yaml, 8 epochs of 64 steps, batch 8.
Before training, the anchors are set as `efficientdet-check-data` recommends for the
dataset's boxes (anchor_fit.recommend_anchors; the glyphs get anchor_scale 3, the demo keeps
its anchors). Each epoch ends with COCO AP and AP50 of the EMA weights, the training loss (raw
weights, training mode, averaged over the epoch) and the inference-mode validation
losses of the raw and the EMA weights: their ratios to the training loss show how well
inference-mode BatchNorm describes what the network saw in training.

Each run is the library's training.run.TrainingRun (its trainer, training input and validation
data) with COCO evaluation as its only callback. Used by `python benchmarks/bench.py
--what=short_runs`; plain functions, no flags.
"""

import dataclasses
import os
import time
from typing import Dict, List

import tf_keras as keras

from benchmarks.common import training_run
from efficientdet_keras.config import PACKAGED_HPARAMS_DIR

# name -> (hparams file, dataset style name, image size, train images, val images, epochs,
# steps per epoch)
SHORT_RUNS = {
    "demo": ("demo.yaml", "shapes", 256, 1000, 100, 3, 80),
    "glyphs": ("short_run.yaml", "glyphs", 128, 512, 96, 8, 64),
}


@dataclasses.dataclass
class EpochResult:
    """One epoch of a short run."""
    epoch: int
    steps: int
    seconds: float
    loss: float  # Raw weights, training mode, the epoch's mean.
    val_loss: float  # Raw weights, inference mode, on the validation split.
    val_ema_loss: float  # EMA weights (what AP measures), inference mode.
    ap: float  # EMA weights.
    ap50: float

    @property
    def loss_ratio(self) -> float:
        """Inference-mode validation loss of the raw weights / their training loss."""
        return self.val_loss / self.loss if self.loss else float("nan")

    @property
    def ema_loss_ratio(self) -> float:
        """The same for the EMA weights, the ones evaluated and exported."""
        return self.val_ema_loss / self.loss if self.loss else float("nan")


def short_run_config(name: str, overrides=None):
    """The config of one short run: D0, its preset file, its dataset's classes and size."""
    from efficientdet_keras import get_efficientdet_config
    from efficientdet_keras.data.synthetic import SHAPES
    from benchmarks.synthetic_glyphs import GLYPHS
    hparams_file, style_name, image_size, _, _, epochs, steps = SHORT_RUNS[name]
    style = {"shapes": SHAPES, "glyphs": GLYPHS}[style_name]
    config = get_efficientdet_config("efficientdet-d0")
    config.override(os.path.join(PACKAGED_HPARAMS_DIR, hparams_file))
    config.override({"image_size": image_size, "num_classes": len(style.label_map),
                     "label_map": dict(style.label_map), "num_epochs": epochs,
                     "steps_per_epoch": steps, "batch_size": 8})
    config.override(overrides)
    return config, style


def run_short_run(name: str, data_dir: str, overrides=None, seed: int = 0,
                  log=print, box_target_offset: float = 0.0) -> List[EpochResult]:
    """Trains one short run from scratch and returns its epochs (see the module doc).

    Args:
      data_dir: where the dataset is written (reused when already there).
      overrides: config overrides on top of the preset ("k=v,..." or a dict).
      box_target_offset: added to every training box target (e.g. 1e-7, about one float32
        rounding step): shows how far a difference in the last bit carries.
    """
    from efficientdet_keras.data.synthetic import write_synthetic_dataset
    from efficientdet_keras.training.callbacks.coco_evaluation import COCOCallback
    from efficientdet_keras.training.runtime import run_settings

    config, style = short_run_config(name, overrides)
    _, _, image_size, num_train, num_val, _, _ = SHORT_RUNS[name]
    data = write_synthetic_dataset(os.path.join(data_dir, name), num_train, num_val,
                                   image_size=image_size, style=style)
    anchors = recommended_anchors(config, data.train_json, image_size)
    if anchors is not None:
        log("%s: anchors as efficientdet-check-data recommends: %s" % (name, anchors))
        config.override(anchors)
    run = training_run(config, data, config.steps_per_epoch, seed=seed, validation=True)
    with run_settings(seed, False):
        train_data = offset_box_targets(run.train_pipeline()(), box_target_offset)
        val_data, evaluator = run.validation_data()
        model = run.build_model()
        callbacks = [COCOCallback(config, val_data, evaluator)]
        timer = EpochTimer()
        history = model.fit(train_data, epochs=config.num_epochs,
                            steps_per_epoch=config.steps_per_epoch, validation_data=val_data,
                            callbacks=callbacks + [timer], verbose=0)
        keras.backend.clear_session()
    logs = history.history
    results = []
    for i in range(len(logs["loss"])):
        results.append(EpochResult(i + 1, (i + 1) * config.steps_per_epoch, timer.seconds[i],
                                   logs["loss"][i], logs["val_loss"][i],
                                   logs["val_ema_loss"][i], logs["val_AP"][i],
                                   logs["val_AP50"][i]))
        log(format_epoch(name, results[-1]))
    return results


def offset_box_targets(dataset, offset: float):
    """The training batches with `offset` added to every box target (none when 0)."""
    if not offset:
        return dataset

    def shifted(images, labels):
        return images, {key: value + offset if key.startswith("box_targets_") else value
                        for key, value in labels.items()}
    return dataset.map(shifted)


def recommended_anchors(config, coco_json: str, written_size: int):
    """The --hparams string of the anchors `efficientdet-check-data` would recommend for the
    boxes of a square synthetic dataset at the config's input size, or None to keep them."""
    import json

    import numpy as np

    from efficientdet_keras.detection.anchor_fit import (AnchorSettings, recommend_anchors,
                                                         suggest_anchors)
    with open(coco_json) as f:
        xywh = np.array([a["bbox"] for a in json.load(f)["annotations"]], np.float64)
    scale = float(config.image_size[0]) / written_size
    boxes = np.stack([xywh[:, 1], xywh[:, 0], xywh[:, 1] + xywh[:, 3],
                      xywh[:, 0] + xywh[:, 2]], axis=1) * scale
    current = AnchorSettings.from_config(config)
    recommended = recommend_anchors(suggest_anchors(boxes, current), current)
    return None if recommended is None else recommended.settings.hparams()


class EpochTimer(keras.callbacks.Callback):
    """Records each epoch's wall time (training and evaluation) in `seconds`."""

    def __init__(self):
        super().__init__()
        self.seconds: List[float] = []
        self._start = 0.0

    def on_epoch_begin(self, epoch, logs=None):
        self._start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.seconds.append(time.perf_counter() - self._start)


HEADER = "%-7s %5s %5s %7s %6s %9s %6s %8s %6s %6s %6s" % (
    "run", "epoch", "steps", "seconds", "loss", "val_loss", "ratio", "ema_loss", "ratio", "AP",
    "AP50")


def format_epoch(name: str, result: EpochResult) -> str:
    return "%-7s %5d %5d %7.0f %6.3f %9.3f %6.2f %8.3f %6.2f %6.3f %6.3f" % (
        name, result.epoch, result.steps, result.seconds, result.loss, result.val_loss,
        result.loss_ratio, result.val_ema_loss, result.ema_loss_ratio, result.ap, result.ap50)


def summary_line(name: str, results: List[EpochResult]) -> str:
    last = results[-1]
    return ("%s: AP %.3f, AP50 %.3f after %d steps; inference-mode validation loss / training "
            "loss: raw weights %.2f, EMA weights %.2f; %.1f min"
            % (name, last.ap, last.ap50, last.steps, last.loss_ratio, last.ema_loss_ratio,
               sum(r.seconds for r in results) / 60.0))


def bench_short_runs(names, data_dir: str, overrides: Dict = None) -> Dict[str, List[EpochResult]]:
    """Runs the named short runs one after another and prints the table and a summary."""
    print(HEADER)
    results = {name: run_short_run(name, data_dir, overrides) for name in names}
    for name, epochs in results.items():
        print(summary_line(name, epochs))
    return results
