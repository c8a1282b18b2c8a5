"""A training run logged to MLflow: one MLflow run per model_dir, however often it resumes.

    run = MLflowRunLogger("runs/mine", "http://127.0.0.1:5000")
    run.begin(config)                 # a new MLflow run, or the one model_dir names
    run.log_epoch(1, logs)            # after each epoch, 1-based
    run.end()

training.callbacks.mlflow_tracker.MLflowTracker calls it from Keras' hooks. What the run gets:
  parameters  every config key, flattened (nms_configs.method), as YAML writes the value; a
              resumed run that changed a key keeps the first value and tags the new one
              "resumed_with.<key>" (MLflow parameters cannot change)
  metrics     each epoch's numeric, finite Keras logs (losses, learning_rate, val_AP, ...,
              val_AP_/<class>), at step = the epoch, 1-based as in results.csv
  artifacts   results.csv, coco_metrics.json and plots/ at every epoch end; at the end of
              training also config.yaml, pr_curves/, confusion_matrix/ and the best
              checkpoint as checkpoint/best.* (else the last, checkpoint/last.*); an
              export of the run (reports.mlflow_export.log_export) under export/<name>/
model_dir/mlflow_run.json (reports.mlflow_record) keeps the tracking URI and the run id: a
resumed run continues that run, and efficientdet-export finds it there.

Logging never costs the training run: each MLflow call is guarded, and the first one that
fails ends the logging of this run with one warning naming the URI and the cause
(reports.mlflow_calls).
"""

import os
import time
from typing import Any, Callable, Dict, List, Optional

from absl import logging

from efficientdet_keras.checkpoint.archive import CHECKPOINT_SUFFIXES
from efficientdet_keras.reports.confusion_matrix import CONFUSION_MATRIX_DIR
from efficientdet_keras.reports.mlflow_calls import (REQUEST_TIMEOUT_SECONDS,
                                                     UPLOAD_TIMEOUT_SECONDS, attempt, chunks,
                                                     import_mlflow, mlflow_limit, redacted)
from efficientdet_keras.reports.mlflow_record import (RUN_RECORD, read_run_record,
                                                      write_run_record)
from efficientdet_keras.reports.mlflow_values import config_params, epoch_metrics
from efficientdet_keras.reports.pr_curves import PR_CURVES_DIR
from efficientdet_keras.reports.results_csv import PLOTS_DIR, RESULTS_CSV

DEFAULT_EXPERIMENT = "efficientdet"
# Files of model_dir written by other callbacks (COCOCallback, the run's config): uploaded
# as they are.
REPORT_FILES = (RESULTS_CSV, "coco_metrics.json")
CONFIG_FILE = "config.yaml"
# model_dir/best.* and last.* (CheckpointCallback): the checkpoint uploaded.
CHECKPOINT_NAMES = ("best", "last")
CHECKPOINT_ARTIFACTS = "checkpoint"


def checkpoint_files(model_dir: str) -> List[str]:
    """The files of model_dir/best (the best archived checkpoint), else of model_dir/last;
    [] when neither is complete."""
    for name in CHECKPOINT_NAMES:
        files = [os.path.join(model_dir, name + suffix) for suffix in CHECKPOINT_SUFFIXES]
        if all(os.path.isfile(path) for path in files):
            return files
    return []


class MLflowRunLogger:
    """Logs the training run of model_dir to its MLflow run (see the module doc); a failed
    call ends the logging, never the training.

    Args:
      model_dir: the run directory: its files are uploaded, its RUN_RECORD names the run.
      tracking_uri: an MLflow tracking URI (http://host:5000, sqlite:///mlflow.db, databricks).
      experiment: the experiment's name, created when missing.
      run_name: default the model_dir's base name.

    Raises:
      MissingExtraError without mlflow.

    Attributes:
      run_id: the MLflow run's id once `begin` started it (None if it could not).
      stopped: whether a call failed, which ends the logging for this run.
    """

    def __init__(self, model_dir: str, tracking_uri: str,
                 experiment: Optional[str] = DEFAULT_EXPERIMENT,
                 run_name: Optional[str] = None):
        self._mlflow = import_mlflow()  # Before training: a missing extra is no surprise later.
        self.model_dir = model_dir
        self.tracking_uri = tracking_uri
        self.experiment = experiment or DEFAULT_EXPERIMENT
        self.run_name = run_name or os.path.basename(os.path.abspath(model_dir))
        self.run_id: Optional[str] = None
        self.stopped = False
        self._client = None

    # --- a training run's steps ---------------------------------------------------------
    def begin(self, config=None) -> None:
        """Starts the run, or continues the one RUN_RECORD names; logs `config` (a Config, or
        None) as parameters. Called again, reopens the run (another fit of the same model)."""
        if self.run_id is None:
            self._call("starting the run", lambda: self._start_run(config))
        else:
            self._call("reopening the run",
                       lambda: self._client.update_run(self.run_id, status="RUNNING"))

    def log_epoch(self, epoch: int, logs: Optional[Dict[str, Any]]) -> None:
        """Logs an epoch's (1-based) Keras logs as metrics and uploads the reports so far."""
        if self.run_id is None:
            return
        self._call("logging epoch %d" % epoch, lambda: self._log_metrics(epoch, logs))
        self._call("uploading the reports of epoch %d" % epoch, self._upload_reports,
                   timeout_seconds=UPLOAD_TIMEOUT_SECONDS)

    def end(self) -> None:
        """Uploads the run's files (config, curves, the checkpoint) and ends the run."""
        if self.run_id is None:
            return
        self._call("uploading the run's files", self._upload_run_files,
                   timeout_seconds=UPLOAD_TIMEOUT_SECONDS)
        self._call("ending the run", lambda: self._client.set_terminated(self.run_id))

    # --- the calls ---------------------------------------------------------------------
    def _call(self, what: str, call: Callable[[], Any],
              timeout_seconds: int = REQUEST_TIMEOUT_SECONDS) -> None:
        if self.stopped:
            return
        ok, _ = attempt(self.tracking_uri, what, call,
                        "no more tracking for this run, training goes on", timeout_seconds)
        self.stopped = not ok

    def _start_run(self, config) -> None:
        client = self._client = self._mlflow.tracking.MlflowClient(self.tracking_uri)
        run = self._earlier_run(client)
        if run is None:
            run = client.create_run(self._experiment_id(client), run_name=self.run_name,
                                    tags=self._tags(config))
            write_run_record(self.model_dir, self.tracking_uri, run.info.experiment_id,
                             run.info.run_id)
            logging.info("MLflow run %s (experiment %s) at %s", run.info.run_id,
                         self.experiment, redacted(self.tracking_uri))
        else:
            client.update_run(run.info.run_id, status="RUNNING")
            logging.info("Continuing MLflow run %s at %s", run.info.run_id,
                         redacted(self.tracking_uri))
        self.run_id = run.info.run_id
        if config is not None:
            self._log_config(config, run.data.params)

    def _earlier_run(self, client):
        """The run model_dir's RUN_RECORD names on this tracking URI, if it is still there."""
        record = read_run_record(self.model_dir)
        if record is None:
            return None
        if record["tracking_uri"] != self.tracking_uri:
            logging.info("%s names MLflow run %s at %s; this run logs to %s: a new run",
                         RUN_RECORD, record["run_id"], redacted(record["tracking_uri"]),
                         redacted(self.tracking_uri))
            return None
        try:
            run = client.get_run(record["run_id"])
        except self._mlflow.exceptions.MlflowException as e:
            if getattr(e, "error_code", None) != "RESOURCE_DOES_NOT_EXIST":
                raise
            run = None
        if run is None or run.info.lifecycle_stage == "deleted":
            logging.info("MLflow run %s of %s is gone: a new run", record["run_id"],
                         RUN_RECORD)
            return None
        return run

    def _experiment_id(self, client) -> str:
        experiment = client.get_experiment_by_name(self.experiment)
        if experiment is not None:
            return experiment.experiment_id
        try:
            return client.create_experiment(self.experiment)
        except self._mlflow.exceptions.MlflowException:
            experiment = client.get_experiment_by_name(self.experiment)  # Made meanwhile.
            if experiment is None:
                raise
            return experiment.experiment_id

    def _tags(self, config) -> Dict[str, str]:
        tags = {"model_dir": os.path.abspath(self.model_dir)}
        if config is not None:
            tags["model_name"] = str(config.get("name"))
        return tags

    def _log_config(self, config, logged: Dict[str, str]) -> None:
        """The config's keys not logged yet as parameters; a changed value as a tag."""
        from mlflow.entities import Param, RunTag
        params = config_params(config)
        new = [Param(key, value) for key, value in params.items() if key not in logged]
        changed = [RunTag("resumed_with." + key, value) for key, value in params.items()
                   if key in logged and logged[key] != value]
        size = mlflow_limit("MAX_PARAMS_TAGS_PER_BATCH")
        for chunk in chunks(new, size):
            self._client.log_batch(self.run_id, params=chunk)
        for chunk in chunks(changed, size):
            self._client.log_batch(self.run_id, tags=chunk)

    def _log_metrics(self, epoch: int, logs: Optional[Dict[str, Any]]) -> None:
        from mlflow.entities import Metric
        timestamp = int(time.time() * 1000)
        metrics = [Metric(name, value, timestamp, epoch)
                   for name, value in epoch_metrics(logs or {}).items()]
        for chunk in chunks(metrics, mlflow_limit("MAX_METRICS_PER_BATCH")):
            self._client.log_batch(self.run_id, metrics=chunk)

    def _upload_reports(self) -> None:
        for name in REPORT_FILES:
            self._upload(os.path.join(self.model_dir, name))
        self._upload(os.path.join(self.model_dir, PLOTS_DIR), PLOTS_DIR)

    def _upload_run_files(self) -> None:
        self._upload_reports()
        self._upload(os.path.join(self.model_dir, CONFIG_FILE))
        for folder in (PR_CURVES_DIR, CONFUSION_MATRIX_DIR):
            self._upload(os.path.join(self.model_dir, folder), folder)
        for path in checkpoint_files(self.model_dir):
            self._upload(path, CHECKPOINT_ARTIFACTS)

    def _upload(self, path: str, artifact_path: Optional[str] = None) -> None:
        """A file, or a folder's files, when there."""
        if os.path.isdir(path):
            self._client.log_artifacts(self.run_id, path, artifact_path)
        elif os.path.isfile(path):
            self._client.log_artifact(self.run_id, path, artifact_path)
