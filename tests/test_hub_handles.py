"""EfficientDetNetTrainHub with TF-Hub *handles*: http(s) URLs that tensorflow_hub resolves
itself, downloading the module once into its own cache ($TFHUB_CACHE_DIR).

tensorflow_hub (0.16) fetches `<handle>?tf-hub-format=compressed`, expects a tar.gz of the
SavedModel folder's contents, unpacks it into $TFHUB_CACHE_DIR/<sha1 of the handle> and
loads that folder; a non-empty cache folder is never fetched again. A LoopbackServer stands
in for the hub: it serves the archive as the file named like the handle's last path part
(SimpleHTTPRequestHandler ignores the query string when mapping a path to a file).
"""

import hashlib
import os
import re
import socket
import tarfile
import time

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from helpers import (ARCHIVE_DOWNLOAD, KAGGLE_API, KAGGLE_HANDLE, KAGGLE_PAGE, TFHUB_PATH,
                     SMALL_NETWORK, KaggleModelsStandIn, LoopbackServer, kagglehub_pointed_at,
                     tiny_config)

HANDLE_PATH = "/efficientdet/lite0/feature-vector/1"


def module_config(**overrides):
    """The small network, 3 levels, 64 px: a module that exports, loads and trains quickly."""
    values = dict(SMALL_NETWORK, image_size=64, num_classes=4, max_level=5, batch_size=2,
                  backbone_survival_prob=1.0,
                  moving_average_decay=0, jitter_min=1.0, jitter_max=1.0,
                  input_rand_hflip=False)
    values.update(overrides)
    return tiny_config(**values)


def pack_module(module_dir, archive_path, top_folder=None):
    """tensorflow_hub's compressed format: a tar.gz of the module folder's contents (or,
    with top_folder, of the folder itself under that name: a common packing mistake)."""
    os.makedirs(os.path.dirname(archive_path), exist_ok=True)
    with tarfile.open(archive_path, "w:gz") as archive:
        for name in sorted(os.listdir(module_dir)):
            arcname = name if top_folder is None else "%s/%s" % (top_folder, name)
            archive.add(os.path.join(module_dir, name), arcname=arcname)
    return archive_path


def cache_folder(cache, handle):
    """Where tensorflow_hub unpacks `handle` (compressed_module_resolver._module_dir)."""
    return os.path.join(str(cache), hashlib.sha1(handle.encode("utf8")).hexdigest())


def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served_root(tmp_path_factory):
    """A folder laid out like a hub: the module's archive at HANDLE_PATH, the same module
    packed inside a top folder at /wrapped/1 and a file that is no archive at /junk/1."""
    from efficientdet_keras import EfficientDetNet
    from efficientdet_keras.exporters.hub_module import export_feature_module

    work = tmp_path_factory.mktemp("hub_handles")
    source = EfficientDetNet(config=module_config())
    source.build_variables()
    module_dir = export_feature_module(source, str(work / "module"))
    root = work / "served"
    pack_module(module_dir, str(root) + HANDLE_PATH)
    pack_module(module_dir, str(root / "wrapped" / "1"), top_folder="module")
    (root / "junk").mkdir()
    (root / "junk" / "1").write_bytes(b"<html>not a module</html>")
    return root


@pytest.fixture(scope="module")
def server(served_root):
    with LoopbackServer(served_root) as served:
        yield served


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """A fresh $TFHUB_CACHE_DIR and the default (compressed) load format."""
    cache = tmp_path / "tfhub_cache"
    monkeypatch.setenv("TFHUB_CACHE_DIR", str(cache))
    monkeypatch.delenv("TFHUB_MODEL_LOAD_FORMAT", raising=False)
    return cache


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    from efficientdet_keras.data.pipeline import InputPipeline
    from efficientdet_keras.data.sources import TFRecordSource
    from efficientdet_keras.data.synthetic import write_synthetic_dataset

    data = write_synthetic_dataset(str(tmp_path_factory.mktemp("hub_handle_data")),
                                   num_train=2, num_val=1, image_size=64, seed=4)
    config = module_config()
    pipeline = InputPipeline(config, TFRecordSource(data.train_tfrecord), is_training=True,
                             batch_size=config.batch_size, seed=0)
    return next(iter(pipeline()))


def test_an_http_handle_is_downloaded_into_the_hub_cache_and_fine_tuned(server, hub_cache,
                                                                        batch):
    from efficientdet_keras.training.hub_trainer import EfficientDetNetTrainHub

    handle = server.url + HANDLE_PATH
    before = len(server.requests)
    model = EfficientDetNetTrainHub(module_config(), hub_module_url=handle)
    # One request, for the compressed format tensorflow_hub asks a hub for.
    assert server.requests[before:] == [HANDLE_PATH + "?tf-hub-format=compressed"]
    assert model.config.hub_module_url == handle

    # Unpacked into $TFHUB_CACHE_DIR/<sha1(handle)>, with a descriptor naming the handle.
    folder = cache_folder(hub_cache, handle)
    assert os.path.isfile(os.path.join(folder, "saved_model.pb"))
    assert os.path.isdir(os.path.join(folder, "variables"))
    with open(folder + ".descriptor.txt") as f:
        assert "Module: %s" % handle in f.read()
    assert not [n for n in os.listdir(hub_cache) if n.endswith((".lock", ".tmp"))]

    # Per-level outputs: levels 3-5 of a 64 px image, 9 anchors x (4 classes | 4 coords).
    class_outputs, box_outputs = model(tf.zeros([2, 64, 64, 3]), training=False)
    assert [tuple(x.shape) for x in class_outputs] == [(2, 8, 8, 36), (2, 4, 4, 36),
                                                        (2, 2, 2, 36)]
    assert [tuple(x.shape) for x in box_outputs] == [(2, 8, 8, 36), (2, 4, 4, 36),
                                                      (2, 2, 2, 36)]

    # One training step moves the downloaded module's own weights (trainable=True).
    module_weights = model.hub_layer.trainable_weights
    assert module_weights and all(w.trainable for w in module_weights)
    initial = [w.numpy() for w in module_weights]
    model.compile(optimizer=keras.optimizers.SGD(0.1), run_eagerly=True)
    history = model.fit(tf.data.Dataset.from_tensors(batch), epochs=1, verbose=0)
    assert int(model.optimizer.iterations) == 1
    assert np.isfinite(history.history["loss"][0]) and history.history["loss"][0] > 0
    changed = sum(not np.array_equal(a, w.numpy()) for a, w in zip(initial, module_weights))
    assert changed > len(module_weights) // 2
    assert len(server.requests) == before + 1  # Training fetched nothing more.


def test_a_handle_is_downloaded_once_per_cache(server, hub_cache, tmp_path, monkeypatch):
    from efficientdet_keras.training.hub_trainer import EfficientDetNetTrainHub

    handle = server.url + HANDLE_PATH
    before = len(server.requests)
    first = EfficientDetNetTrainHub(module_config(), hub_module_url=handle)
    assert len(server.requests) == before + 1
    folder = cache_folder(hub_cache, handle)
    assert os.listdir(hub_cache) and os.path.isfile(os.path.join(folder, "saved_model.pb"))

    second = EfficientDetNetTrainHub(module_config(), hub_module_url=handle)
    assert len(server.requests) == before + 1  # Loaded from the cache: no new request.
    images = tf.random.uniform([1, 64, 64, 3], -1, 1, seed=1)
    for a, b in zip(tf.nest.flatten(first.hub_layer(images)),
                    tf.nest.flatten(second.hub_layer(images))):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-5)

    # The cache, not the process, is what spares the download: another cache fetches again.
    monkeypatch.setenv("TFHUB_CACHE_DIR", str(tmp_path / "other_cache"))
    EfficientDetNetTrainHub(module_config(), hub_module_url=handle)
    assert server.requests[before + 1:] == [HANDLE_PATH + "?tf-hub-format=compressed"]
    assert os.path.isfile(os.path.join(cache_folder(tmp_path / "other_cache", handle),
                                       "saved_model.pb"))


@pytest.mark.quick
def test_an_unreachable_handle_is_a_quick_value_error_naming_it(hub_cache):
    from efficientdet_keras.training.hub_trainer import EfficientDetNetTrainHub

    handle = "http://127.0.0.1:%d/x/1" % closed_port()
    start = time.monotonic()
    with pytest.raises(ValueError, match="Cannot load TF-Hub module %s: .*[Cc]onnection "
                                         "refused" % re.escape(handle)):
        EfficientDetNetTrainHub(module_config(), hub_module_url=handle)
    assert time.monotonic() - start < 5
    # Nothing left behind that would be taken for the module, or block the next try.
    assert not os.path.exists(cache_folder(hub_cache, handle))
    leftovers = os.listdir(hub_cache) if os.path.isdir(hub_cache) else []
    assert not [n for n in leftovers if n.endswith((".lock", ".tmp"))], leftovers


@pytest.mark.quick
def test_a_missing_or_bad_archive_is_a_value_error_naming_the_handle(server, hub_cache):
    from efficientdet_keras.training.hub_trainer import EfficientDetNetTrainHub

    missing = server.url + "/no/such/module/1"
    with pytest.raises(ValueError, match="Cannot load TF-Hub module %s: HTTP Error 404"
                       % re.escape(missing)):
        EfficientDetNetTrainHub(module_config(), hub_module_url=missing)
    assert not os.path.exists(cache_folder(hub_cache, missing))

    junk = server.url + "/junk/1"
    with pytest.raises(ValueError, match="Cannot load TF-Hub module %s: %s does not appear "
                       "to be a valid module" % (re.escape(junk), re.escape(junk))):
        EfficientDetNetTrainHub(module_config(), hub_module_url=junk)

    # An archive of the folder (not of its contents) unpacks, but holds no saved_model.pb
    # where tensorflow_hub looks; that unpacked folder stays in the cache.
    wrapped = server.url + "/wrapped/1"
    with pytest.raises(ValueError, match="Cannot load TF-Hub module %s: Trying to load a "
                       "model of incompatible/unknown type" % re.escape(wrapped)):
        EfficientDetNetTrainHub(module_config(), hub_module_url=wrapped)
    assert os.listdir(cache_folder(hub_cache, wrapped)) == ["module"]


def test_the_uncompressed_load_format_needs_a_hub_that_redirects_to_gcs(server, hub_cache,
                                                                       monkeypatch):
    from efficientdet_keras.training.hub_trainer import EfficientDetNetTrainHub

    # TFHUB_MODEL_LOAD_FORMAT=UNCOMPRESSED asks `?tf-hub-format=uncompressed` for a 303 to a
    # gs:// folder instead of downloading; a plain file server answers 200.
    monkeypatch.setenv("TFHUB_MODEL_LOAD_FORMAT", "UNCOMPRESSED")
    handle = server.url + HANDLE_PATH
    before = len(server.requests)
    with pytest.raises(ValueError, match="Cannot load TF-Hub module %s: Expected 303"
                       % re.escape(handle)):
        EfficientDetNetTrainHub(module_config(), hub_module_url=handle)
    assert server.requests[before:] == [HANDLE_PATH + "?tf-hub-format=uncompressed"]
    assert not os.path.exists(cache_folder(hub_cache, handle))


# --- Where the modules live today: Kaggle Models ---------------------------------------------

@pytest.fixture(scope="module")
def kaggle(served_root):
    with KaggleModelsStandIn(str(served_root.parent / "module"),
                             str(served_root) + HANDLE_PATH) as stand_in:
        yield stand_in


@pytest.fixture
def kaggle_client(kaggle, tmp_path):
    """kagglehub pointed at the stand-in, with a fresh cache and no credentials."""
    with kagglehub_pointed_at(kaggle.url, tmp_path / "kagglehub_cache"):
        yield tmp_path / "kagglehub_cache"


def fine_tune_two_steps(handle, batch):
    from efficientdet_keras.training.hub_trainer import EfficientDetNetTrainHub
    model = EfficientDetNetTrainHub(module_config(), hub_module_url=handle)
    initial = [w.numpy() for w in model.hub_layer.trainable_weights]
    model.compile(optimizer=keras.optimizers.SGD(0.1), run_eagerly=True)
    history = model.fit(tf.data.Dataset.from_tensors(batch).repeat(2), epochs=1, verbose=0)
    assert int(model.optimizer.iterations) == 2
    assert np.isfinite(history.history["loss"][0]) and history.history["loss"][0] > 0
    moved = sum(not np.array_equal(a, w.numpy())
                for a, w in zip(initial, model.hub_layer.trainable_weights))
    assert moved > len(initial) // 2
    return model


@pytest.mark.parametrize("form", ["kagglehub handle", "tfhub.dev handle", "Kaggle page URL",
                                  "archive download URL", "local folder"])
def test_every_form_of_a_handle_fine_tunes_two_steps(form, kaggle, kaggle_client, hub_cache,
                                                     served_root, batch):
    handle = {"kagglehub handle": KAGGLE_HANDLE + "/1",
              "tfhub.dev handle": kaggle.url + TFHUB_PATH,
              "Kaggle page URL": kaggle.url + KAGGLE_PAGE,
              "archive download URL": kaggle.url + ARCHIVE_DOWNLOAD,
              "local folder": str(served_root.parent / "module")}[form]
    before = len(kaggle.requests)
    fine_tune_two_steps(handle, batch)
    asked = kaggle.requests[before:]
    if form == "kagglehub handle":  # Its files, one by one, into kagglehub's cache.
        assert ("POST", KAGGLE_API + "ListModelInstanceVersionFiles") in asked
        folder = kaggle_client / "models" / KAGGLE_HANDLE / "1"
        assert (folder / "saved_model.pb").is_file() and (folder / "variables").is_dir()
    elif form == "local folder":
        assert asked == []
    else:  # tensorflow_hub's compressed format, through the redirects.
        assert asked[0] == ("GET", handle[len(kaggle.url):] + "?tf-hub-format=compressed")
        assert os.path.isfile(os.path.join(cache_folder(hub_cache, handle), "saved_model.pb"))


def test_a_kaggle_handle_is_fetched_once_and_then_read_offline(kaggle, kaggle_client):
    from efficientdet_keras.training.hub_handles import module_folder

    before = len(kaggle.requests)
    folder = module_folder(KAGGLE_HANDLE)  # No version: the current one, asked of the API.
    assert ("POST", KAGGLE_API + "GetModelInstance") in kaggle.requests[before:]
    assert os.path.samefile(folder, kaggle_client / "models" / KAGGLE_HANDLE / "1")
    kaggle.requests.clear()
    assert os.path.samefile(module_folder(KAGGLE_HANDLE + "/1"), folder)
    assert kaggle.requests == []  # A versioned handle in the cache: nothing asked.


@pytest.mark.quick
def test_kaggle_handle_failures_are_one_line(kaggle, kaggle_client, monkeypatch):
    import builtins
    from efficientdet_keras.training.hub_handles import is_kaggle_handle, module_folder

    assert is_kaggle_handle("tensorflow/efficientdet/tensorFlow2/lite0-feature-vector/1")
    assert not is_kaggle_handle("exported/module") and not is_kaggle_handle("http://a/b/c/d/1")
    with pytest.raises(ValueError, match=r"^Cannot load TF-Hub module tensorflow/efficientdet/"
                       r"tensorFlow2/lite9-feature-vector/1: no such folder, and as a Kaggle "
                       r"Models handle kagglehub says: .*404"):
        module_folder("tensorflow/efficientdet/tensorFlow2/lite9-feature-vector/1")

    real_import = builtins.__import__

    def without_kagglehub(name, *args, **kwargs):
        if name == "kagglehub":
            raise ImportError("No module named 'kagglehub'")
        return real_import(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", without_kagglehub)
    with pytest.raises(ValueError, match=r"^%s/1 is a Kaggle Models handle .*pip install "
                       r"'efficientdet_keras\[kaggle\]'" % KAGGLE_HANDLE):
        module_folder(KAGGLE_HANDLE + "/1")


# --- The feature contract, checked before the first step ------------------------------------

def test_a_module_of_another_model_names_its_levels_and_channels(tmp_path):
    from efficientdet_keras import EfficientDetNet
    from efficientdet_keras.exporters.hub_module import export_feature_module
    from efficientdet_keras.training.hub_trainer import EfficientDetNetTrainHub

    wider = EfficientDetNet(config=module_config(fpn_num_filters=24, max_level=6))
    wider.build_variables()
    module = export_feature_module(wider, str(tmp_path / "wider"))
    with pytest.raises(ValueError, match=r"^TF-Hub module %s returns levels 3-6 of 24 channels "
                       r"for a 64x64 image; efficientdet-d0 needs levels 3-5 of 16 channels "
                       r"\(fpn_num_filters\)$" % re.escape(module)):
        EfficientDetNetTrainHub(module_config(), hub_module_url=module)

    # A released model's own shape is named: a lite2-sized module given --model_name lite0.
    from efficientdet_keras.training.hub_handles import check_feature_contract
    from efficientdet_keras import get_efficientdet_config
    sides = [-(-448 // 2 ** level) for level in range(3, 8)]  # SAME padding: 56 ... 4.
    lite2_maps = [tf.zeros([1, side, side, 112]) for side in sides]
    with pytest.raises(ValueError, match=r"returns levels 3-7 of 112 channels for a 448x448 "
                       r"image; efficientdet-lite0 needs levels 3-7 of 64 channels "
                       r"\(fpn_num_filters\): a module of efficientdet-d2 or "
                       r"efficientdet-lite2\? Give that --model_name$"):
        check_feature_contract((lite2_maps, lite2_maps), get_efficientdet_config(
            "efficientdet-lite0"), "lite2-module", (448, 448))


def test_a_callable_detector_is_refused_before_training(tmp_path):
    from efficientdet_keras.training.hub_trainer import EfficientDetNetTrainHub

    class Detector(tf.Module):  # As a TF Object Detection API model answers.
        @tf.function(input_signature=[tf.TensorSpec([None, None, None, 3], tf.float32)])
        def __call__(self, images):
            batch = tf.shape(images)[0]
            return {"detection_boxes": tf.zeros([batch, 100, 4]),
                    "detection_scores": tf.zeros([batch, 100]),
                    "num_detections": tf.zeros([batch])}

    path = str(tmp_path / "od_api_detector")
    tf.saved_model.save(Detector(), path)
    with pytest.raises(ValueError, match="^%s is a detector, not features: .*fine-tune the "
                       "released checkpoint --pretrained_ckpt=efficientdet-d0 instead$"
                       % re.escape(path)):
        EfficientDetNetTrainHub(module_config(), hub_module_url=path)


def test_a_module_answers_as_its_plain_model_and_its_fine_tune_exports_to_tflite(tmp_path,
                                                                                 batch):
    """The contract the published Lite modules follow, held with a module built to it: with
    the same weights the hub-based model and the plain model give equal outputs; the
    fine-tuned weights carry the plain model's names, so the run loads into the plain
    network (outputs equal again) and exports to a .tflite that passes its parity check."""
    from efficientdet_keras import EfficientDetNet, restore_ckpt, save_ckpt
    from efficientdet_keras.checkpoint import variable_name
    from efficientdet_keras.exporters.hub_module import export_feature_module
    from efficientdet_keras.training.hub_trainer import EfficientDetNetTrainHub
    from efficientdet_keras.workflows.export import export

    config = module_config()
    plain = EfficientDetNet(config=config)
    plain.build_variables()
    rng = np.random.default_rng(5)
    for variable in plain.variables:  # Away from the initial values, BatchNorm stats too.
        variable.assign(variable.numpy() + rng.normal(0, 0.05, variable.shape).astype("float32"))
    module = export_feature_module(plain, str(tmp_path / "module"))
    hub_model = EfficientDetNetTrainHub(config, hub_module_url=module)
    values = {variable_name(v): v.numpy() for v in plain.variables}
    prefix = save_ckpt(plain, str(tmp_path / "plain" / "ckpt-1"), ema_values=values)
    hub_model.load_pretrained(prefix)  # The prediction convs: the plain model's.
    images = tf.random.uniform([2, 64, 64, 3], -1, 1, seed=2)

    def assert_same_outputs(a, b):
        for x, y in zip(tf.nest.flatten(a(images, training=False)),
                        tf.nest.flatten(b(images, training=False))):
            np.testing.assert_allclose(x.numpy(), y.numpy(), atol=2e-5)
    assert_same_outputs(hub_model, plain)

    hub_model.compile(optimizer=keras.optimizers.SGD(0.1), run_eagerly=True)
    hub_model.fit(tf.data.Dataset.from_tensors(batch).repeat(2), epochs=1, verbose=0)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    config.save_yaml(str(run_dir))
    trained = {variable_name(v): v.numpy() for v in hub_model.variables}
    save_ckpt(hub_model, str(run_dir / "ckpt-2"), ema_values=trained)
    assert not np.allclose(trained["class_net/class-predict/bias"],
                           values["class_net/class-predict/bias"])

    reloaded = EfficientDetNet(config=config)
    restore_ckpt(reloaded, str(run_dir), use_ema=True)
    assert_same_outputs(hub_model, reloaded)
    result = export(str(run_dir), "tflite", str(tmp_path / "tflite"), precision="fp32")
    assert result.parity and all(check.passed for check in result.parity), result.parity
    assert os.path.getsize(result.path) > 0
