"""What the command-line tools share: one-line errors and evaluation reports."""

import os
import sys

# Errors caused by what the user gave (flags, files, data): reported in one line.
USER_ERRORS = (ValueError, FileNotFoundError, KeyError)


def run_or_exit(tool: str, fn, *args):
    """Calls fn(*args); a user error ends the program with "tool: message" and no traceback."""
    try:
        return fn(*args)
    except USER_ERRORS as e:
        message = e.args[0] if isinstance(e, KeyError) and e.args else e
        sys.exit("%s: %s" % (tool, message))


def print_evaluation(path, metrics, timing=None) -> None:
    """The metrics table of one evaluated checkpoint."""
    from efficientdet_keras.evaluation.runner import format_metrics
    if timing is not None:
        print("\n%s: %d images (network %.1fs, post-processing %.1fs, scoring %.1fs)"
              % (path, timing.images, timing.network, timing.postprocess, timing.scoring))
    else:
        print("\n%s:" % path)
    print(format_metrics(metrics))


def watch_and_report(evaluation, model_dir: str, archive_keep: int, timeout=None) -> None:
    """Continuous evaluation of a training run, printing each result and the best checkpoint."""
    from efficientdet_keras.evaluation.continuous import evaluate_continuously
    best, finished = evaluate_continuously(evaluation, model_dir, archive_keep=archive_keep,
                                           timeout=timeout, on_result=print_evaluation)
    print("Final epoch %d evaluated." % evaluation.config.num_epochs if finished
          else "Stopped before the final epoch's checkpoint.")
    if best is not None:
        print("Best checkpoint: %s (AP %.4f)" % (best["path"], best["AP"]))


def load_run_config(model_dir: str, model_name: str, hparams: str):
    """The config of a run: <model_dir>/config.yaml when the trainer wrote one, else the
    family default of model_name; hparams overrides either."""
    from efficientdet_keras import Config, get_efficientdet_config
    config_path = os.path.join(model_dir, "config.yaml") if model_dir else ""
    config = (Config.from_yaml(config_path) if config_path and os.path.exists(config_path)
              else get_efficientdet_config(model_name))
    return config.override(hparams)
