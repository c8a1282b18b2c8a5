"""Released checkpoints by name: the registry, the built-in class names, and the download
cache, served from a loopback HTTP server with archives built from ../shared/reference in the
published layout (these machines have no network)."""

import hashlib
import os
import shutil
import socket
import subprocess
import time

import numpy as np
import pytest
import tensorflow as tf

from efficientdet_keras.checkpoint import (RELEASED_CHECKPOINTS, ReleasedCheckpointInvalid,
                                           ReleasedCheckpointUnavailable, checkpoint_location,
                                           released_checkpoint_dir)
from efficientdet_keras.checkpoint.download import PROVENANCE_FILE
from efficientdet_keras.config import MODEL_NAMES, get_efficientdet_config
from efficientdet_keras.config.label_maps import COCO_LABEL_MAP, VOC_LABEL_MAP, label_names
from helpers import (LoopbackServer, command_environment, python, released_models_served, tiny_config,
                     write_backbone_checkpoint, write_release_archive)

# The ids the COCO annotation files leave unused between 1 and 90.
COCO_UNUSED_IDS = {12, 26, 29, 30, 45, 66, 68, 69, 71, 83}
PUBLISHED_BASE = "https://storage.googleapis.com/cloud-tpu-checkpoints/"


# --- the registry and the class names ----------------------------------------------------
@pytest.mark.quick
def test_registry_has_every_model_and_its_backbone():
    for name in MODEL_NAMES:
        entry = RELEASED_CHECKPOINTS[name]
        assert (entry.kind, entry.model_name, entry.unpacks_to, entry.label_map) == \
            ("detector", name, name, "coco")
        backbone = RELEASED_CHECKPOINTS[get_efficientdet_config(name).backbone_name]
        assert backbone.kind == "backbone"
    assert sorted(n for n, e in RELEASED_CHECKPOINTS.items() if e.kind == "backbone") == sorted(
        ["efficientnet-b%d" % i for i in range(8)] + ["efficientnet-lite%d" % i for i in range(5)])
    assert RELEASED_CHECKPOINTS["efficientdet-d0"].path == \
        "efficientdet/coco2/efficientdet-d0.tar.gz"
    assert RELEASED_CHECKPOINTS["efficientdet-lite0"].path == \
        "efficientdet/coco/efficientdet-lite0.tgz"
    assert RELEASED_CHECKPOINTS["efficientnet-b3"].path == \
        "efficientnet/ckptsaug/efficientnet-b3.tar.gz"
    assert RELEASED_CHECKPOINTS["efficientnet-lite2"].path == \
        "efficientnet/lite/efficientnet-lite2.tar.gz"


def test_coco_label_map_has_the_90_ids_of_the_released_models():
    assert len(COCO_LABEL_MAP) == 80
    assert set(range(1, 91)) - set(COCO_LABEL_MAP) == COCO_UNUSED_IDS
    assert (COCO_LABEL_MAP[1], COCO_LABEL_MAP[13], COCO_LABEL_MAP[72], COCO_LABEL_MAP[90]) == \
        ("person", "stop sign", "tv", "toothbrush")
    assert len(set(COCO_LABEL_MAP.values())) == 80
    assert label_names("coco") == COCO_LABEL_MAP and label_names("voc") == VOC_LABEL_MAP
    assert label_names({"3": "cat"}) == {3: "cat"} and label_names(None) is None


def test_label_map_values_are_checked():
    from efficientdet_keras.config import validate_config
    config = get_efficientdet_config("efficientdet-d0")
    validate_config(config.override({"label_map": "coco"}))
    with pytest.raises(ValueError, match="label_map must be null, a dict .* coco, voc, waymo"):
        config.override({"label_map": "cocoo"})
    with pytest.raises(ValueError, match="label_map names class id 90 but num_classes is 4"):
        validate_config(config.override({"num_classes": 4}))  # Still the 90-id COCO names.
    small = get_efficientdet_config("efficientdet-d0").override({"num_classes": 20})
    validate_config(small.override({"label_map": "voc"}))
    with pytest.raises(ValueError, match="label_map names class id 21 but num_classes is 20"):
        validate_config(small.override({"label_map": {21: "extra"}}))


# --- download, cache, errors --------------------------------------------------------------
@pytest.fixture
def published(tmp_path, reference_dir):
    """A folder laid out like the published bucket, with D0 and Lite0 archives."""
    root = tmp_path / "bucket"
    write_release_archive(root, "efficientdet-d0", reference_dir("efficientdet-d0"))
    write_release_archive(root, "efficientdet-lite0", reference_dir("efficientdet-lite0"))
    return root


def _cache_leftovers(cache):
    """What a fetch left in the cache besides finished folders and lock files."""
    return sorted(n for n in os.listdir(cache)
                  if not n.endswith(".lock") and not os.path.isdir(os.path.join(cache, n, "")))


def test_download_checks_unpacks_and_reuses(published, tmp_path):
    cache = tmp_path / "cache"
    with LoopbackServer(published) as server:
        folder = released_checkpoint_dir("efficientdet-d0", str(cache), server.url)
        assert server.requests == ["/efficientdet/coco2/efficientdet-d0.tar.gz"]
        assert folder == str(cache / "efficientdet-d0")
        assert tf.train.latest_checkpoint(folder) == os.path.join(folder, "model")
        again = released_checkpoint_dir("efficientdet-d0", str(cache), server.url)
        assert again == folder and len(server.requests) == 1  # Cached: no second request.
    archive = published / "efficientdet" / "coco2" / "efficientdet-d0.tar.gz"
    import json
    with open(os.path.join(folder, PROVENANCE_FILE)) as f:
        provenance = json.load(f)
    assert provenance["sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert provenance["source"].endswith("/efficientdet/coco2/efficientdet-d0.tar.gz")
    assert sorted(os.listdir(cache)) == [".efficientdet-d0.lock", "efficientdet-d0"]


def test_a_known_checksum_is_verified(published, tmp_path, monkeypatch):
    import dataclasses
    archive = published / "efficientdet" / "coco" / "efficientdet-lite0.tgz"
    right = hashlib.sha256(archive.read_bytes()).hexdigest()
    entry = RELEASED_CHECKPOINTS["efficientdet-lite0"]
    with LoopbackServer(published) as server:
        monkeypatch.setitem(RELEASED_CHECKPOINTS, "efficientdet-lite0",
                            dataclasses.replace(entry, sha256="0" * 64))
        with pytest.raises(ReleasedCheckpointInvalid, match="efficientdet-lite0: the archive "
                           "from .* has sha256 %s, not the registry's 0{64}; it was not kept"
                           % right):
            released_checkpoint_dir("efficientdet-lite0", str(tmp_path / "cache"), server.url)
        assert _cache_leftovers(tmp_path / "cache") == []
        assert not os.path.exists(tmp_path / "cache" / "efficientdet-lite0")
        monkeypatch.setitem(RELEASED_CHECKPOINTS, "efficientdet-lite0",
                            dataclasses.replace(entry, sha256=right))
        assert os.path.isdir(released_checkpoint_dir("efficientdet-lite0",
                                                     str(tmp_path / "cache"), server.url))


def test_a_corrupt_archive_is_named_and_nothing_is_kept(published, tmp_path):
    archive = published / "efficientdet" / "coco2" / "efficientdet-d0.tar.gz"
    data = archive.read_bytes()
    archive.write_bytes(data[:len(data) // 2])  # Cut off, as by a dropped connection.
    cache = tmp_path / "cache"
    with LoopbackServer(published) as server:
        with pytest.raises(ReleasedCheckpointInvalid, match=r"efficientdet-d0: http://.*"
                           r"efficientdet-d0.tar.gz is not a readable archive"):
            released_checkpoint_dir("efficientdet-d0", str(cache), server.url)
    assert _cache_leftovers(cache) == [] and not os.path.exists(cache / "efficientdet-d0")


def test_an_archive_of_another_model_is_refused(published, tmp_path, reference_dir):
    write_release_archive(published, "efficientdet-d1", reference_dir("efficientdet-d0"))
    cache = tmp_path / "cache"
    with LoopbackServer(published) as server:
        with pytest.raises(ReleasedCheckpointInvalid, match="efficientdet-d1: .* is not "
                           "efficientdet-d1; its variables are those of efficientdet-d0"):
            released_checkpoint_dir("efficientdet-d1", str(cache), server.url)
    assert _cache_leftovers(cache) == [] and not os.path.exists(cache / "efficientdet-d1")


def _closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_no_network_is_one_line_naming_model_address_and_cache(tmp_path):
    base = "http://127.0.0.1:%d" % _closed_port()
    cache = tmp_path / "cache"
    with pytest.raises(ReleasedCheckpointUnavailable) as raised:
        released_checkpoint_dir("efficientdet-lite0", str(cache), base)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("efficientdet-lite0: cannot download %s/efficientdet/coco/"
                              "efficientdet-lite0.tgz (" % base)
    assert "put efficientdet-lite0.tgz (or the efficientdet-lite0/ folder it unpacks to) in %s"\
        % cache in message
    assert isinstance(raised.value, FileNotFoundError)  # The tools' one-line errors.
    assert _cache_leftovers(cache) == []


@pytest.mark.quick
def test_a_silent_server_times_out(tmp_path):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)  # Accepts connections, never answers.
    try:
        start = time.monotonic()
        with pytest.raises(ReleasedCheckpointUnavailable, match=r"\(no answer within 1 s\)"):
            released_checkpoint_dir("efficientdet-d0", str(tmp_path / "cache"),
                                    "http://127.0.0.1:%d" % listener.getsockname()[1],
                                    timeout=1.0)
        assert time.monotonic() - start < 10
    finally:
        listener.close()
    assert socket.getdefaulttimeout() is None  # The timeout did not leak out.


def test_an_archive_or_folder_placed_by_hand_works_offline(published, tmp_path, reference_dir):
    offline = "http://127.0.0.1:%d" % _closed_port()
    cache = tmp_path / "cache"
    cache.mkdir()
    shutil.copy(published / "efficientdet" / "coco" / "efficientdet-lite0.tgz", cache)
    folder = released_checkpoint_dir("efficientdet-lite0", str(cache), offline)
    assert tf.train.latest_checkpoint(folder)
    shutil.copytree(reference_dir("efficientdet-d0"), cache / "efficientdet-d0")
    assert released_checkpoint_dir("efficientdet-d0", str(cache), offline) == \
        str(cache / "efficientdet-d0")
    shutil.copytree(reference_dir("efficientdet-lite0"), cache / "efficientdet-d2")
    with pytest.raises(ReleasedCheckpointInvalid, match="is not efficientdet-d2"):
        released_checkpoint_dir("efficientdet-d2", str(cache), offline)


_FETCH = """
import sys
from efficientdet_keras.checkpoint import released_checkpoint_dir
print(released_checkpoint_dir("efficientdet-d0", sys.argv[1], sys.argv[2]))
"""


def test_two_processes_download_once(published, tmp_path):
    cache = str(tmp_path / "cache")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    with LoopbackServer(published, delay_seconds=3.0) as server:  # Slow: the two overlap.
        processes = [subprocess.Popen([python(), "-c", _FETCH, cache, server.url],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                      text=True) for _ in range(2)]
        outputs = [p.communicate(timeout=300) for p in processes]
    for process, (out, err) in zip(processes, outputs):
        assert process.returncode == 0, err[-2000:]
        assert out.strip().splitlines()[-1] == os.path.join(cache, "efficientdet-d0")
    assert server.requests == ["/efficientdet/coco2/efficientdet-d0.tar.gz"]
    # One of them printed get_file's progress bar; the other waited, then found the folder.
    assert sum("Downloading data from" in out for out, _ in outputs) == 1


@pytest.mark.quick
def test_a_path_wins_over_a_name(tmp_path, monkeypatch, reference_dir):
    monkeypatch.chdir(tmp_path)
    shutil.copytree(reference_dir("efficientdet-lite0"), tmp_path / "efficientdet-d0")
    monkeypatch.setenv("EFFICIENTDET_KERAS_BASE_URL", "http://127.0.0.1:%d" % _closed_port())
    assert checkpoint_location("efficientdet-d0") == "efficientdet-d0"
    assert checkpoint_location("runs/x/ckpt-3") == "runs/x/ckpt-3"


# --- names wherever a checkpoint is asked for ---------------------------------------------
@pytest.fixture
def served_models(published, tmp_path, reference_dir):
    with released_models_served(published / "mirror", {
            "efficientdet-d0": reference_dir("efficientdet-d0"),
            "efficientdet-lite0": reference_dir("efficientdet-lite0"),
            "efficientnet-b0": write_backbone_checkpoint(reference_dir("efficientdet-d0"),
                                                         tmp_path / "b0")}, tmp_path / "cache") as server:
        yield server


def test_load_pretrained_and_restore_ckpt_take_names(served_models, reference_dir):
    from efficientdet_keras import EfficientDetNet, EfficientDetNetTrain, restore_ckpt
    from efficientdet_keras.checkpoint import variable_name
    by_name = EfficientDetNetTrain(tiny_config(num_classes=90))
    report = by_name.load_pretrained("efficientdet-d0")
    assert report.num_loaded == report.model_variables and not report.skipped
    by_path = EfficientDetNet(config=tiny_config(num_classes=90))
    restore_ckpt(by_path, reference_dir("efficientdet-d0"))
    by_path_values = {variable_name(v): v.numpy() for v in by_path.variables}
    compared = 0
    for variable in by_name.variables:
        name = variable_name(variable)
        if name in by_path_values:
            np.testing.assert_array_equal(variable.numpy(), by_path_values[name], err_msg=name)
            compared += 1
    assert compared == len(by_path_values)
    restore_ckpt(by_path, "efficientdet-d0")  # The cached folder: no second download.
    assert served_models.requests == ["/efficientdet/coco2/efficientdet-d0.tar.gz"]


def test_load_backbone_by_name(served_models, reference_dir):
    from efficientdet_keras import EfficientDetNetTrain
    from efficientdet_keras.checkpoint import variable_name
    model = EfficientDetNetTrain(tiny_config())
    from efficientdet_keras.checkpoint import ensure_built
    ensure_built(model)
    before = {variable_name(v): v.numpy() for v in model.variables}
    report = model.load_backbone("efficientnet-b0")
    assert report.backbone_only
    reader = tf.train.load_checkpoint(reference_dir("efficientdet-d0"))
    for variable in model.variables:
        name = variable_name(variable)
        if name.startswith("efficientnet-b0/"):  # The backbone: the checkpoint's EMA values.
            np.testing.assert_array_equal(
                variable.numpy(), reader.get_tensor(name + "/ExponentialMovingAverage"),
                err_msg=name)
        else:  # The BiFPN and heads keep their initial values.
            np.testing.assert_array_equal(variable.numpy(), before[name], err_msg=name)
    with pytest.raises(ValueError, match="holds efficientdet-d0 .*not an ImageNet backbone"):
        model.load_backbone("efficientdet-d0")


@pytest.mark.quick
def test_detector_by_name_has_coco_class_names(served_models):
    from efficientdet_keras import Detector
    detector = Detector("efficientdet-lite0")
    assert detector.label_map == COCO_LABEL_MAP
    assert detector.config.name == "efficientdet-lite0"
    image = np.random.default_rng(0).integers(0, 255, [96, 128, 3], dtype=np.uint8)
    found = detector.detect(image, max_detections=20)
    assert len(found.class_names) == 20
    assert list(found.class_names) == [COCO_LABEL_MAP.get(int(i), str(i))
                                       for i in found.class_ids]
    assert sum(int(i) in COCO_LABEL_MAP for i in found.class_ids) >= 10
    with pytest.raises(ValueError, match="efficientnet-b0 is an ImageNet classification "
                                         "backbone, not a detector"):
        Detector("efficientnet-b0")


def test_tools_take_names_and_fail_in_one_line_offline(served_models, tmp_path):
    env = command_environment()
    out_dir = tmp_path / "out"
    image = tmp_path / "photo.png"
    from helpers import write_image
    write_image(str(image), np.full([64, 80, 3], 128, np.uint8), fmt="png")
    result = subprocess.run(["efficientdet-infer", "--ckpt=efficientdet-lite0",
                             "--input=%s" % image, "--output_dir=%s" % out_dir,
                             "--score_threshold=0"], env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    import json
    with open(out_dir / "detections.json") as f:
        detections = json.load(f)
    found = detections["photo.png"]
    assert len(found) == 20
    # Untrained weights: any of the 90 ids; the 10 COCO leaves unused keep their number.
    assert [d["name"] for d in found] == [COCO_LABEL_MAP.get(d["class"], str(d["class"]))
                                          for d in found]
    assert any(d["class"] in COCO_LABEL_MAP for d in found)

    offline = dict(env, EFFICIENTDET_KERAS_BASE_URL="http://127.0.0.1:%d" % _closed_port(),
                   EFFICIENTDET_KERAS_HOME=str(tmp_path / "empty-cache"))
    result = subprocess.run(["efficientdet-export", "--ckpt=efficientdet-d3",
                             "--export_dir=%s" % (tmp_path / "exported")], env=offline,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("efficientdet-export: efficientdet-d3: cannot download http://"), \
        result.stderr[-3000:]
    assert "Traceback" not in result.stderr


def test_a_named_label_map_reaches_the_exported_saved_model(tmp_path):
    """The SavedModel's label_map.json, read back by the Detector of the export, holds the
    names `label_map: coco` stands for."""
    import json
    from efficientdet_keras import Detector, EfficientDetNet, export_detector
    config = tiny_config("efficientdet-lite0", num_classes=90, label_map="coco")
    export_dir = export_detector(EfficientDetNet(config=config), str(tmp_path / "served"))
    with open(os.path.join(export_dir, "label_map.json")) as f:
        assert {int(k): v for k, v in json.load(f).items()} == COCO_LABEL_MAP
    assert Detector(export_dir).label_map == COCO_LABEL_MAP
