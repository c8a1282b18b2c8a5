"""Crash-safe writes, a full disk, the run's config and bad COCO JSON entries.

No training: checkpoints of a few plain tf.Variables, the archive and fileio are
called directly; one short `efficientdet-train` start checks the CLI wiring.
"""

import collections
import errno
import json
import logging
import os
import subprocess
import time
import types

import numpy as np
import pytest
import tensorflow as tf

from helpers import REPO_ROOT, python, tiny_config
from efficientdet_keras.checkpoint.archive import CheckpointArchive
from efficientdet_keras.checkpoint import save_ckpt
from efficientdet_keras.config import get_efficientdet_config
from efficientdet_keras.data.formats.coco_records import load_coco_records
from efficientdet_keras.utils.fileio import (FOREIGN_TEMPORARY_FILE_SECONDS, FileWriteError,
                                             file_name_host, remove_stale_temporary_files,
                                             write_json_atomically)

pytestmark = pytest.mark.quick  # All of this file is in the inner-loop set.

TRAIN_TOOL = os.path.join(REPO_ROOT, "tools", "train.py")
DATA_SUFFIX = ".data-00000-of-00001"


def tiny_model(seed: int, size: int = 64):
    """An object with `variables`, all save_ckpt needs: two named float32 tensors."""
    rng = np.random.default_rng(seed)
    return types.SimpleNamespace(variables=[
        tf.Variable(rng.normal(size=[size, size]).astype(np.float32), name="net/kernel"),
        tf.Variable(rng.normal(size=[size]).astype(np.float32), name="net/bias")])


def assert_checkpoint_holds(prefix, model):
    """The checkpoint reads back tensor by tensor equal to the model's variables."""
    reader = tf.train.load_checkpoint(prefix)
    for variable in model.variables:
        np.testing.assert_array_equal(reader.get_tensor(variable.name[:-2]), variable.numpy())


class Recorder:
    """Wraps os.fsync and os.replace, recording (call, path) in order; can fail a call."""

    def __init__(self, monkeypatch, fail_fsync_of=None):
        self.calls = []
        self.fail_fsync_of = fail_fsync_of
        real_fsync, real_replace = os.fsync, os.replace

        def fsync(fd):
            path = os.readlink("/proc/self/fd/%d" % fd)
            self.calls.append(("fsync", path))
            if self.fail_fsync_of and self.fail_fsync_of in os.path.basename(path):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            real_fsync(fd)

        def replace(source, target):
            self.calls.append(("replace", str(source), str(target)))
            real_replace(source, target)

        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "replace", replace)

    def renamed(self):
        return [os.path.basename(call[2]) for call in self.calls if call[0] == "replace"]


# --- 1. atomic, fsynced writes ---------------------------------------------------

def test_a_json_write_is_fsynced_under_a_unique_name_then_renamed(tmp_path, monkeypatch):
    recorder = Recorder(monkeypatch)
    path = str(tmp_path / "metrics.json")
    write_json_atomically(path, {"AP": 0.5})
    write_json_atomically(path, {"AP": 0.6})
    assert json.load(open(path)) == {"AP": 0.6} and os.listdir(tmp_path) == ["metrics.json"]
    sources = [call[1] for call in recorder.calls if call[0] == "replace"]
    own = ".tmp-%d@%s-" % (os.getpid(), file_name_host())
    assert len(set(sources)) == 2 and all(own in s for s in sources)
    first = recorder.calls[:3]  # The file's data, its rename, then the folder's entry.
    assert first == [("fsync", sources[0]), ("replace", sources[0], path),
                     ("fsync", str(tmp_path))]


def test_a_checkpoint_is_listed_only_after_both_files_are_complete(tmp_path, monkeypatch):
    recorder = Recorder(monkeypatch)
    model = tiny_model(1)
    prefix = save_ckpt(model, str(tmp_path / "ckpt-1"))
    fsynced = [os.path.basename(c[1]) for c in recorder.calls if c[0] == "fsync"]
    assert any(name.endswith(DATA_SUFFIX) for name in fsynced)
    assert any(name.endswith(".index") and ".tmp-" in name for name in fsynced)
    # Data, then index, then the "checkpoint" state file that lists it.
    assert recorder.renamed() == ["ckpt-1" + DATA_SUFFIX, "ckpt-1.index", "checkpoint"]
    assert tf.train.latest_checkpoint(str(tmp_path)) == prefix
    assert_checkpoint_holds(prefix, model)


def test_config_yaml_and_archive_files_go_through_the_same_writes(tmp_path, monkeypatch):
    model = tiny_model(2)
    prefix = save_ckpt(model, str(tmp_path / "ckpt-4"))
    recorder = Recorder(monkeypatch)
    get_efficientdet_config("efficientdet-d0").save_yaml(str(tmp_path))
    assert CheckpointArchive(str(tmp_path / "archive")).consider(prefix, 4, {"AP": 0.3})
    assert recorder.renamed() == ["config.yaml", "ckpt-4" + DATA_SUFFIX, "ckpt-4.index",
                                  "archive.json"]
    fsynced = [os.path.basename(c[1]) for c in recorder.calls if c[0] == "fsync"]
    assert [n for n in fsynced if ".tmp-" in n and n.endswith(".index")]
    assert_checkpoint_holds(str(tmp_path / "archive" / "ckpt-4"), model)


def dead_pid():
    """A pid that no longer runs."""
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_temporary_files_of_a_killed_writer_are_removed_at_the_next_start(tmp_path, caplog):
    """Names without a host, as earlier versions wrote them: judged by the pid alone."""
    dead = subprocess.Popen(["true"])  # A pid that no longer runs.
    dead.wait()
    alive = os.getppid()
    hexes = ["%032x" % i for i in range(4)]
    stale = [tmp_path / ("ckpt-3.tmp-%d-%s%s" % (dead.pid, hexes[0], DATA_SUFFIX)),
             tmp_path / "archive" / ("archive.json.tmp-%d-%s" % (dead.pid, hexes[1])),
             tmp_path / ("ckpt-2.tmp-%s.index" % hexes[2])]  # Version 0.1's naming.
    kept = [tmp_path / ("config.yaml.tmp-%d-%s" % (alive, hexes[3])),  # Another tool, running.
            tmp_path / "ckpt-3.index", tmp_path / "notes.tmp"]
    (tmp_path / "archive").mkdir()
    for path in stale + kept:
        path.write_text("x")
    with caplog.at_level(logging.WARNING):
        removed = remove_stale_temporary_files(str(tmp_path))
    assert sorted(removed) == sorted(map(str, stale))
    assert all(p.exists() for p in kept) and not any(p.exists() for p in stale)
    assert "Removed 3 temporary file(s)" in caplog.text and str(stale[0]) in caplog.text


def test_temporary_files_are_judged_by_their_host_then_by_pid_or_age(tmp_path, caplog):
    """A shared model_dir: another host's pid means nothing here, its file's age does."""
    here, alive_elsewhere = file_name_host(), os.getpid()  # A pid that runs here, too.
    sleeper = subprocess.Popen(["sleep", "60"])  # Another tool of this host, still writing.
    hexes = iter("%032x" % (0xabc0 + i) for i in range(8))

    def name(base, pid, host, suffix=""):
        return tmp_path / ("%s.tmp-%d@%s-%s%s" % (base, pid, host, next(hexes), suffix))
    # Host names with "-", "." and hex digits; one starts with this host's name (a pid
    # taken for this host's would be judged dead).
    other, lookalike = "node-7.cluster-0a1b2c3d", here + "-0123456789abcdef0123456789abcdef"
    old = [name("ckpt-3", alive_elsewhere, other, DATA_SUFFIX),
           name("archive.json", dead_pid(), lookalike)]
    stale = old + [name("ckpt-4", dead_pid(), here, ".index"),
                   name("config.yaml", os.getpid(), here)]  # Left by an earlier process.
    kept = [name("ckpt-5", alive_elsewhere, other, ".index"),
            name("eval.json", dead_pid(), lookalike), name("coco_metrics.json", sleeper.pid, here)]
    try:
        for path in stale + kept:
            path.write_text("x")
        hour_ago = time.time() - FOREIGN_TEMPORARY_FILE_SECONDS - 60
        for path in old:
            os.utime(path, (hour_ago, hour_ago))
        with caplog.at_level(logging.WARNING):
            removed = remove_stale_temporary_files(str(tmp_path))
    finally:
        sleeper.kill()
        sleeper.wait()
    assert sorted(removed) == sorted(map(str, stale))
    assert all(p.exists() for p in kept) and not any(p.exists() for p in stale)
    assert "Removed 4 temporary file(s)" in caplog.text


# --- 2. a full disk ----------------------------------------------------------------

def directory_listing(directory):
    return sorted(os.path.relpath(os.path.join(root, name), directory)
                  for root, _, names in os.walk(directory) for name in names)


def test_disk_full_while_saving_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    model = tiny_model(3)
    first = save_ckpt(model, str(tmp_path / "ckpt-1"))
    state = open(tmp_path / "checkpoint").read()
    Recorder(monkeypatch, fail_fsync_of=DATA_SUFFIX)
    with pytest.raises(FileWriteError) as error:
        save_ckpt(tiny_model(4), str(tmp_path / "ckpt-2"))
    message = str(error.value)
    assert message.startswith("cannot write %s" % (tmp_path / "ckpt-2")) and "\n" not in message
    assert message.endswith("No space left on device") and error.value.errno == errno.ENOSPC
    assert directory_listing(str(tmp_path)) == ["checkpoint", "ckpt-1" + DATA_SUFFIX,
                                                "ckpt-1.index"]
    assert open(tmp_path / "checkpoint").read() == state
    assert_checkpoint_holds(first, model)


def test_a_failed_write_ends_a_command_with_one_line(tmp_path, monkeypatch):
    from efficientdet_keras.cli.common import run_or_exit
    Recorder(monkeypatch, fail_fsync_of="config.yaml")
    save = get_efficientdet_config("efficientdet-d0").save_yaml
    with pytest.raises(SystemExit) as stop:
        run_or_exit("efficientdet-train", save, str(tmp_path))
    assert str(stop.value) == ("efficientdet-train: cannot write %s: No space left on device"
                               % (tmp_path / "config.yaml"))
    assert os.listdir(tmp_path) == []


def test_disk_full_while_archiving_keeps_the_archive(tmp_path, monkeypatch):
    model = tiny_model(5)
    archive = CheckpointArchive(str(tmp_path / "archive"), keep=1)
    archive.consider(save_ckpt(model, str(tmp_path / "ckpt-1")), 1, {"AP": 0.2})
    save_ckpt(tiny_model(6), str(tmp_path / "ckpt-2"))
    before = directory_listing(str(tmp_path / "archive"))
    Recorder(monkeypatch, fail_fsync_of=".index")
    with pytest.raises(FileWriteError, match=r"cannot write .*archive/ckpt-2 .*No space left"):
        archive.consider(str(tmp_path / "ckpt-2"), 2, {"AP": 0.9})
    assert directory_listing(str(tmp_path / "archive")) == before
    assert [e["name"] for e in archive.entries()] == ["ckpt-1"]
    assert_checkpoint_holds(str(tmp_path / "archive" / "ckpt-1"), model)


@pytest.fixture
def tiny_tmpfs(tmp_path):
    """A 40 KiB tmpfs (needs root); skipped where it cannot be mounted."""
    mount_point = tmp_path / "tmpfs"
    mount_point.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=40k", "tmpfs",
                             str(mount_point)], capture_output=True)
    if result.returncode != 0:
        pytest.skip("cannot mount a tmpfs here: %s" % result.stderr.decode().strip())
    yield mount_point
    subprocess.run(["umount", str(mount_point)], check=True)


def test_a_really_full_disk_fails_inside_tensorflow_and_leaves_no_partial_file(tiny_tmpfs):
    model = tiny_model(7, size=80)  # 25 KiB of data: one checkpoint fits, two do not.
    first = save_ckpt(model, str(tiny_tmpfs / "ckpt-1"))
    with pytest.raises(FileWriteError, match=r"^cannot write \S*/ckpt-2 \(\.data-00000-of-00001, "
                                             r"\.index\): No space left on device$"):
        save_ckpt(tiny_model(8, size=80), str(tiny_tmpfs / "ckpt-2"))
    assert directory_listing(str(tiny_tmpfs)) == ["checkpoint", "ckpt-1" + DATA_SUFFIX,
                                                  "ckpt-1.index"]
    assert tf.train.latest_checkpoint(str(tiny_tmpfs)) == first
    assert_checkpoint_holds(first, model)


# --- 4. a re-run with another config (3. is in test_config.py) ----------------------

def test_rerun_with_another_config_stops_before_writing_anything(tmp_path):
    """The CLI wiring: stale temporary files go at the start, then the differing keys stop it."""
    model_dir = tmp_path / "run"
    model_dir.mkdir()
    stale = model_dir / ("checkpoint.tmp-%s" % ("%032x" % 5))
    stale.write_text("half")
    config = get_efficientdet_config("efficientdet-d0")
    config.override("image_size=64,batch_size=8,num_epochs=9")
    config.save_yaml(str(model_dir))
    before = open(model_dir / "config.yaml").read()
    result = subprocess.run(
        [python(), TRAIN_TOOL, "--demo", "--demo_images=2", "--model_dir=%s" % model_dir,
         "--hparams=image_size=128,steps_per_epoch=1", "--mode=train"],
        capture_output=True, text=True, timeout=300)
    assert result.returncode != 0, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("efficientdet-train: %s was written by a run with another config: "
                           % (model_dir / "config.yaml")), result.stderr[-2000:]
    assert "image_size [64, 64] -> [128, 128]" in last and "batch_size 8 -> 8" not in last
    assert "num_epochs" not in last  # Extending a run is allowed.
    assert "--overwrite_config" in last
    assert open(model_dir / "config.yaml").read() == before
    assert not stale.exists() and not [f for f in os.listdir(model_dir) if f.startswith("ckpt")]


def test_overwrite_config_and_resumable_keys(tmp_path, caplog):
    from efficientdet_keras.training.run_config import RunConfigMismatchError, check_run_config
    config = get_efficientdet_config("efficientdet-d0").override("batch_size=8")
    config.save_yaml(str(tmp_path))
    longer = config.copy().override("num_epochs=400,map_freq=2")
    with caplog.at_level(logging.WARNING):
        check_run_config(longer, str(tmp_path), overwrite=False)  # No error.
    assert "num_epochs 300 -> 400" in caplog.text and "map_freq 5 -> 2" in caplog.text
    other = config.copy().override("batch_size=4,nms_configs.iou_thresh=0.6")
    with pytest.raises(RunConfigMismatchError) as error:
        check_run_config(other, str(tmp_path), overwrite=False)
    assert "batch_size 8 -> 4; nms_configs.iou_thresh 0.5 -> 0.6;" in str(error.value)
    check_run_config(other, str(tmp_path), overwrite=True)  # No error.


# --- 5. COCO JSON problems ----------------------------------------------------------

def write_coco(folder, images, annotations, files=None):
    """A COCO JSON in `folder` and an (empty) image file for each name in `files`
    (default: every image's file_name)."""
    for name in (files if files is not None else [i.get("file_name") for i in images]):
        (folder / name).write_bytes(b"")
    path = folder / "instances.json"
    path.write_text(json.dumps({"images": images, "annotations": annotations,
                                "categories": [{"id": 1, "name": "a"}, {"id": 3, "name": "b"}]}))
    return str(path)


def image(image_id, name):
    return {"id": image_id, "file_name": name, "height": 10, "width": 20}


def box(ann_id, image_id, **changes):
    return dict({"id": ann_id, "image_id": image_id, "category_id": 1, "bbox": [1, 2, 3, 4]},
                **changes)


def load_with_warnings(path, folder, caplog):
    skipped = collections.Counter()
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        records = load_coco_records(path, str(folder), skipped=skipped)
    return records, skipped, caplog.text


def test_coco_missing_image_files_are_skipped(tmp_path, caplog):
    path = write_coco(tmp_path, [image(1, "a.jpg"), image(2, "b.jpg")], [box(1, 1), box(2, 2)],
                      files=["b.jpg"])
    records, skipped, text = load_with_warnings(path, tmp_path, caplog)
    assert [r.image_id for r in records] == [2] and records[0].classes.tolist() == [1]
    assert skipped == {"image file missing": 1}
    assert "%s: skipping image id 1 (%s): image file missing" % (path, tmp_path / "a.jpg") in text
    # The pipeline's end-of-run data report counts them too.
    from efficientdet_keras.data.pipeline import InputPipeline
    from efficientdet_keras.data.sources import CocoSource
    pipeline = InputPipeline(tiny_config(), CocoSource(path, str(tmp_path)), is_training=False)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        pipeline.health.log_summary()
    assert "image file missing=1" in caplog.text


def test_coco_annotations_without_bbox_or_category_are_skipped(tmp_path, caplog):
    path = write_coco(tmp_path, [image(7, "a.jpg")],
                      [box(1, 7), box(2, 7), box(3, 7, bbox=[1, 2, "x", 4])])
    data = json.load(open(path))
    del data["annotations"][1]["bbox"]
    data["annotations"].append({"id": 4, "image_id": 7, "bbox": [0, 0, 5, 5]})  # No category.
    open(path, "w").write(json.dumps(data))
    records, skipped, text = load_with_warnings(path, tmp_path, caplog)
    np.testing.assert_array_equal(records[0].boxes, [[2, 1, 6, 4]])
    assert skipped == {"annotation without a valid bbox [x, y, w, h]": 2,
                       "annotation without a valid category_id": 1}
    assert "%s: skipping annotation 2 of image id 7" % path in text
    assert "annotation 4 of image id 7: annotation without a valid category_id" in text


def test_coco_annotations_of_unlisted_images_are_skipped(tmp_path, caplog):
    path = write_coco(tmp_path, [image(7, "a.jpg")], [box(1, 7), box(2, 8)])
    records, skipped, text = load_with_warnings(path, tmp_path, caplog)
    assert len(records) == 1 and len(records[0].classes) == 1
    assert skipped == {"annotation for an image id the file does not list": 1}
    assert "annotation 2 of image id 8" in text


def test_coco_ids_and_numbers_given_as_strings_are_read(tmp_path, caplog):
    path = write_coco(tmp_path, [image("0007", "a.jpg"), image("img_b", "b.jpg")],
                      [box(1, 7, category_id="3", bbox=["1", "2", "3.5", "4"]),
                       box(2, "img_b"), box(3, "img_b", category_id="three")])
    records, skipped, text = load_with_warnings(path, tmp_path, caplog)
    assert [r.image_id for r in records] == ["0007", "img_b"]
    assert records[0].classes.tolist() == [3]
    np.testing.assert_array_equal(records[0].boxes, [[2, 1, 6, 4.5]])
    assert records[1].classes.tolist() == [1]
    assert skipped == {"annotation without a valid category_id": 1}
    assert "annotation 3 of image id 'img_b'" in text


def test_coco_duplicate_image_ids_skip_every_entry_with_that_id(tmp_path, caplog):
    path = write_coco(tmp_path, [image(7, "a.jpg"), image(8, "b.jpg"), image("07", "c.jpg")],
                      [box(1, 7), box(2, 8)])
    records, skipped, text = load_with_warnings(path, tmp_path, caplog)
    assert [r.image_id for r in records] == [8]
    assert skipped == {"image id appears more than once": 2}
    assert "skipping image id 7 (a.jpg)" not in text  # Named by id: both entries.
    assert "skipping image id '07'" in text and "skipping image id 7" in text


def test_coco_all_images_missing_is_a_clear_error(tmp_path):
    path = write_coco(tmp_path, [image(1, "a.jpg"), image(2, "b.jpg")], [], files=[])
    with pytest.raises(ValueError) as error:
        load_coco_records(path, str(tmp_path / "images"))
    assert str(error.value) == (
        "None of the 2 images of %s can be used; 2 image files are not in the image "
        "directory %s" % (path, tmp_path / "images"))
