"""Config keys of experiment tracking (training/callbacks/mlflow_tracker.py)."""

from efficientdet_keras.config.keys.checks import non_empty_text, optional
from efficientdet_keras.config.keys.row import ConfigKey

TITLE = "Experiment tracking"

KEYS = (
    ConfigKey(
        "mlflow_tracking_uri", None, "str or null",
        optional(non_empty_text("a tracking URI such as http://host:5000"),
                 allowed="null (no tracking) or a tracking URI such as http://host:5000"),
        "Log the training run to MLflow at this tracking URI (http://host:5000, "
        "sqlite:///mlflow.db, databricks): the config as parameters, each epoch's logs as "
        "metrics, results.csv, plots and the best checkpoint as artifacts, one MLflow run per "
        "model_dir (kept in model_dir/mlflow_run.json); needs the trackers extra; null: off."),
    ConfigKey(
        "mlflow_experiment", "efficientdet", "str",
        non_empty_text("an experiment name (not empty)"),
        "The MLflow experiment the runs go to, created when missing."),
)
