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

from helpers import LoopbackServer, tiny_config

HANDLE_PATH = "/efficientdet/lite0/feature-vector/1"


def module_config(**overrides):
    """Small heads, 3 levels, 64 px: a module that exports, loads and trains quickly."""
    values = dict(image_size=64, num_classes=4, fpn_num_filters=16, fpn_cell_repeats=1,
                  box_class_repeats=1, max_level=5, batch_size=2, backbone_survival_prob=1.0,
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
