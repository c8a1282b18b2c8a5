"""The learning guard: a training run small enough for every test run, whose loss and AP show
whether the demo recipe still learns as much as it did.

The run is `train()` on the demo's shapes with hparams/demo.yaml, a small network (one block per
backbone stage, a BiFPN of 16 channels and one repeat, one-layer heads) at 128 px, deterministic,
for one epoch of GUARD_STEPS steps, evaluated once (COCO AP of the EMA weights on the 20
validation images). tests/test_short_runs.py holds its band; `python benchmarks/bench.py
--what=learning_guard` measures the band over seeds, and the same run learning less (half the
steps, or half the learning rate), which the band must refuse.
"""

import dataclasses
from typing import Dict, List, Optional, Sequence

GUARD_STEPS = 150
GUARD_DEMO_IMAGES = 200  # 180 training and 20 validation images.
GUARD_HPARAMS = {"fpn_num_filters": 16, "fpn_cell_repeats": 1, "box_class_repeats": 1,
                 "backbone_blocks_per_stage": 1, "image_size": 128, "num_epochs": 1,
                 "steps_per_epoch": GUARD_STEPS, "deterministic": True,
                 # The demo's share in one epoch: its last of three with fixed BatchNorm.
                 "batch_norm_fixed_epochs": 1 / 3}
# Runs that learn less, to show the band refuses them: name -> hparams on top of the guard's.
LEARNING_LESS = {"half the steps": {"steps_per_epoch": GUARD_STEPS // 2},
                 "half the learning rate": {"learning_rate": 0.02}}


@dataclasses.dataclass
class GuardResult:
    loss: float  # Training loss, the epoch's mean (raw weights, training mode).
    val_loss: float  # Inference-mode validation loss of the raw weights.
    ap: float  # COCO AP of the EMA weights.
    ap50: float


def guard_run(model_dir: str, seed: int = 0, overrides: Optional[Dict] = None) -> GuardResult:
    """Trains the guard's run in `model_dir` (new) with `seed` and returns what it measures."""
    from efficientdet_keras import train
    result = train(model_dir, demo=True, demo_images=GUARD_DEMO_IMAGES,
                   hparams=dict(GUARD_HPARAMS, **(overrides or {})), seed=seed, eval_images=0,
                   report=lambda _: None)
    logs = result.history.history
    return GuardResult(logs["loss"][-1], logs["val_loss"][-1], result.last_metrics["AP"],
                       result.last_metrics["AP50"])


def measure(scratch, seeds: Sequence[int]) -> Dict[str, List[GuardResult]]:
    """The guard over `seeds`, and each LEARNING_LESS run with the first seed.

    Args:
      scratch: a callable returning a new empty folder for each run.
    """
    results = {"guard": [guard_run(scratch(), seed) for seed in seeds]}
    for name, overrides in LEARNING_LESS.items():
        results[name] = [guard_run(scratch(), seeds[0], overrides)]
    return results


COLUMNS = ["run", "seeds", "training loss", "validation loss", "AP", "AP50"]


def cells(results: Dict[str, List[GuardResult]]) -> List[List[str]]:
    """One row per run kind: each metric's min-max over its seeds (one value for one seed)."""
    def spread(values):
        return ("%.3f" % values[0] if len(values) == 1
                else "%.3f-%.3f" % (min(values), max(values)))
    rows = []
    for name, runs in results.items():
        rows.append([name, str(len(runs))] + [spread([getattr(r, key) for r in runs])
                                               for key in ("loss", "val_loss", "ap", "ap50")])
    return rows
