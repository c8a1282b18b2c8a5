"""What tests import besides pytest fixtures: repository paths, small model configs and
small on-disk datasets with known content.

Fixtures and hooks live in conftest.py; tests import everything else from here.
"""

import contextlib
import http.server
import json
import logging
import os
import random
import shutil
import sys
import tarfile
import threading
import time

import filelock
import numpy as np
import tensorflow as tf
import tf_keras as keras

from efficientdet_keras.data.formats.records import ImageRecord
from efficientdet_keras.data.formats.tf_example import record_to_tf_example
from efficientdet_keras.training.ema import ExponentialMovingAverage

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REFERENCE_DIR = os.path.join(REPO_ROOT, "..", "shared", "reference")
HPARAMS_DIR = os.path.join(REPO_ROOT, "hparams")
# The Python of the device clients' environment (MediaPipe, the Task Library; see
# tests/clients/requirements.txt), made by `make test`.
# Where conftest's warm_python fixture puts the launcher of a Python with TensorFlow imported.
PYTHON_ENV = "EFFICIENTDET_TEST_PYTHON"
CLIENTS_PYTHON = os.environ.get("EFFICIENTDET_CLIENTS_PYTHON",
                                os.path.join(REPO_ROOT, ".venv-clients", "bin", "python"))


def python() -> str:
    """The Python for commands a test runs as processes, when the test is not about starting
    one: the warm launcher (warm_python.py) in a test run, else this interpreter."""
    return os.environ.get(PYTHON_ENV, sys.executable)


def docs_hook(name: str):
    """The module docs/hooks/<name>.py, loaded by its path as MkDocs loads a hook."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        name, os.path.join(REPO_ROOT, "docs", "hooks", "%s.py" % name))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def command_environment(**overrides) -> dict:
    """os.environ for a shell command: the package's console scripts first on PATH (the warm
    launchers in a test run, then this environment's installed ones)."""
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]])
    if os.environ.get(PYTHON_ENV):
        path = os.path.dirname(os.environ[PYTHON_ENV]) + os.pathsep + path
    return dict(os.environ, PATH=path, **overrides)


def tiny_config(model_name: str = "efficientdet-d0", **overrides):
    """A full-architecture config at a small input size, for fast tests."""
    from efficientdet_keras import get_efficientdet_config
    config = get_efficientdet_config(model_name)
    config.override(dict(dict(image_size=128, num_classes=4), **overrides))
    return config


def built_once_per_run(tmp_path_factory, name: str, build) -> str:
    """The folder `name` that `build(folder)` fills, once per test run: the first xdist
    worker to ask builds it while the others wait, then all share it (read-only)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # The run's folder, above each worker's own.
    folder, done = root / name, root / (name + ".built")
    with filelock.FileLock(str(root / (name + ".lock"))):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)  # A build that failed part-way.
            build(str(folder))
            done.touch()
    return str(folder)


@contextlib.contextmanager
def keras_seeded(seed: int):
    """Within the block, a model is built the same whatever tests ran before in the process.

    Keras' initializers without a seed of their own draw one from Python's `random`
    (tf.random.set_seed alone does not fix them) unless Keras' seed generator is set, which
    tf_keras.utils.set_random_seed does for good; here it is set for the block only."""
    from tf_keras.src import backend
    earlier = getattr(backend._SEED_GENERATOR, "generator", None)
    backend._SEED_GENERATOR.generator = random.Random(seed)
    tf.random.set_seed(seed)
    try:
        yield
    finally:
        backend._SEED_GENERATOR.generator = earlier


@contextlib.contextmanager
def absl_info_messages():
    """The messages the package logs with absl in the block, INFO and up, as a list: absl's
    own logger is set to INFO for the block, whatever an earlier test left it at (caplog only
    sets the root logger's level)."""
    messages = []

    class Capturing(logging.Handler):
        def emit(self, record):
            messages.append(record.getMessage())

    handler, absl_logger = Capturing(logging.INFO), logging.getLogger("absl")
    level = absl_logger.level
    absl_logger.addHandler(handler)
    absl_logger.setLevel(logging.INFO)
    try:
        yield messages
    finally:
        absl_logger.removeHandler(handler)
        absl_logger.setLevel(level)


def bright_box_image(height, width, box, channels=3):
    """Black image with one white rectangle at pixel box [ymin, xmin, ymax, xmax]."""
    image = np.zeros([height, width, channels], np.uint8)
    ymin, xmin, ymax, xmax = (int(v) for v in box)
    image[ymin:ymax, xmin:xmax] = 255
    return image


def write_image(path, image, fmt="jpeg"):
    encode = tf.io.encode_png if fmt == "png" else lambda x: tf.io.encode_jpeg(x, quality=100)
    with open(path, "wb") as f:
        f.write(encode(image).numpy())
    return path


def make_records(folder, count=6, height=120, width=160, classes=(1, 2)):
    """`count` images, each a white box on black, with that box (class 1) and a second box."""
    records = []
    rng = np.random.default_rng(0)
    for i in range(count):
        ymin, xmin = rng.integers(0, height // 2), rng.integers(0, width // 2)
        box = np.array([ymin, xmin, ymin + height // 3, xmin + width // 3], np.float32)
        path = write_image(os.path.join(folder, "img%d.jpg" % i), bright_box_image(height, width, box))
        boxes = np.stack([box, [0, 0, height / 4, width / 4]]).astype(np.float32)
        records.append(ImageRecord(100 + i, path, height, width, boxes,
                                   np.array(classes, np.int64), np.zeros(2, bool),
                                   np.zeros(2, np.float32)))
    return records


def write_tfrecord(path, records):
    with tf.io.TFRecordWriter(path) as writer:
        for record in records:
            with open(record.path, "rb") as f:
                writer.write(record_to_tf_example(record, f.read()).SerializeToString())
    return path


def write_model_dir(model_dir, config):
    """A run folder as the trainer leaves it: config.yaml and ckpt-1 of a freshly built
    EfficientDetNet. Returns the model."""
    from efficientdet_keras import EfficientDetNet, save_ckpt
    os.makedirs(model_dir, exist_ok=True)
    config.save_yaml(str(model_dir))
    model = EfficientDetNet(config=config)
    model.build_variables()
    save_ckpt(model, os.path.join(str(model_dir), "ckpt-1"))
    return model


class _HTTPServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        """A client that hangs up mid-answer (a download given up, a timeout a test sets) is
        what some tests do: no traceback for it in the suite's output."""
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)


class ThreadedServer:
    """An HTTP server on a free loopback port, answering from a thread while the block runs;
    `url` is its base address. Subclasses give their request handler to `_serve`."""

    def _serve(self, handler) -> None:
        self._httpd = _HTTPServer(("127.0.0.1", 0), handler)
        self.url = "http://127.0.0.1:%d" % self._httpd.server_address[1]

    def __enter__(self):
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self._httpd.shutdown()
        self._httpd.server_close()


class LoopbackServer(ThreadedServer):
    """An HTTP server on 127.0.0.1 serving `root` from a thread, recording each path asked
    for in `requests` (a stand-in for a model hub or a mirror; these machines have no
    network). Use as a context manager; `url` is its base address."""

    def __init__(self, root, delay_seconds: float = 0.0):
        self.requests = []
        self.delay_seconds = delay_seconds  # Before each answer: a slow mirror.
        server = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, directory=str(root), **kwargs)

            def do_GET(self):
                server.requests.append(self.path)
                time.sleep(server.delay_seconds)
                super().do_GET()

            def log_message(self, *args):  # Quiet: the tests read `requests` instead.
                pass

        self._serve(Handler)


KAGGLE_HANDLE = "tensorflow/efficientdet/tensorFlow2/lite0-feature-vector"
KAGGLE_PAGE = "/models/" + KAGGLE_HANDLE + "/1"
TFHUB_PATH = "/tensorflow/efficientdet/lite0/feature-vector/1"
ARCHIVE_DOWNLOAD = "/api/v1/models/" + KAGGLE_HANDLE + "/1/download"
KAGGLE_API = "/api/v1/models.ModelApiService/"


class KaggleModelsStandIn(ThreadedServer):
    """A loopback server answering as Kaggle Models does: tfhub.dev handles redirected to the
    model's page URL, which serves the compressed module; the archive download URL redirected
    to the archive in storage; and the JSON API kagglehub calls (the instance's current
    version, its file list, each file's download redirected to storage)."""

    def __init__(self, module_dir, archive_path):
        files = {os.path.relpath(os.path.join(folder, name), module_dir).replace(os.sep, "/"):
                 os.path.join(folder, name)
                 for folder, _, names in os.walk(module_dir) for name in names}
        with open(archive_path, "rb") as f:
            archive = f.read()
        self.requests = []
        stand_in = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _send(self, status, body=b"", content_type="application/octet-stream",
                      location=None):
                self.send_response(status)
                if location:
                    self.send_header("Location", location)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                stand_in.requests.append(("GET", self.path))
                path, _, query = self.path.partition("?")
                if path == TFHUB_PATH:
                    self._send(302, location=KAGGLE_PAGE + "?" + query)
                elif path == KAGGLE_PAGE and "tf-hub-format=compressed" in query:
                    self._send(200, archive, "application/x-tar")
                elif path == ARCHIVE_DOWNLOAD:
                    self._send(302, location="/storage/module.tar.gz")
                elif path == "/storage/module.tar.gz":
                    self._send(200, archive, "application/x-tar")
                elif path.startswith("/storage/files/") and path[15:] in files:
                    with open(files[path[15:]], "rb") as f:
                        self._send(200, f.read())
                else:
                    self._send(404, b"not found", "text/plain")

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                stand_in.requests.append(("POST", self.path))
                if body.get("instanceSlug") != "lite0-feature-vector":
                    return self._send(404, json.dumps({"code": 404, "message": "no such model"})
                                      .encode(), "application/json")
                answers = {
                    "GetModelInstance": {"slug": "lite0-feature-vector", "versionNumber": 1},
                    "ListModelInstanceVersionFiles": {
                        "files": [{"name": n, "size": os.path.getsize(p)}
                                  for n, p in sorted(files.items())], "nextPageToken": ""}}
                call = self.path[len(KAGGLE_API):]
                if call == "DownloadModelInstanceVersion":
                    self._send(302, location="/storage/files/" + body["path"])
                elif call in answers:
                    self._send(200, json.dumps(answers[call]).encode(), "application/json")
                else:
                    self._send(404, b"{}", "application/json")

            def log_message(self, *args):
                pass

        self._serve(Handler)


@contextlib.contextmanager
def kagglehub_pointed_at(url, cache):
    """kagglehub (through kagglesdk's KAGGLE_API_ENVIRONMENT, its TEST environment's address
    set to `url`) downloading into `cache`, without the user's credentials, in this block."""
    from kagglesdk import kaggle_env
    names = ("KAGGLE_API_ENVIRONMENT", "KAGGLEHUB_CACHE", "KAGGLE_CONFIG_DIR", "KAGGLE_USERNAME",
             "KAGGLE_KEY", "KAGGLE_API_TOKEN")
    saved = {name: os.environ.get(name) for name in names}
    saved_endpoint = kaggle_env._env_to_endpoint[kaggle_env.KaggleEnv.TEST]
    for name in names[3:]:
        os.environ.pop(name, None)
    os.environ.update(KAGGLE_API_ENVIRONMENT="TEST", KAGGLEHUB_CACHE=str(cache),
                      KAGGLE_CONFIG_DIR=os.path.join(str(cache), "no_credentials"))
    kaggle_env._env_to_endpoint[kaggle_env.KaggleEnv.TEST] = url
    try:
        yield
    finally:
        kaggle_env._env_to_endpoint[kaggle_env.KaggleEnv.TEST] = saved_endpoint
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def kagglehub_cache_with(module_dir, cache):
    """`cache` filled by kagglehub itself with `module_dir` as KAGGLE_HANDLE version 1, as a
    user's machine holds it after one download; later reads need no server. Returns the
    module's folder there."""
    import kagglehub
    archive = os.path.join(str(cache) + "-archive", "module.tar.gz")
    os.makedirs(os.path.dirname(archive), exist_ok=True)
    with tarfile.open(archive, "w:gz") as packed:
        for name in sorted(os.listdir(module_dir)):
            packed.add(os.path.join(module_dir, name), arcname=name)
    with KaggleModelsStandIn(module_dir, archive) as stand_in:
        with kagglehub_pointed_at(stand_in.url, cache):
            return kagglehub.model_download(KAGGLE_HANDLE + "/1")



def write_release_archive(root, name, checkpoint_folder):
    """The archive of released checkpoint `name` as published (its path below the base
    address, one folder inside), built from the files of `checkpoint_folder`. Returns the
    archive's path."""
    from efficientdet_keras.checkpoint import RELEASED_CHECKPOINTS
    entry = RELEASED_CHECKPOINTS[name]
    path = os.path.join(str(root), entry.path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tarfile.open(path, "w:gz") as archive:
        for file_name in sorted(os.listdir(checkpoint_folder)):
            if file_name == "checkpoint" or file_name.startswith("model."):
                archive.add(os.path.join(checkpoint_folder, file_name),
                            arcname="%s/%s" % (entry.unpacks_to, file_name))
    return path


def write_backbone_checkpoint(detector_folder, folder):
    """An ImageNet-checkpoint stand-in in `folder`: the efficientnet-* variables (and their
    averages) of the detector checkpoint in `detector_folder`, nothing else. Returns folder."""
    reader = tf.train.load_checkpoint(str(detector_folder))
    names = sorted(n for n in reader.get_variable_to_shape_map() if n.startswith("efficientnet-"))
    os.makedirs(str(folder))
    tf.raw_ops.SaveV2(prefix=os.path.join(str(folder), "model.ckpt"), tensor_names=names,
                      shape_and_slices=[""] * len(names),
                      tensors=[reader.get_tensor(n) for n in names])
    with open(os.path.join(str(folder), "checkpoint"), "w") as f:
        f.write('model_checkpoint_path: "model.ckpt"\n')
    return str(folder)


@contextlib.contextmanager
def released_models_served(root, folders, cache):
    """Serves release archives of {name: checkpoint folder} from a LoopbackServer and points
    the package at it ($EFFICIENTDET_KERAS_BASE_URL) and at `cache`
    ($EFFICIENTDET_KERAS_HOME) until the block ends. Yields the server."""
    for name, folder in folders.items():
        write_release_archive(root, name, folder)
    saved = {k: os.environ.get(k) for k in ("EFFICIENTDET_KERAS_BASE_URL",
                                            "EFFICIENTDET_KERAS_HOME")}
    with LoopbackServer(root) as server:
        os.environ["EFFICIENTDET_KERAS_BASE_URL"] = server.url
        os.environ["EFFICIENTDET_KERAS_HOME"] = str(cache)
        try:
            yield server
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


class TinyTrainer(keras.Model):
    """A Dense regression trained like EfficientDetNetTrain: SGD with momentum on a
    step-dependent schedule, then the EMA update, the EMA tracked under "ema"."""

    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(2, kernel_initializer="ones")
        self(tf.zeros([1, 3]))
        object.__setattr__(self, "ema", ExponentialMovingAverage(self, 0.9))
        self._track_trackable(self.ema, name="ema")
        schedule = keras.optimizers.schedules.PolynomialDecay(0.05, 20, 0.001)
        self.compile(optimizer=keras.optimizers.SGD(schedule, momentum=0.9))

    def call(self, x):
        return self.dense(x)

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((self(x, training=True) - y) ** 2)
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        self.ema.update(self.optimizer.iterations)
        return {"loss": loss}

    def state(self):
        """Weights, EMA, optimizer slots and step: all a resume must bring back."""
        return ([v.numpy() for v in self.weights] + [v.numpy() for v in self.ema.shadows] +
                [v.numpy() for v in self.optimizer.variables])


# Full backbone and all levels, one BiFPN cell and one head conv: conversion takes half as long.
FAST = dict(fpn_cell_repeats=1, box_class_repeats=1)
# A network with every kind of layer, at a fraction of the ops: one block per backbone stage,
# one narrow BiFPN cell, one head conv, so tracing (most of a short test's time) has less to do;
# for tests about training, evaluation and exports rather than the architecture.
SMALL_NETWORK = dict(fpn_num_filters=16, fpn_cell_repeats=1, box_class_repeats=1,
                     backbone_blocks_per_stage=1)
SMALL_NETWORK_HPARAMS = ",".join("%s=%s" % item for item in SMALL_NETWORK.items())


def synthetic_images(count, height, width, seed=5):
    """uint8 [h, w, 3] shapes on textured backgrounds."""
    from efficientdet_keras.data.synthetic import generate_examples
    return [image for _, image in generate_examples(count, height, width, seed=seed)]


def _scale_kernel(layer, factor):
    """Multiplies the last kernel of a prediction conv (pointwise when separable)."""
    kernel = [w for w in layer.weights if "bias" not in w.name][-1]
    kernel.assign(kernel * factor)


def calibration_batch(config):
    """float32 [4, H, W, 3] normalised letterboxed images, two of them with padding."""
    from efficientdet_keras.inference.tflite_runner import letterbox_uint8
    height, width = config.image_size
    sizes = [(height, width), (height, width), (height * 3 // 4, width), (height, width // 2)]
    images = [letterbox_uint8(synthetic_images(1, h, w, seed=i)[0], (height, width),
                              config.mean_rgb)[0] for i, (h, w) in enumerate(sizes)]
    return (np.stack(images).astype(np.float32) - np.array(config.mean_rgb, np.float32)) / \
        np.array(config.stddev_rgb, np.float32)


def calibrate_heads(model, images):
    """Sets the moving statistics of every BatchNorm after the backbone to the batch
    statistics of `images` (batch_norm_momentum is 0). The backbone stays as initialised:
    its random features are O(1) already, and calibrating 16 random blocks as well makes
    the network chaotic (float rounding then changes the outputs by 1e-3)."""
    levels = model.backbone(images, training=False)
    features = levels[model.config.min_level - 1:model.config.max_level]
    for resample in model.resample_layers:
        features.append(resample(features[-1], training=True))
    features = model.fpn_cells(features, training=True)
    model.class_net.head_features(features, training=True)
    model.box_net.head_features(features, training=True)


def confident_model(model_name, image_size, top_score=0.9, max_logit=4.0, max_code=1.0,
                    network=SMALL_NETWORK, **overrides):
    """A model whose class logits and box codes vary from anchor to anchor (up to about
    +-max_logit around the prior and +-max_code) and whose best class-1 score is
    top_score on its calibration images. The other classes score below ~0.05, so that
    class-agnostic (TFLite op) and class-aware (SavedModel) NMS agree above 0.3. `network`:
    the architecture's overrides (by default the small network)."""
    from efficientdet_keras import EfficientDetNet
    config = tiny_config(model_name, image_size=image_size, batch_norm_momentum=0.0,
                         **dict(network, **overrides))
    model = EfficientDetNet(config=config)
    images = calibration_batch(config)
    model.build_variables()
    calibrate_heads(model, images)

    def flat_outputs():
        class_outputs, box_outputs = model(images, training=False)
        logits = np.concatenate([np.reshape(c.numpy(), [-1, config.num_classes])
                                 for c in class_outputs])
        return logits, np.concatenate([np.reshape(b.numpy(), [-1]) for b in box_outputs])

    logits, codes = flat_outputs()
    _scale_kernel(model.class_net.predict, max_logit / np.max(np.abs(logits - np.median(logits))))
    _scale_kernel(model.box_net.predict, max_code / np.max(np.abs(codes)))
    logits, _ = flat_outputs()
    bias = model.class_net.predict.bias
    shift = np.zeros(bias.shape, np.float32)
    shift[:] = -4.0  # Other classes: scores below 0.05.
    shift[0::config.num_classes] = np.log(top_score / (1 - top_score)) - logits[:, 0].max()
    bias.assign_add(shift)
    return model


def score_twice(model):
    """Makes class 2 predict what class 1 does (same kernel columns, a bias 0.2 lower, so that
    no class ties for a box's best), so every box scores twice: class-agnostic and per-class
    NMS then disagree."""
    num_classes = model.config.num_classes
    kernel = [w for w in model.class_net.predict.weights if "bias" not in w.name][-1]
    for weight in (kernel, model.class_net.predict.bias):
        values = weight.numpy()
        values[..., 1::num_classes] = values[..., 0::num_classes]
        weight.assign(values)
    lower = np.zeros(model.class_net.predict.bias.shape, np.float32)
    lower[1::num_classes] = 0.2
    model.class_net.predict.bias.assign_sub(lower)


def overlapping_pairs(detections, threshold=0.5):
    """Pairs of detections of different classes whose boxes overlap above `threshold`."""
    boxes, classes = detections["boxes"], detections["classes"]
    pairs = 0
    for i in range(len(boxes)):
        for j in range(i + 1, len(boxes)):
            if classes[i] != classes[j] and box_iou(boxes[i], boxes[j]) > threshold:
                pairs += 1
    return pairs


def box_iou(a, b):
    inter = (max(0.0, min(a[2], b[2]) - max(a[0], b[0])) *
             max(0.0, min(a[3], b[3]) - max(a[1], b[1])))
    area = lambda r: (r[2] - r[0]) * (r[3] - r[1])  # noqa: E731
    union = area(a) + area(b) - inter
    return inter / union if union > 0 else 0.0


def write_self_labelled_data(model, folder, height, width):
    """A TFRecord of 6 synthetic images whose ground truth is the model's own best
    detections (score > 0.3, hard NMS), so that AP is far from 0 and moves with any box or
    score error. Returns the file."""
    from efficientdet_keras import Detector
    os.makedirs(folder)
    images = synthetic_images(6, height, width, seed=21)
    records = []
    for index, (image, found) in enumerate(zip(images, Detector.from_model(model).detect(images))):
        keep = found.top(score_threshold=0.3, max_detections=6)
        boxes = keep.boxes.astype(np.float32)
        path = write_image(os.path.join(folder, "%d.png" % index), image, fmt="png")
        records.append(ImageRecord(index + 1, path, height, width, boxes, keep.class_ids,
                                   np.zeros(len(keep), bool),
                                   (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])))
    assert sum(len(record.classes) for record in records) >= 6
    return write_tfrecord(os.path.join(folder, "val.tfrecord"), records)


def printed_metrics(stdout):
    return {line.split()[0]: float(line.split()[1]) for line in stdout.splitlines()
            if len(line.split()) == 2 and line.split()[0].startswith(("AP", "AR"))}


class BrightSquares:
    """A Detector backend standing in for a trained model: it sees each image at
    `input_size` px on its longer side, as a detector does, and finds the bright squares
    there of at least 2x2 of its pixels (class 1, "square", score 0.9). What shrinks below
    that at the model's size is lost, as a real detector loses it."""

    label_map = {1: "square"}
    description = "bright squares"

    def __init__(self, input_size: int = 128):
        self.input_size = input_size
        self.images_seen = 0

    def detect(self, images):
        import tensorflow as tf
        from scipy import ndimage
        found = []
        for image in images:
            self.images_seen += 1
            scale = min(self.input_size / max(image.shape[:2]), 1.0)
            small = tf.image.resize(image[np.newaxis].astype(np.float32),
                                    [max(int(image.shape[0] * scale), 1),
                                     max(int(image.shape[1] * scale), 1)],
                                    antialias=True)[0].numpy().mean(-1)
            blobs, _ = ndimage.label(small > 128)
            boxes = [[rows.start, cols.start, rows.stop, cols.stop]
                     for rows, cols in ndimage.find_objects(blobs)
                     if rows.stop - rows.start >= 2 and cols.stop - cols.start >= 2]
            boxes = np.array(boxes, np.float32).reshape(-1, 4) / scale
            found.append((boxes, np.full([len(boxes)], 0.9, np.float32),
                          np.ones([len(boxes)], np.int64)))
        return found


def untrained_small_network(class_kernel_seed=None, num_classes: int = 3):
    """A small-network EfficientDetNet at 64 px with its variables built; with
    `class_kernel_seed` (a stateless seed pair) its class kernel is redrawn with a standard
    deviation of 1000, so that it gives many boxes of widely spread scores."""
    import tensorflow as tf
    from efficientdet_keras import EfficientDetNet
    config = tiny_config(num_classes=num_classes, image_size=64, fpn_num_filters=16,
                         fpn_cell_repeats=1, box_class_repeats=1)
    model = EfficientDetNet(config=config)
    model.build_variables()
    if class_kernel_seed is not None:
        kernel = next(v for v in model.variables
                      if v.name == "class_net/class-predict/pointwise_kernel:0")
        kernel.assign(tf.random.stateless_normal(kernel.shape, class_kernel_seed,
                                                 stddev=1000.0))
    return model
