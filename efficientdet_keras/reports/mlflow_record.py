"""model_dir/mlflow_run.json: the MLflow run of a run directory, so that a resumed run continues
it and efficientdet-export logs to it."""

import json
import os
from typing import Dict, Optional

from absl import logging

from efficientdet_keras.utils.fileio import write_json_atomically

RUN_RECORD = "mlflow_run.json"


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


def write_run_record(model_dir: str, tracking_uri: str, experiment_id: str, run_id: str) -> str:
    """Names the MLflow run of model_dir (made when missing), crash-safely; returns the path."""
    os.makedirs(model_dir, exist_ok=True)
    return write_json_atomically(os.path.join(model_dir, RUN_RECORD), {
        "tracking_uri": tracking_uri, "experiment_id": experiment_id, "run_id": run_id})
