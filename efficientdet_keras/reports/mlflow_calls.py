"""How the package calls MLflow: mlflow imported only when needed, short HTTP requests, and a
failed call reported as one warning line instead of an error.

mlflow is an extra (`pip install 'efficientdet_keras[trackers]'`). MLflow's client retries a
dead server for minutes; each request here gets one retry and a few seconds (MLFLOW_HTTP_REQUEST_*
variables set by the user win).
"""

import contextlib
import logging as python_logging
import os
import re
from typing import Any, Callable, Iterator, List, Sequence, Tuple

from absl import logging

from efficientdet_keras.utils.extras import import_extra

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
# The cause inside a failed HTTP request's message: "... (Caused by NewConnectionError(...:
# [Errno 111] Connection refused"))".
_HTTP_CAUSE = re.compile(r"\(Caused by \w+\((.*)\)\)\s*$")
_PASSWORD_IN_URI = re.compile(r"//[^/@]*@")


def import_mlflow():
    """The mlflow module (with mlflow.tracking, for MlflowClient); MissingExtraError (one line
    with the install command) without it."""
    mlflow = import_extra("mlflow", "the MLflow tracker", "trackers")
    import_extra("mlflow.tracking", "the MLflow tracker", "trackers")
    return mlflow


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


def mlflow_limit(name: str) -> int:
    """One of MLflow's limits (mlflow.utils.validation), e.g. "MAX_PARAM_VAL_LENGTH"."""
    try:
        from mlflow.utils import validation
    except ImportError:
        return _LIMIT_DEFAULTS[name]
    return int(getattr(validation, name, _LIMIT_DEFAULTS[name]))


def chunks(items: Sequence, size: int) -> Iterator[List]:
    """`items` in lists of at most `size`: the batches MLflow takes in one request."""
    for start in range(0, len(items), size):
        yield list(items[start:start + size])


@contextlib.contextmanager
def short_requests(timeout_seconds: int):
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


def attempt(tracking_uri: str, what: str, call: Callable[[], Any], consequence: str,
            timeout_seconds: int = REQUEST_TIMEOUT_SECONDS) -> Tuple[bool, Any]:
    """(True, call()) or, when any error stops it, (False, None) after one warning line:
    "MLflow at <uri>: <what> failed (<cause>); <consequence>"."""
    try:
        with short_requests(timeout_seconds):
            return True, call()
    except Exception as e:  # noqa: BLE001 (whatever MLflow raises, the caller goes on)
        logging.warning("MLflow at %s: %s failed (%s); %s", redacted(tracking_uri), what,
                        failure_reason(e), consequence)
        return False, None
