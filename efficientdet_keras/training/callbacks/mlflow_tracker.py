"""MLflowTracker: a training run logged to MLflow from Keras' hooks (reports.mlflow_run says
what the run gets).

    config.override("mlflow_tracking_uri=http://127.0.0.1:5000")  # get_callbacks adds it
    # or, among callbacks of your own, after those that write the files it uploads:
    tracker = MLflowTracker("runs/mine", "http://127.0.0.1:5000", config=config)

get_callbacks adds the tracker on the chief of a multi-worker run only. It never costs the
training run: the first MLflow call that fails ends the tracking with one warning.
"""

from typing import Optional

import tf_keras as keras

from efficientdet_keras.reports.mlflow_run import DEFAULT_EXPERIMENT, MLflowRunLogger


class MLflowTracker(keras.callbacks.Callback):
    """Logs a training run to MLflow (see the module doc); never stops the training.

    Put it after ResultsCallback, so each epoch's results.csv row is there when it uploads
    (get_callbacks does).

    Args:
      model_dir: the run directory: its files are uploaded, its mlflow_run.json names the run.
      tracking_uri: an MLflow tracking URI (http://host:5000, sqlite:///mlflow.db, databricks).
      experiment: the experiment's name, created when missing.
      config: the run's Config, logged as parameters (default: the model's `config`).
      run_name: default the model_dir's base name.

    Raises:
      MissingExtraError without mlflow.

    Attributes:
      mlflow_run: the MLflowRunLogger that makes the calls (its experiment, run_name, ...).
      run_id: the MLflow run's id once training began (None if the tracker could not start).
      stopped: whether a call failed, which ends the tracking for this run.
    """

    def __init__(self, model_dir: str, tracking_uri: str,
                 experiment: Optional[str] = DEFAULT_EXPERIMENT, config=None,
                 run_name: Optional[str] = None):
        super().__init__()
        self.mlflow_run = MLflowRunLogger(model_dir, tracking_uri, experiment, run_name)
        self.config = config

    @property
    def run_id(self) -> Optional[str]:
        """The MLflow run's id once training began (None if the tracker could not start)."""
        return self.mlflow_run.run_id

    @property
    def stopped(self) -> bool:
        """Whether a call failed, which ends the tracking for this run."""
        return self.mlflow_run.stopped

    def on_train_begin(self, logs=None):
        # Another fit with the same tracker (NaN recovery fits once more) reopens the run.
        config = self.config if self.config is not None else getattr(self.model, "config", None)
        self.mlflow_run.begin(config)

    def on_epoch_end(self, epoch, logs=None):
        self.mlflow_run.log_epoch(epoch + 1, logs)

    def on_train_end(self, logs=None):
        self.mlflow_run.end()
