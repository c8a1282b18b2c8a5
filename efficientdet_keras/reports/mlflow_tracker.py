"""A training run in MLflow: one MLflow run per model_dir, however often it resumes.

    config.override("mlflow_tracking_uri=http://127.0.0.1:5000")  # get_callbacks adds it
    # or, among callbacks of your own, after those that write the files it uploads:
    tracker = MLflowTracker("runs/mine", "http://127.0.0.1:5000", config=config)

get_callbacks adds the tracker on the chief of a multi-worker run only. What the run gets:
  parameters  every config key, flattened (nms_configs.method), as YAML writes the value; a
              resumed run that changed a key keeps the first value and tags the new one
              "resumed_with.<key>" (MLflow parameters cannot change)
  metrics     each epoch's numeric, finite Keras logs (losses, learning_rate, val_AP, ...,
              val_AP_/<class>), at step = the epoch, 1-based as in results.csv
  artifacts   results.csv, coco_metrics.json and plots/ at every epoch end; at the end of
              training also config.yaml, pr_curves/, confusion_matrix/ and the best
              checkpoint as checkpoint/best.* (else the last, checkpoint/last.*); an
              export of the run (log_export) under export/<name>/
model_dir/mlflow_run.json (RUN_RECORD) keeps the tracking URI and the run id: a resumed run
continues that run, and efficientdet-export finds it there.

The tracker never costs the training run: each MLflow call is guarded, and the first one that
fails ends the tracking of this run with one warning naming the URI and the cause. MLflow's
client retries a dead server for minutes; here each request gets one retry and a few seconds
(MLFLOW_HTTP_REQUEST_* variables set by the user win).

mlflow is an extra (`pip install 'efficientdet_keras[trackers]'`), imported when a tracker is
made.
"""

import contextlib
import json
import logging as python_logging
import math
import os
import re
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

import numpy as np
import tf_keras as keras
from absl import logging

from efficientdet_keras.checkpoint.archive import CHECKPOINT_SUFFIXES
from efficientdet_keras.config.rules import flatten, format_value
from efficientdet_keras.reports.confusion_matrix import CONFUSION_MATRIX_DIR
from efficientdet_keras.reports.pr_curves import PR_CURVES_DIR
from efficientdet_keras.reports.results_csv import PLOTS_DIR, RESULTS_CSV
from efficientdet_keras.utils.fileio import write_json_atomically

INSTALL_HINT = "pip install 'efficientdet_keras[trackers]'"
RUN_RECORD = "mlflow_run.json"
DEFAULT_EXPERIMENT = "efficientdet"
# Files of model_dir written by other callbacks (COCOCallback, the run's config): uploaded
# as they are.
REPORT_FILES = (RESULTS_CSV, "coco_metrics.json")
CONFIG_FILE = "config.yaml"
# model_dir/best.* and last.* (training.checkpoint_callbacks): the checkpoint uploaded.
CHECKPOINT_NAMES = ("best", "last")
CHECKPOINT_ARTIFACTS = "checkpoint"
EXPORT_ARTIFACTS = "export"

# Small requests (parameters, metrics, run state): one retry, a few seconds each.
REQUEST_TIMEOUT_SECONDS = 3
# Uploads wait longer for the answer: the server stores the file before it replies.
UPLOAD_TIMEOUT_SECONDS = 60
_REQUEST_SETTINGS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
                     "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                     "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER": "0"}
_TIMEOUT_SETTING = "MLFLOW_HTTP_REQUEST_TIMEOUT"

# MLflow's limits (mlflow.utils.validation), for a client that does not say.
_LIMIT_DEFAULTS = {"MAX_PARAM_VAL_LENGTH": 500, "MAX_PARAMS_TAGS_PER_BATCH": 100,
                   "MAX_METRICS_PER_BATCH": 1000, "MAX_ENTITY_KEY_LENGTH": 250}
# Characters of metric names every MLflow server takes (no colon: not on Windows).
_UNSAFE_NAME_CHARACTERS = re.compile(r"[^\w.\- /]")
# The cause inside a failed HTTP request's message: "... (Caused by NewConnectionError(...:
# [Errno 111] Connection refused"))".
_HTTP_CAUSE = re.compile(r"\(Caused by \w+\((.*)\)\)\s*$")
_PASSWORD_IN_URI = re.compile(r"//[^/@]*@")


class MLflowMissingError(ImportError, ValueError):
    """mlflow is not installed (a ValueError too, so the tools print one line)."""


def import_mlflow():
    """The mlflow module; MLflowMissingError (one line with the install command) without it."""
    try:
        import mlflow
        import mlflow.tracking  # noqa: F401 (MlflowClient)
    except ImportError as e:
        cause = "" if getattr(e, "name", None) == "mlflow" else " (%s)" % e
        raise MLflowMissingError("the MLflow tracker needs mlflow%s: %s"
                                 % (cause, INSTALL_HINT)) from None
    return mlflow


def read_run_record(model_dir: str) -> Optional[Dict[str, str]]:
    """{"tracking_uri", "experiment_id", "run_id"} of the MLflow run of model_dir, or None
    when it has none (or an unreadable one)."""
    path = os.path.join(model_dir, RUN_RECORD)
    try:
        with open(path) as f:
            record = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        logging.warning("Ignoring %s: %s", path, e)
        return None
    if not (isinstance(record, dict) and record.get("run_id") and record.get("tracking_uri")):
        return None
    return record


def redacted(uri: str) -> str:
    """The URI without a user and password in it, fit for logs and parameters."""
    return _PASSWORD_IN_URI.sub("//***@", uri)


def failure_reason(error: BaseException) -> str:
    """A failed MLflow call's cause in one line: "[Errno 111] Connection refused"."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    cause = _HTTP_CAUSE.search(lines[0])
    text = cause.group(1).rsplit(": ", 1)[-1].strip("'\" ") if cause else lines[0]
    return text.split(". ", 1)[0][:300]  # The first sentence: MLflow's go on with advice.


def metric_name(key: str) -> str:
    """A Keras logs key as an MLflow metric name: other characters become "_", and path
    segments MLflow would resolve ("", ".", "..") too (a class named "../x", say)."""
    name = _UNSAFE_NAME_CHARACTERS.sub("_", key)[:_limit("MAX_ENTITY_KEY_LENGTH")]
    return "/".join(part if part.strip(".") else "_" for part in name.split("/"))


def epoch_metrics(logs: Dict[str, Any]) -> Dict[str, float]:
    """{metric name: value} of the scalar, numeric and finite entries of Keras logs."""
    metrics = {}
    for key, value in logs.items():
        if isinstance(value, (str, bytes, bool)) or np.ndim(value) != 0:
            continue
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        if math.isfinite(number):
            metrics[metric_name(key)] = number
    return metrics


def config_params(config) -> Dict[str, str]:
    """{dotted key: value as YAML writes it} of a Config, each value cut to MLflow's limit."""
    limit = _limit("MAX_PARAM_VAL_LENGTH")
    params = {}
    for key, value in flatten(config.as_dict()).items():
        text = format_value(value)
        params[key] = (redacted(text) if key == "mlflow_tracking_uri" else text)[:limit]
    return params


def _limit(name: str) -> int:
    try:
        from mlflow.utils import validation
    except ImportError:
        return _LIMIT_DEFAULTS[name]
    return int(getattr(validation, name, _LIMIT_DEFAULTS[name]))


def _chunks(items: Sequence, size: int) -> Iterator[List]:
    for start in range(0, len(items), size):
        yield list(items[start:start + size])


@contextlib.contextmanager
def _short_requests(timeout_seconds: int):
    """MLflow's HTTP requests in the block: one immediate retry and `timeout_seconds` each,
    unless the user set these variables, and no urllib3 line for the retry."""
    settings = dict(_REQUEST_SETTINGS, **{_TIMEOUT_SETTING: str(timeout_seconds)})
    added = [name for name in settings if name not in os.environ]
    retries_log = python_logging.getLogger("urllib3.connectionpool")
    level = retries_log.level
    for name in added:
        os.environ[name] = settings[name]
    retries_log.setLevel(python_logging.ERROR)  # Its "Retrying ..." would be a second warning.
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)
        retries_log.setLevel(level)


def _attempt(tracking_uri: str, what: str, call: Callable[[], Any], consequence: str,
            timeout_seconds: int = REQUEST_TIMEOUT_SECONDS):
    """(True, call()) or, when any error stops it, (False, None) after one warning line:
    "MLflow at <uri>: <what> failed (<cause>); <consequence>"."""
    try:
        with _short_requests(timeout_seconds):
            return True, call()
    except Exception as e:  # noqa: BLE001 (whatever the tracker raises, the caller goes on)
        logging.warning("MLflow at %s: %s failed (%s); %s", redacted(tracking_uri), what,
                        failure_reason(e), consequence)
        return False, None


class MLflowTracker(keras.callbacks.Callback):
    """Logs a training run to MLflow (see the module doc); never stops the training.

    Put it after ResultsCallback, so each epoch's results.csv row is there when it uploads
    (get_callbacks does).

    Args:
      model_dir: the run directory: its files are uploaded, its RUN_RECORD names the run.
      tracking_uri: an MLflow tracking URI (http://host:5000, sqlite:///mlflow.db, databricks).
      experiment: the experiment's name, created when missing.
      config: the run's Config, logged as parameters (default: the model's `config`).
      run_name: default the model_dir's base name.

    Raises:
      MLflowMissingError without mlflow.

    Attributes:
      run_id: the MLflow run's id once training began (None if the tracker could not start).
      stopped: whether a call failed, which ends the tracking for this run.
    """

    def __init__(self, model_dir: str, tracking_uri: str,
                 experiment: Optional[str] = DEFAULT_EXPERIMENT, config=None,
                 run_name: Optional[str] = None):
        super().__init__()
        self._mlflow = import_mlflow()  # Before training: a missing extra is no surprise later.
        self.model_dir = model_dir
        self.tracking_uri = tracking_uri
        self.experiment = experiment or DEFAULT_EXPERIMENT
        self.config = config
        self.run_name = run_name or os.path.basename(os.path.abspath(model_dir))
        self.run_id: Optional[str] = None
        self.stopped = False
        self._client = None

    # --- Keras hooks -----------------------------------------------------------------
    def on_train_begin(self, logs=None):
        if self.run_id is None:
            self._call("starting the run", self._start_run)
        else:  # Another fit with the same tracker (NaN recovery fits once more).
            self._call("reopening the run",
                       lambda: self._client.update_run(self.run_id, status="RUNNING"))

    def on_epoch_end(self, epoch, logs=None):
        if self.run_id is None:
            return
        self._call("logging epoch %d" % (epoch + 1), lambda: self._log_metrics(epoch + 1, logs))
        self._call("uploading the reports of epoch %d" % (epoch + 1), self._upload_reports,
                   timeout_seconds=UPLOAD_TIMEOUT_SECONDS)

    def on_train_end(self, logs=None):
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
        ok, _ = _attempt(self.tracking_uri, what, call,
                        "no more tracking for this run, training goes on", timeout_seconds)
        self.stopped = not ok

    def _start_run(self) -> None:
        client = self._client = self._mlflow.tracking.MlflowClient(self.tracking_uri)
        config = self.config if self.config is not None else getattr(self.model, "config", None)
        run = self._earlier_run(client)
        if run is None:
            run = client.create_run(self._experiment_id(client), run_name=self.run_name,
                                    tags=self._tags(config))
            os.makedirs(self.model_dir, exist_ok=True)
            write_json_atomically(os.path.join(self.model_dir, RUN_RECORD), {
                "tracking_uri": self.tracking_uri, "experiment_id": run.info.experiment_id,
                "run_id": run.info.run_id})
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
        size = _limit("MAX_PARAMS_TAGS_PER_BATCH")
        for chunk in _chunks(new, size):
            self._client.log_batch(self.run_id, params=chunk)
        for chunk in _chunks(changed, size):
            self._client.log_batch(self.run_id, tags=chunk)

    def _log_metrics(self, epoch: int, logs: Optional[Dict[str, Any]]) -> None:
        from mlflow.entities import Metric
        timestamp = int(time.time() * 1000)
        metrics = [Metric(name, value, timestamp, epoch)
                   for name, value in epoch_metrics(logs or {}).items()]
        for chunk in _chunks(metrics, _limit("MAX_METRICS_PER_BATCH")):
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


def checkpoint_files(model_dir: str) -> List[str]:
    """The files of model_dir/best (the best archived checkpoint), else of model_dir/last;
    [] when neither is complete."""
    for name in CHECKPOINT_NAMES:
        files = [os.path.join(model_dir, name + suffix) for suffix in CHECKPOINT_SUFFIXES]
        if all(os.path.isfile(path) for path in files):
            return files
    return []


def log_export(model_dir: str, export_path: str) -> Optional[str]:
    """Uploads an export of the run in model_dir to its MLflow run (RUN_RECORD), under
    export/<base name of export_path>/ (a folder: its files; a file: itself).

    Returns:
      The run id; None when model_dir has no MLflow run, or after one warning when the upload
      failed or mlflow is missing.
    """
    record = read_run_record(model_dir)
    if record is None:
        return None
    try:
        mlflow = import_mlflow()
    except MLflowMissingError as e:
        logging.warning("%s is not logged to MLflow run %s: %s", export_path, record["run_id"], e)
        return None
    name = os.path.basename(os.path.normpath(export_path))

    def upload():
        client = mlflow.tracking.MlflowClient(record["tracking_uri"])
        if os.path.isdir(export_path):
            client.log_artifacts(record["run_id"], export_path, EXPORT_ARTIFACTS + "/" + name)
        else:
            client.log_artifact(record["run_id"], export_path, EXPORT_ARTIFACTS)

    ok, _ = _attempt(record["tracking_uri"], "logging the export", upload,
                    "the export is not in MLflow run %s" % record["run_id"],
                    UPLOAD_TIMEOUT_SECONDS)
    if not ok:
        return None
    logging.info("Logged %s to MLflow run %s at %s", export_path, record["run_id"],
                 redacted(record["tracking_uri"]))
    return record["run_id"]
