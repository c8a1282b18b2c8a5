"""Rules for the config of a run directory: which keys a resumed run may change, and how many
steps an epoch has."""

import os

from absl import logging

from efficientdet_keras.config import Config, config_differences

# Keys a re-run of a model_dir may change: how long it trains (extending a finished run),
# how it runs, how often it evaluates and where it is tracked, not what the model is or how
# it learns.
RESUMABLE_KEYS = ("num_epochs", "patience", "time_budget", "steps_per_execution", "jit_compile", "strategy",
                  "map_freq", "backup_steps", "nan_recovery_attempts", "nan_recovery_lr_factor",
                  "deterministic", "mlflow_tracking_uri", "mlflow_experiment",
                  "class_rows_by_name", "data_service")


class RunConfigMismatchError(ValueError):
    """A re-run of a model_dir with a config that differs in keys that are not resumable."""


def check_run_config(config: Config, model_dir: str, overwrite: bool = False) -> None:
    """Stops a re-run whose config differs from the run's <model_dir>/config.yaml.

    Resuming with another model or recipe would fail later on shapes, or silently
    train something else. Keys in RESUMABLE_KEYS may change (logged).

    Raises:
      RunConfigMismatchError listing the differing keys (old -> new) unless `overwrite`.
    """
    path = os.path.join(model_dir, "config.yaml")
    if not os.path.exists(path):
        return
    differences = config_differences(Config.from_yaml(path), config)
    changes = ["%s %r -> %r" % (key, old, new) for key, (old, new) in differences.items()]
    blocking = [change for key, change in zip(differences, changes) if key not in RESUMABLE_KEYS]
    if blocking and not overwrite:
        raise RunConfigMismatchError(
            "%s was written by a run with another config: %s; resume with the same settings, "
            "use another --model_dir, or pass --overwrite_config" % (path, "; ".join(blocking)))
    if changes:
        logging.warning("Config of %s changed on this run: %s", path, "; ".join(changes))


def steps_per_epoch(num_examples: int, batch_size: int) -> int:
    """Full batches in an epoch of `num_examples` images (at least one)."""
    return max(1, num_examples // batch_size)
