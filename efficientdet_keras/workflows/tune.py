"""tune: a search over the few settings that decide a small-data fine-tune, with Optuna.

    from efficientdet_keras import tune
    search = tune("runs/pets-search", data="datasets/pets", pretrained="efficientdet-d0",
                  hparams="batch_size=8,num_epochs=10", trials=12)
    print(search.table())         # every trial: its AP, best epoch and settings
    search.best_hparams           # runs/pets-search/best_hparams.yaml, for --hparams

Each trial is a training run of its own (`workflows.train`) in <model_dir>/trial-N, evaluated
after each epoch; its score is its best validation AP. Optuna's TPE sampler picks the settings
(`SEARCH_SPACE`) and its median pruner stops a trial whose AP falls behind the trials before it.
The study lives in <model_dir>/tune.db (SQLite), so a search that is stopped or killed
continues when started again: a trial that was cut off runs again with its settings in its own
folder, where its training resumes from its last backup.
"""

import csv
import dataclasses
import os
from typing import Callable, Dict, List, Optional

import tf_keras as keras
import yaml

STUDY_FILE, STUDY_NAME = "tune.db", "efficientdet-tune"
TRIALS_FILE, BEST_FILE = "trials.csv", "best_hparams.yaml"
# A trial run again after a kill keeps the folder (and so the training) of the one it repeats;
# one stopped by a signal (backed up) or Ctrl-C is marked so, to be run again likewise.
FOLDER_ATTR, CUT_OFF_ATTR = "folder", "cut_off"
# var_freeze_expr of each freezing choice: the backbone; the backbone and the BiFPN (as the
# packaged voc.yaml fine-tunes).
FREEZE_CHOICES = {"none": "", "backbone": "efficientnet",
                  "backbone_bifpn": "(efficientnet|fpn_cells|resample_p6)"}


@dataclasses.dataclass(frozen=True)
class Dimension:
    """One searched config key: a float range (log-scaled or not; relative: a factor of the
    config's own value) or named choices."""
    key: str
    low: float = 0.0
    high: float = 0.0
    log: bool = False
    relative: bool = False
    choices: Optional[Dict[str, object]] = None

    def suggest(self, trial, config) -> object:
        """The trial's value of the config key."""
        if self.choices is not None:
            return self.choices[trial.suggest_categorical(self.key, list(self.choices))]
        base = float(config.get(self.key)) if self.relative else 1.0
        return trial.suggest_float(self.key, self.low * base, self.high * base, log=self.log)

    def config_value(self, suggested) -> object:
        return self.choices[suggested] if self.choices is not None else suggested


# The settings that decide a fine-tune on a few hundred images, and their ranges. The number
# of epochs is the trial's length (num_epochs): the table gives each trial's best epoch.
SEARCH_SPACE = (
    Dimension("learning_rate", 0.25, 4.0, log=True, relative=True),
    Dimension("lr_warmup_epoch", 0.1, 1.0),
    Dimension("jitter_min", 0.5, 1.0),
    Dimension("jitter_max", 1.0, 2.0),
    Dimension("var_freeze_expr", choices=FREEZE_CHOICES),
)


@dataclasses.dataclass
class TuneResult:
    """A finished search: its folder, the trials' rows (trial, state, AP, best_epoch and the
    settings), and the best settings' hparams file (None when no trial finished)."""
    model_dir: str
    rows: List[Dict]
    best_hparams: Optional[str]

    def table(self) -> str:
        """The trials as a plain-text table, best AP first."""
        if not self.rows:
            return "no trials"
        columns = list(self.rows[0])
        ranked = sorted(self.rows, key=lambda r: -(r["AP"] if r["AP"] != "" else -1.0))
        cells = [[_cell(row[c]) for c in columns] for row in ranked]
        widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths))]
        lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
        return "\n".join(lines)


def _cell(value) -> str:
    if isinstance(value, float):
        return "%.4g" % value
    return "-" if value is None or value == "" else str(value)


def tune(model_dir: str, *, trials: int = 10, data: Optional[str] = None,
         demo: bool = False, demo_images: int = 1000, model: str = "efficientdet-d0",
         pretrained: Optional[str] = None, hparams="", seed: int = 0,
         config_overrides: Optional[dict] = None, search_space=SEARCH_SPACE,
         report: Callable[[str], None] = print, **train_settings) -> TuneResult:
    """Runs `trials` training runs (finished or pruned, counting those of an earlier start)
    with Optuna over `search_space`, and writes trials.csv and best_hparams.yaml.

    Args:
      model_dir: the search's folder: tune.db, trial-N/ run folders, trials.csv and
        best_hparams.yaml.
      trials: how many trials the search has when done.
      data, demo, demo_images, model, pretrained, hparams, config_overrides: every trial's
        data and starting config, as `train` takes them; each trial sets its searched keys
        on top.
      seed: the sampler's seed and each trial's training seed.
      search_space: the Dimensions searched (default SEARCH_SPACE).
      report: called with each line worth showing.
      **train_settings: other `train` arguments (eval_samples, eval_images, ...).

    Raises:
      ImportError: Optuna is missing (the message names the extra to install).
    """
    optuna = _import_optuna()
    from efficientdet_keras.utils.run_lock import RunLock
    os.makedirs(model_dir, exist_ok=True)
    with RunLock(model_dir, "efficientdet-tune"):  # So a trial still "running" was cut off.
        study = optuna.create_study(
            storage="sqlite:///%s" % os.path.abspath(os.path.join(model_dir, STUDY_FILE)),
            study_name=STUDY_NAME, direction="maximize", load_if_exists=True,
            pruner=optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=1))
        # Seeded past the trials already drawn: a continued search does not draw them again.
        study.sampler = optuna.samplers.TPESampler(
            seed=seed + len(study.get_trials(deepcopy=False)))
        _repeat_cut_off_trials(study, report)
        done = _finished(study)
        if done < trials:
            report("Search in %s: %d of %d trials done; running %d" % (
                model_dir, done, trials, trials - done))
            settings = dict(train_settings, data=data, demo=demo, demo_images=demo_images,
                            model=model, pretrained=pretrained, hparams=hparams, seed=seed,
                            config_overrides=config_overrides, report=report)
            study.optimize(lambda trial: _run_trial(trial, model_dir, search_space, settings),
                           n_trials=trials - done, gc_after_trial=True)
        return _write_results(study, model_dir, search_space, hparams, config_overrides)


def _import_optuna():
    try:
        import optuna
    except ImportError:
        raise ImportError("efficientdet-tune searches with Optuna: pip install "
                          "'efficientdet_keras[tune]'") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def _finished(study) -> int:
    from optuna.trial import TrialState
    return len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)))


def _repeat_cut_off_trials(study, report) -> None:
    """Trials left running by a search that was killed fail, and those and the ones a signal
    or Ctrl-C stopped run again next with their settings in their folders (where training
    resumes), once."""
    from optuna.trial import TrialState
    trials = study.get_trials(deepcopy=False)
    for trial in trials:
        if trial.state == TrialState.RUNNING:
            study.tell(trial.number, state=TrialState.FAIL)
        elif trial.state != TrialState.FAIL or not trial.user_attrs.get(CUT_OFF_ATTR):
            continue
        folder = trial.user_attrs.get(FOLDER_ATTR, trial.number)
        if any(t.number > trial.number and t.user_attrs.get(FOLDER_ATTR) == folder
               for t in trials):
            continue  # Already run again.
        study.enqueue_trial(trial.params, user_attrs={FOLDER_ATTR: folder})
        report("Trial %d was cut off; it runs again in trial-%d" % (trial.number, folder))


def trial_config_values(trial, search_space, config) -> Dict[str, object]:
    """The config keys a trial sets, suggested by Optuna."""
    return {d.key: d.suggest(trial, config) for d in search_space}


def _run_trial(trial, model_dir: str, search_space, settings: dict) -> float:
    import optuna

    from efficientdet_keras.checkpoint.archive import ARCHIVE_MONITOR
    from efficientdet_keras.workflows.train import build_config, train
    folder = trial.user_attrs.get(FOLDER_ATTR)
    if folder is None:  # A new trial: the next folder (a repeated one keeps its own).
        used = [t.user_attrs[FOLDER_ATTR] for t in trial.study.get_trials(deepcopy=False)
                if FOLDER_ATTR in t.user_attrs]
        folder = max(used, default=-1) + 1
        trial.set_user_attr(FOLDER_ATTR, folder)
    base = build_config(settings["model"], settings["hparams"], settings["demo"],
                        settings["config_overrides"])
    values = trial_config_values(trial, search_space, base)
    pruning = PruningCallback(trial)
    from efficientdet_keras.training.preemption import TrainingStopped
    try:
        result = train(os.path.join(model_dir, "trial-%d" % folder),
                       config_overrides=dict(settings["config_overrides"] or {}, **values),
                       evaluate=True, callbacks=[pruning],
                       **{k: v for k, v in settings.items() if k != "config_overrides"})
    except (TrainingStopped, KeyboardInterrupt):
        trial.set_user_attr(CUT_OFF_ATTR, True)
        raise
    if result.best:
        trial.set_user_attr("best_epoch", int(result.best["epoch"]))
    if pruning.pruned:
        raise optuna.TrialPruned()
    if not result.best:
        raise ValueError("trial %d ended without a COCO evaluation" % trial.number)
    return float(result.best[ARCHIVE_MONITOR])


class PruningCallback(keras.callbacks.Callback):
    """Reports each evaluation's val_AP to an Optuna trial, and stops the fit when the pruner
    says the trial is behind (`pruned`)."""

    def __init__(self, trial):
        super().__init__()
        self.trial = trial
        self.pruned = False

    def on_epoch_end(self, epoch, logs=None):
        if logs and "val_AP" in logs:
            self.trial.report(float(logs["val_AP"]), epoch + 1)
            if self.trial.should_prune():
                self.pruned = True
                self.model.stop_training = True


def _write_results(study, model_dir: str, search_space, hparams, config_overrides) -> TuneResult:
    """trials.csv (every finished or pruned trial) and best_hparams.yaml (the starting
    hparams with the best trial's settings)."""
    from optuna.trial import TrialState
    from efficientdet_keras.config.overrides import override_mappings
    from efficientdet_keras.utils.fileio import write_atomically
    rows = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,
                                                           TrialState.PRUNED)):
        row = {"trial": trial.user_attrs.get(FOLDER_ATTR, trial.number),
               "state": trial.state.name.lower(),
               "AP": trial.value if trial.value is not None else "",
               "best_epoch": trial.user_attrs.get("best_epoch", "")}
        row.update({d.key: trial.params.get(d.key, "") for d in search_space})
        rows.append(row)
    rows.sort(key=lambda r: r["trial"])
    if rows:
        def write_rows(f):
            writer = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
            writer.writeheader()
            writer.writerows(rows)
        write_atomically(os.path.join(model_dir, TRIALS_FILE), write_rows)
    completed = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))]
    if not completed:
        return TuneResult(model_dir, rows, None)
    best = max(completed, key=lambda t: t.value)
    settings: Dict[str, object] = {}
    for mapping in [hparams] if isinstance(hparams, dict) else override_mappings(hparams or ""):
        settings.update(mapping)
    settings.update({k: v for k, v in (config_overrides or {}).items() if v is not None})
    settings.update({d.key: d.config_value(best.params[d.key]) for d in search_space
                     if d.key in best.params})
    header = ("# The best of %d trials of efficientdet-tune in %s: trial %d, validation AP "
              "%.4f at epoch %s.\n# efficientdet-train --hparams=<this file> trains with it.\n"
              % (len(rows), model_dir, best.user_attrs.get(FOLDER_ATTR, best.number),
                 best.value, best.user_attrs.get("best_epoch", "?")))
    path = os.path.join(model_dir, BEST_FILE)
    write_atomically(path, lambda f: f.write(header + yaml.safe_dump(settings, sort_keys=False)))
    return TuneResult(model_dir, rows, path)
