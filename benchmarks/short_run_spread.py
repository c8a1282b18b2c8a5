"""How much a short run's result depends on chance: the short runs of benchmarks/short_runs.py
over several seeds, and once more with every box target moved by about one float32 rounding
step (1e-7), which shows whether a difference in the last bit grows into another model.

For each run: the final AP and AP50 of the EMA weights and the raw weights' inference-mode
validation loss after every epoch (a BatchNorm whose moving statistics do not describe the
network shows up there as a jump). For each dataset: the mean, min, max and span (max - min)
of the seeds' AP and AP50.

Runs are independent processes (`jobs` at a time, the machine's cores shared between them), so
each starts from a clean TensorFlow state with its seed. Used by `python benchmarks/bench.py
--what=short_run_spread`; plain functions, no flags.
"""

import concurrent.futures
import dataclasses
import multiprocessing
import os
import statistics
from typing import Dict, List, Optional, Sequence

# What the perturbed run adds to each box target: about one rounding step of float32 at 1.
BOX_TARGET_OFFSET = 1e-7


@dataclasses.dataclass
class SpreadRun:
    """One training run of the spread: which short run, its seed, the box-target offset."""
    name: str
    seed: int
    box_target_offset: float = 0.0

    @property
    def label(self) -> str:
        offset = " + %g on box targets" % self.box_target_offset if self.box_target_offset else ""
        return "seed %d%s" % (self.seed, offset)


@dataclasses.dataclass
class SpreadResult:
    run: SpreadRun
    ap: float
    ap50: float
    val_losses: List[float]  # Raw weights, inference mode, after each epoch.
    train_losses: List[float]  # Raw weights, training mode, each epoch's mean.
    minutes: float


def spread_runs(names: Sequence[str], seeds: Sequence[int],
                perturbed_seed: Optional[int]) -> List[SpreadRun]:
    """Every seed of every named short run, and the perturbed run of `perturbed_seed`."""
    runs = [SpreadRun(name, seed) for name in names for seed in seeds]
    if perturbed_seed is not None:
        runs += [SpreadRun(name, perturbed_seed, BOX_TARGET_OFFSET) for name in names]
    return runs


def _train_one(run: SpreadRun, data_dir: str, overrides, threads: int) -> SpreadResult:
    """One run, in a process of its own (see the module doc)."""
    import time

    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    from benchmarks.short_runs import run_short_run
    start = time.perf_counter()
    epochs = run_short_run(run.name, data_dir, overrides, seed=run.seed, log=lambda _: None,
                           box_target_offset=run.box_target_offset)
    return SpreadResult(run, epochs[-1].ap, epochs[-1].ap50, [e.val_loss for e in epochs],
                        [e.loss for e in epochs], (time.perf_counter() - start) / 60.0)


def write_datasets(names: Sequence[str], data_dir: str) -> None:
    """Writes each short run's dataset once, before the runs that read it start together."""
    from benchmarks.short_runs import SHORT_RUNS, short_run_config
    from efficientdet_keras.data.synthetic import write_synthetic_dataset
    for name in names:
        _, style = short_run_config(name)
        _, _, image_size, num_train, num_val, _, _ = SHORT_RUNS[name]
        write_synthetic_dataset(os.path.join(data_dir, name), num_train, num_val,
                                image_size=image_size, style=style)


def train_all(runs: Sequence[SpreadRun], data_dir: str, overrides=None, jobs: int = 2,
              log=print) -> List[SpreadResult]:
    """Trains `runs`, `jobs` processes at a time; results in the order of `runs`."""
    write_datasets(sorted({run.name for run in runs}), data_dir)
    threads = max(1, (os.cpu_count() or 1) // jobs)
    context = multiprocessing.get_context("spawn")  # A fresh TensorFlow in each.
    with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context) as pool:
        futures = [pool.submit(_train_one, run, data_dir, overrides, threads) for run in runs]
        results = []
        for future in futures:
            results.append(future.result())
            log(format_run(results[-1]))
    return results


def format_run(result: SpreadResult) -> str:
    return "%-7s %-28s AP %.3f AP50 %.3f  inference-mode val loss by epoch: %s  (%.1f min)" % (
        result.run.name, result.run.label, result.ap, result.ap50,
        " ".join("%.2f" % loss for loss in result.val_losses), result.minutes)


def summarise(results: Sequence[SpreadResult]) -> Dict[str, Dict[str, float]]:
    """Per short run, over its unperturbed seeds: mean, min, max and span of AP and AP50, and
    the largest inference-mode validation loss over the training loss of its epoch."""
    summary = {}
    for name in dict.fromkeys(r.run.name for r in results):
        seeded = [r for r in results if r.run.name == name and not r.run.box_target_offset]
        row = {"runs": len(seeded)}
        for metric in ("ap", "ap50"):
            values = [getattr(r, metric) for r in seeded]
            row.update({metric + "_mean": statistics.mean(values), metric + "_min": min(values),
                        metric + "_max": max(values), metric + "_span": max(values) - min(values)})
        row["worst_loss_ratio"] = max(v / t for r in seeded
                                      for v, t in zip(r.val_losses, r.train_losses))
        summary[name] = row
    return summary


SUMMARY_COLUMNS = ["run", "seeds", "AP mean", "AP min-max (span)", "AP50 mean",
                   "AP50 min-max (span)", "worst val/train loss"]
RUN_COLUMNS = ["run", "seed", "AP", "AP50", "inference-mode val loss by epoch"]


def summary_cells(summary: Dict[str, Dict[str, float]]) -> List[List[str]]:
    cells = []
    for name, row in summary.items():
        cells.append([name, str(row["runs"]), "%.3f" % row["ap_mean"],
                      "%.3f-%.3f (%.3f)" % (row["ap_min"], row["ap_max"], row["ap_span"]),
                      "%.3f" % row["ap50_mean"],
                      "%.3f-%.3f (%.3f)" % (row["ap50_min"], row["ap50_max"], row["ap50_span"]),
                      "%.2f" % row["worst_loss_ratio"]])
    return cells


def run_cells(results: Sequence[SpreadResult]) -> List[List[str]]:
    return [[r.run.name, r.run.label, "%.3f" % r.ap, "%.3f" % r.ap50,
             " ".join("%.2f" % loss for loss in r.val_losses)] for r in results]
