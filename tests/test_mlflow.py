"""MLflow tracking of a training run (training/callbacks/mlflow_tracker.py and the
reports/mlflow_*.py modules it calls), checked on a real MLflow tracking server that this file
starts on loopback: the config as parameters, each epoch's logs as metrics at their epoch, the
run's files as artifacts, one MLflow run across a resume, the export logged to it, an
unreachable tracker that costs one warning and a few seconds, and what
mlflow.tensorflow.autolog does with this trainer."""

import csv
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import types
import urllib.request

import pytest

from helpers import REPO_ROOT, absl_info_messages, python, tiny_config
from efficientdet_keras.config.defaults import default_values
from efficientdet_keras.config.rules import flatten
from efficientdet_keras.data.synthetic import SYNTHETIC_LABEL_MAP, write_synthetic_dataset
from efficientdet_keras.reports.mlflow_calls import REQUEST_TIMEOUT_SECONDS
from efficientdet_keras.reports.mlflow_export import log_export
from efficientdet_keras.reports.mlflow_record import RUN_RECORD, read_run_record
from efficientdet_keras.training.callbacks.mlflow_tracker import MLflowTracker
from efficientdet_keras.utils.extras import MissingExtraError, install_command

TRAIN_TOOL = os.path.join(REPO_ROOT, "tools", "train.py")
EXPORT_TOOL = os.path.join(REPO_ROOT, "tools", "export.py")
SETTINGS = """\
image_size: 64
fpn_num_filters: 16
fpn_cell_repeats: 1
box_class_repeats: 1
backbone_blocks_per_stage: 1
num_classes: 4
label_map: {1: circle, 2: square, 3: triangle, 4: cross}
jitter_min: 1.0
jitter_max: 1.0
moving_average_decay: 0.9
map_freq: 1
steps_per_epoch: 1
"""
SERVER_START_SECONDS = 120
# What one unreachable tracker may cost a run: a black-holed server takes the request
# timeout twice (one retry); a refused connection or a bad URI much less.
UNREACHABLE_BUDGET_SECONDS = 2 * REQUEST_TIMEOUT_SECONDS + 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_answering(uri, process, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError("the MLflow server exited with status %d" % process.returncode)
        try:
            with urllib.request.urlopen(uri + "/health", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError("the MLflow server at %s did not answer in %d s" % (uri, seconds))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The tracking URI of an MLflow server on loopback (SQLite runs, local artifacts)."""
    root = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    log = open(root / "server.log", "w")
    # No job runner: its worker processes are not needed for tracking.
    env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
    process = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1", "--backend-store-uri", "sqlite:///%s" % (root / "mlflow.db"),
         "--artifacts-destination", str(root / "artifacts")],
        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    uri = "http://127.0.0.1:%d" % port
    try:
        wait_until_answering(uri, process, SERVER_START_SECONDS)
        yield uri
    finally:
        os.killpg(process.pid, signal.SIGTERM)  # The server and the uvicorn worker it started.
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


@pytest.fixture(scope="module")
def client(server):
    from mlflow.tracking import MlflowClient
    return MlflowClient(server)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlflow-data")
    dataset = write_synthetic_dataset(str(root / "data"), num_train=4, num_val=2,
                                      image_size=64, seed=5)
    settings = root / "settings.yaml"
    settings.write_text(SETTINGS)
    return types.SimpleNamespace(dataset=dataset, settings=str(settings))


def train_command(data, model_dir, *extra):
    dataset = data.dataset
    return [python(), TRAIN_TOOL, "--mode=traineval", "--model_dir=%s" % model_dir,
            "--train_file_pattern=%s" % dataset.train_tfrecord,
            "--val_file_pattern=%s" % dataset.val_tfrecord,
            "--val_json_file=%s" % dataset.val_json, "--batch_size=2", "--eval_images=0",
            "--tf_random_seed=1", *extra]


def run(args, timeout=600):
    result = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "Traceback" not in result.stderr, result.stderr[-4000:]
    return result


@pytest.fixture(scope="module")
def tracked_run(server, data, tmp_path_factory):
    """A run tracked from the command line: one epoch with the config key, then resumed for
    a second epoch with the --mlflow_tracking_uri flag."""
    model_dir = str(tmp_path_factory.mktemp("mlflow-runs") / "tracked")
    first = run(train_command(data, model_dir, "--num_epochs=1",
                              "--hparams=%s,mlflow_tracking_uri=%s" % (data.settings, server)))
    first_record = read_run_record(model_dir)
    second = run(train_command(data, model_dir, "--num_epochs=2", "--hparams=%s" % data.settings,
                               "--mlflow_tracking_uri=%s" % server))
    return types.SimpleNamespace(model_dir=model_dir, first=first, second=second,
                                 first_record=first_record, record=read_run_record(model_dir))


def results_rows(model_dir):
    with open(os.path.join(model_dir, "results.csv"), newline="") as f:
        return list(csv.DictReader(f))


def artifact_paths(client, run_id, path=None):
    """Every file's artifact path under `path`."""
    paths = []
    for info in client.list_artifacts(run_id, path):
        paths += artifact_paths(client, run_id, info.path) if info.is_dir else [info.path]
    return paths


def test_the_config_is_logged_as_parameters(tracked_run, client):
    run = client.get_run(tracked_run.record["run_id"])
    params = run.data.params
    assert set(params) == set(flatten(default_values()))  # Every key, nested ones flattened.
    assert params["image_size"] == "[64, 64]"
    assert params["nms_configs.method"] == "gaussian"
    assert params["num_classes"] == "4"
    assert params["label_map"] == "{1: circle, 2: square, 3: triangle, 4: cross}"
    assert params["steps_per_epoch"] == "1"
    # Parameters cannot change: the resumed run's new num_epochs is a tag.
    assert params["num_epochs"] == "1"
    assert run.data.tags["resumed_with.num_epochs"] == "2"
    assert run.data.tags["model_dir"] == os.path.abspath(tracked_run.model_dir)
    assert run.info.run_name == "tracked"


def test_every_epoch_is_logged_at_its_epoch_number(tracked_run, client):
    run_id = tracked_run.record["run_id"]
    rows = results_rows(tracked_run.model_dir)
    assert [row["epoch"] for row in rows] == ["1", "2"]
    for key in ("loss", "cls_loss", "learning_rate", "val_loss", "val_AP", "val_AP50",
                "val_ARl", "val_ema_loss"):
        history = sorted(client.get_metric_history(run_id, key), key=lambda m: m.step)
        assert [m.step for m in history] == [1, 2], key
        for metric, row in zip(history, rows):  # The values results.csv holds (7 digits).
            assert metric.value == pytest.approx(float(row[key]), rel=1e-6, abs=1e-12), key
    with open(os.path.join(tracked_run.model_dir, "coco_metrics.json")) as f:
        coco = json.load(f)
    for name in SYNTHETIC_LABEL_MAP.values():  # Per-class AP, which results.csv leaves out.
        history = sorted(client.get_metric_history(run_id, "val_AP_/" + name),
                         key=lambda m: m.step)
        assert [(m.step, m.value) for m in history] == [
            (epoch, pytest.approx(coco[str(epoch)]["AP_/" + name])) for epoch in (1, 2)]


def test_the_run_files_are_uploaded(tracked_run, client, tmp_path):
    run_id = tracked_run.record["run_id"]
    paths = set(artifact_paths(client, run_id))
    assert {"results.csv", "coco_metrics.json", "config.yaml", "plots/losses.png",
            "plots/ap.png", "pr_curves/epoch-1.png", "pr_curves/epoch-2.png",
            "confusion_matrix/epoch-2.csv", "confusion_matrix/epoch-2.png",
            "checkpoint/best.index", "checkpoint/best.data-00000-of-00001"} <= paths
    # The final results.csv, not an earlier epoch's.
    local = client.download_artifacts(run_id, "results.csv", str(tmp_path))
    with open(local) as downloaded, open(os.path.join(tracked_run.model_dir,
                                                      "results.csv")) as written:
        assert downloaded.read() == written.read()


def test_a_resumed_run_continues_the_same_mlflow_run(tracked_run, client, server):
    record = tracked_run.record
    assert record["tracking_uri"] == server
    assert tracked_run.first_record["run_id"] == record["run_id"]
    assert "Continuing MLflow run %s" % record["run_id"] in tracked_run.second.stderr
    experiment = client.get_experiment_by_name("efficientdet")
    runs = client.search_runs([experiment.experiment_id], "tags.model_dir = '%s'"
                              % os.path.abspath(tracked_run.model_dir))
    assert [r.info.run_id for r in runs] == [record["run_id"]]
    assert runs[0].info.status == "FINISHED"
    for result in (tracked_run.first, tracked_run.second):
        assert "MLflow at" not in result.stderr  # No failure warning.


def test_the_export_is_logged_to_the_run(tracked_run, client, tmp_path):
    export_dir = tmp_path / "exported" / "tiny"
    result = run([python(), EXPORT_TOOL, "--model_dir=%s" % tracked_run.model_dir,
                  "--export_dir=%s" % export_dir])
    run_id = tracked_run.record["run_id"]
    assert "Logged %s to MLflow run %s" % (export_dir, run_id) in result.stderr
    paths = set(artifact_paths(client, run_id, "export"))
    assert "export/tiny/saved_model.pb" in paths
    assert len(paths) == sum(len(files) for _, _, files in os.walk(export_dir))


def test_logs_become_valid_metrics_and_long_values_fit(server, client, tmp_path):
    """Non-finite and non-numeric values are left out; names and values are made to fit
    MLflow's rules and limits instead of failing the batch. The run record goes into a
    model_dir that did not exist yet, and a second fit reopens the finished run."""
    long_name = "x" * 7000
    config = tiny_config(label_map={1: long_name})
    tracker = MLflowTracker(str(tmp_path / "odd"), server, config=config)  # A new folder.
    with absl_info_messages() as messages:
        tracker.on_train_begin()
        tracker.on_epoch_end(0, {"loss": 1.5, "nan_loss": float("nan"), "inf_loss": float("inf"),
                                 "text": "high", "vector": [1.0, 2.0], "missing": None,
                                 "val_AP_/traffic light?": 0.25, "val_AP_/..": 0.5,
                                 "val_AP_/" + long_name: 0.75})
        tracker.on_train_end()
    assert not tracker.stopped, messages
    run = client.get_run(tracker.run_id)
    assert run.data.metrics == {"loss": 1.5, "val_AP_/traffic light_": 0.25, "val_AP_/_": 0.5,
                                ("val_AP_/" + long_name)[:250]: 0.75}
    assert run.data.params["label_map"] == ("{1: %s}" % long_name)[:6000]
    assert read_run_record(str(tmp_path / "odd"))["run_id"] == tracker.run_id
    # Another fit with the same tracker (as NaN recovery does) reopens the run.
    assert run.info.status == "FINISHED"
    tracker.on_train_begin()
    assert client.get_run(tracker.run_id).info.status == "RUNNING"


@pytest.mark.parametrize("kind", ["refused", "silent", "bad_scheme"])
def test_an_unreachable_tracker_costs_one_warning_and_seconds(kind, tmp_path):
    """A server that refuses, one that never answers, a URI MLflow cannot use: one warning
    naming the URI and the cause, then no more calls, however many epochs follow."""
    silent = socket.socket()  # Takes connections (the kernel's backlog) and never answers.
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    uri, cause = {"refused": ("http://127.0.0.1:%d" % free_port(), "Connection refused"),
                  "silent": ("http://127.0.0.1:%d" % silent.getsockname()[1], "timed out"),
                  "bad_scheme": ("nowhere://tracker", "unsupported URI")}[kind]
    environment = dict(os.environ)
    tracker = MLflowTracker(str(tmp_path), uri, config=tiny_config())
    start = time.monotonic()
    try:
        with absl_info_messages() as messages:
            tracker.on_train_begin()
            for epoch in range(5):
                tracker.on_epoch_end(epoch, {"loss": 1.0})
            tracker.on_train_end()
    finally:
        silent.close()
    seconds = time.monotonic() - start
    warnings = [m for m in messages if m.startswith("MLflow at")]
    assert len(warnings) == 1, messages
    assert uri in warnings[0] and cause in warnings[0] and "\n" not in warnings[0]
    assert tracker.stopped and tracker.run_id is None
    assert seconds < UNREACHABLE_BUDGET_SECONDS
    assert not os.path.exists(tmp_path / RUN_RECORD)
    assert dict(os.environ) == environment  # The short HTTP settings were only for the calls.


@pytest.mark.slow  # The one-warning test above keeps an unreachable tracker in make test.
def test_an_unreachable_tracker_leaves_the_training_run_as_it_was(data, tmp_path):
    uri = "http://127.0.0.1:%d" % free_port()
    model_dir = tmp_path / "run"
    result = run(train_command(data, model_dir, "--mode=train", "--num_epochs=2",
                               "--hparams=%s" % data.settings, "--mlflow_tracking_uri=%s" % uri))
    lines = [line for line in result.stderr.splitlines() if "MLflow" in line]
    assert len(lines) == 1, result.stderr[-4000:]
    assert "MLflow at %s: starting the run failed ([Errno 111] Connection refused)" % uri \
        in lines[0]
    assert "Retrying" not in result.stderr
    assert [row["epoch"] for row in results_rows(model_dir)] == ["1", "2"]
    assert (model_dir / "last.index").exists() and not (model_dir / RUN_RECORD).exists()


@pytest.mark.quick
def test_the_tracker_is_asked_for_by_the_config_from_the_chief_only(tmp_path, monkeypatch):
    from efficientdet_keras.cli.common import run_or_exit
    from efficientdet_keras.training import callbacks as callbacks_module
    from efficientdet_keras.training.callbacks.results import ResultsCallback
    from efficientdet_keras.training.backup import StepBackup

    def kinds(config):
        return [type(c) for c in callbacks_module.get_callbacks(config, str(tmp_path))]

    with pytest.raises(ValueError, match="mlflow_tracking_uri must be null"):
        tiny_config(mlflow_tracking_uri="")
    assert MLflowTracker not in kinds(tiny_config())
    tracked = tiny_config(mlflow_tracking_uri="http://127.0.0.1:5000", mlflow_experiment="d0")
    order = kinds(tracked)
    assert order.index(ResultsCallback) < order.index(MLflowTracker) < order.index(StepBackup)
    tracker = callbacks_module.get_callbacks(tracked, str(tmp_path))[order.index(MLflowTracker)]
    assert (tracker.mlflow_run.experiment, tracker.mlflow_run.run_name) == (
        "d0", os.path.basename(str(tmp_path)))
    monkeypatch.setattr(callbacks_module, "is_chief", lambda strategy: False)
    assert MLflowTracker not in kinds(tracked)  # Other workers of a multi-worker run.
    monkeypatch.undo()

    # Without mlflow: one line asking for the extra; without the key nothing changes.
    monkeypatch.setitem(sys.modules, "mlflow", None)
    with pytest.raises(MissingExtraError, match=r"^the MLflow tracker needs mlflow \(.+\): "
                                                + re.escape(install_command("trackers")) + "$"
                       ) as error:
        MLflowTracker(str(tmp_path), "http://127.0.0.1:5000")
    with pytest.raises(SystemExit) as exit_:
        run_or_exit("efficientdet-train", callbacks_module.get_callbacks, tracked, str(tmp_path))
    assert str(exit_.value) == "efficientdet-train: " + str(error.value)
    assert MLflowTracker not in kinds(tiny_config())
    assert log_export(str(tmp_path), str(tmp_path / "export")) is None


# A user's script with mlflow.tensorflow.autolog; the imports come in the order its third
# argument names: the package first (it sets TF_USE_LEGACY_KERAS before TensorFlow loads),
# TensorFlow first, or TensorFlow first with tf.keras used before mlflow is imported.
AUTOLOG_SCRIPT = """\
import sys
tracking_uri, experiment, order, train_pattern = sys.argv[1:]
if order.startswith("tensorflow-first"):
    import tensorflow
import efficientdet_keras
if order == "tensorflow-first-keras-used":
    tensorflow.keras.Model
import mlflow
import mlflow.tensorflow
import tensorflow as tf
from efficientdet_keras import get_efficientdet_config
from efficientdet_keras.data.pipeline import InputPipeline
from efficientdet_keras.data.sources import make_source
from efficientdet_keras.training.trainer import EfficientDetNetTrain

mlflow.set_tracking_uri(tracking_uri)
mlflow.set_experiment(experiment)
print("tf.keras.Model is %s.Model" % tf.keras.Model.__module__.split(".")[0])
mlflow.tensorflow.autolog(log_models=False, log_datasets=False, checkpoint=False)
config = get_efficientdet_config("efficientdet-d0")
config.override(dict(image_size=64, num_classes=4, fpn_num_filters=16, fpn_cell_repeats=1,
                     box_class_repeats=1, batch_size=2, num_epochs=2))
model = EfficientDetNetTrain(config)
model.compile(steps_per_epoch=1)
train = InputPipeline(config, make_source(train_pattern), is_training=True)()
try:
    model.fit(train, epochs=2, steps_per_epoch=1, verbose=0)
    print("fit ended")
except Exception as e:
    print("fit raised %s: %s" % (type(e).__name__, e))
"""


def run_autolog_script(script, server, order, train_pattern):
    """The script's output; the package-first order runs warm (TensorFlow loaded with
    TF_USE_LEGACY_KERAS=1, as the package sets it), the others cold without the variable."""
    if order == "package-first":
        interpreter, environment = python(), dict(os.environ)
    else:
        interpreter = sys.executable
        environment = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    result = subprocess.run([interpreter, str(script), server, "autolog-" + order, order,
                             train_pattern], capture_output=True, text=True, timeout=600,
                            env=environment)
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout


@pytest.mark.slow  # What another library does; the package's own tracker is tested above.
def test_what_mlflow_autolog_does_with_this_trainer(server, client, data, tmp_path):
    """mlflow.tensorflow.autolog patches `tf.keras.Model.fit`, and adds callbacks of the
    `tensorflow.keras` module mlflow.tensorflow imported. With TF_USE_LEGACY_KERAS=1 as
    TensorFlow loads (importing this package first sets it), both are tf_keras: the trainer's
    fit logs fit's arguments, the optimizer, each epoch's logs (steps from 0), a model summary
    and its own TensorBoard logs, but not the config and none of the run's files. With TensorFlow loaded before the package,
    `import tensorflow.keras` finds Keras 3, and what happens depends on tf.keras having
    been used before mlflow.tensorflow is imported: if it was, tf.keras becomes Keras 3 and
    the patch misses the trainer (nothing is logged); if not, tf.keras stays tf_keras, and its
    patched fit fails on autolog's Keras 3 TensorBoard callback."""
    script = tmp_path / "autolog.py"
    script.write_text(AUTOLOG_SCRIPT)
    pattern = data.dataset.train_tfrecord

    output = run_autolog_script(script, server, "package-first", pattern)
    assert "tf.keras.Model is tf_keras.Model" in output and "fit ended" in output
    logged = client.search_runs([client.get_experiment_by_name("autolog-package-first")
                                 .experiment_id])
    assert len(logged) == 1
    run = logged[0]
    assert run.data.params["epochs"] == "2" and run.data.params["opt_name"] == "SGD"
    assert "image_size" not in run.data.params  # Fit's arguments, not the config.
    loss = client.get_metric_history(run.info.run_id, "loss")
    assert sorted(m.step for m in loss) == [0, 1]
    assert "cls_loss" in run.data.metrics and "learning_rate" in run.data.metrics
    # Its own TensorBoard logs and model summary; none of the run's files.
    assert {a.path for a in client.list_artifacts(run.info.run_id)} == {
        "model_summary.txt", "tensorboard_logs"}

    output = run_autolog_script(script, server, "tensorflow-first-keras-used", pattern)
    assert "tf.keras.Model is keras.Model" in output and "fit ended" in output
    assert client.search_runs([client.get_experiment_by_name(
        "autolog-tensorflow-first-keras-used").experiment_id]) == []

    output = run_autolog_script(script, server, "tensorflow-first", pattern)
    assert "tf.keras.Model is tf_keras.Model" in output
    assert "fit raised AttributeError: '_TensorBoard' object has no attribute " \
        "'_implements_train_batch_hooks'" in output
