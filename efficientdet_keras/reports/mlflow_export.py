"""An export of a tracked training run, uploaded to the run's MLflow run (efficientdet-export
does it for a model_dir that has one)."""

import os
from typing import Optional

from absl import logging

from efficientdet_keras.reports.mlflow_calls import (UPLOAD_TIMEOUT_SECONDS, attempt,
                                                     import_mlflow, redacted)
from efficientdet_keras.reports.mlflow_record import read_run_record
from efficientdet_keras.utils.extras import MissingExtraError

EXPORT_ARTIFACTS = "export"


def log_export(model_dir: str, export_path: str) -> Optional[str]:
    """Uploads an export of the run in model_dir to its MLflow run (mlflow_record.RUN_RECORD),
    under export/<base name of export_path>/ (a folder: its files; a file: itself).

    Returns:
      The run id; None when model_dir has no MLflow run, or after one warning when the upload
      failed or mlflow is missing.
    """
    record = read_run_record(model_dir)
    if record is None:
        return None
    try:
        mlflow = import_mlflow()
    except MissingExtraError as e:
        logging.warning("%s is not logged to MLflow run %s: %s", export_path, record["run_id"], e)
        return None
    name = os.path.basename(os.path.normpath(export_path))

    def upload():
        client = mlflow.tracking.MlflowClient(record["tracking_uri"])
        if os.path.isdir(export_path):
            client.log_artifacts(record["run_id"], export_path, EXPORT_ARTIFACTS + "/" + name)
        else:
            client.log_artifact(record["run_id"], export_path, EXPORT_ARTIFACTS)

    ok, _ = attempt(record["tracking_uri"], "logging the export", upload,
                    "the export is not in MLflow run %s" % record["run_id"],
                    UPLOAD_TIMEOUT_SECONDS)
    if not ok:
        return None
    logging.info("Logged %s to MLflow run %s at %s", export_path, record["run_id"],
                 redacted(record["tracking_uri"]))
    return record["run_id"]
