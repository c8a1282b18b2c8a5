"""A training run's values as MLflow takes them: Keras logs as metrics, the config as
parameters, each named and cut to fit MLflow's rules and limits."""

import math
import re
from typing import Any, Dict

import numpy as np

from efficientdet_keras.config.literals import format_value
from efficientdet_keras.config.rules import flatten
from efficientdet_keras.reports.mlflow_calls import mlflow_limit, redacted

# Characters of metric names every MLflow server takes (no colon: not on Windows).
_UNSAFE_NAME_CHARACTERS = re.compile(r"[^\w.\- /]")


def metric_name(key: str) -> str:
    """A Keras logs key as an MLflow metric name: other characters become "_", and path
    segments MLflow would resolve ("", ".", "..") too (a class named "../x", say)."""
    name = _UNSAFE_NAME_CHARACTERS.sub("_", key)[:mlflow_limit("MAX_ENTITY_KEY_LENGTH")]
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
    limit = mlflow_limit("MAX_PARAM_VAL_LENGTH")
    params = {}
    for key, value in flatten(config.as_dict()).items():
        text = format_value(value)
        params[key] = (redacted(text) if key == "mlflow_tracking_uri" else text)[:limit]
    return params
