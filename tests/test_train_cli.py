import os
import re
import subprocess
import sys

import pytest

from helpers import REPO_ROOT, SMALL_NETWORK_HPARAMS, python
from efficientdet_keras.data.synthetic import write_synthetic_dataset

TRAIN_TOOL = os.path.join(REPO_ROOT, "tools", "train.py")
SMALL = (SMALL_NETWORK_HPARAMS + ",image_size=64,num_classes=4,"
         "jitter_min=1.0,jitter_max=1.0,moving_average_decay=0.9,map_freq=1")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_synthetic_dataset(str(tmp_path_factory.mktemp("cli_data")), num_train=16,
                                   num_val=4, image_size=64, seed=5)


def command(data, model_dir, *extra):
    return [python(), TRAIN_TOOL, "--mode=traineval", "--model_dir=%s" % model_dir,
            "--train_file_pattern=%s" % data.train_tfrecord,
            "--val_file_pattern=%s" % data.val_tfrecord, "--val_json_file=%s" % data.val_json,
            "--hparams=%s" % SMALL, "--batch_size=4", "--num_examples_per_epoch=8",
            "--tf_random_seed=1", *extra]


def run(args, timeout=600):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("extra,message", [
    (["--train_file_pattern=/nowhere/train-*"], "--train_file_pattern '/nowhere/train-*' matches no file"),
    (["--hub_module_url=/x"], "Cannot load TF-Hub module /x"),
    (["--hparams=num_clases=3"], "num_clases"),
    (["--debug", "--hparams=mixed_precision=float16"],
     "--debug checks every op for NaN and inf, which float16 loss scaling makes on purpose"),
])
def test_bad_flags_stop_with_one_line(data, tmp_path, extra, message):
    result = run(command(data, tmp_path / "run") + extra, timeout=120)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert message in result.stderr.strip().splitlines()[-1]


def test_unwritable_model_dir(data, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = run(command(data, blocker / "run"), timeout=120)
    assert result.returncode != 0
    assert "--model_dir" in result.stderr.strip().splitlines()[-1]


@pytest.mark.quick
def test_batch_must_divide_among_replicas():
    from efficientdet_keras.training.runtime import check_batch_divisible
    check_batch_divisible(8, 2)
    with pytest.raises(ValueError, match="--batch_size 6 is not divisible by the 4 replicas"):
        check_batch_divisible(6, 4)


def test_with_strict_data_a_class_id_above_num_classes_stops_training_with_one_line(data,
                                                                                   tmp_path):
    # The synthetic records hold classes 1..4; the model is told there are 2. Without
    # strict_data such boxes are dropped with a warning (tests/test_bad_data.py). A cold
    # process: what a user's terminal shows, TensorFlow's own start-up lines included.
    env = dict(os.environ)
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # A user's shell: the tool quiets TensorFlow itself.
    result = subprocess.run(
        [sys.executable, TRAIN_TOOL, "--mode=train", "--model_dir=%s" % (tmp_path / "run"),
         "--train_file_pattern=%s" % data.train_tfrecord,
         "--hparams=%s,strict_data=true" % SMALL.replace("num_classes=4", "num_classes=2"),
         "--batch_size=2",
         "--num_examples_per_epoch=4", "--num_epochs=1"],
        capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 1
    # One line, the last (only the package's own INFO lines may come before it).
    assert "Traceback" not in result.stderr and "Error" not in result.stderr, result.stderr
    assert result.stderr.count("has class id") == 1
    assert re.fullmatch(r"efficientdet-train: record source_id \d+ / \d+\.jpg \(#\d+ of \S+"
                        r"\.tfrecord\) has class id [34] outside 1\.\.2 \(strict_data is on.*",
                        result.stderr.strip().splitlines()[-1])


def test_steps_per_epoch_from_hparams_is_honoured_and_deterministic_runs_match(data, tmp_path):
    import numpy as np
    import tensorflow as tf
    from efficientdet_keras.training.backup import latest_backup_step

    def train(name):
        model_dir = tmp_path / name
        result = run([python(), TRAIN_TOOL, "--mode=train", "--model_dir=%s" % model_dir,
                      "--train_file_pattern=%s" % data.train_tfrecord,
                      "--hparams=%s,steps_per_epoch=3" % SMALL, "--batch_size=2",
                      "--num_epochs=1", "--deterministic", "--verbosity=0"])
        assert result.returncode == 0, result.stderr[-3000:]
        return model_dir, result

    first_dir, first = train("first")
    second_dir, _ = train("second")
    # 3 steps of batch 2, not the 8 steps the 16 training images would make.
    assert "1 epochs of 3 steps" in first.stdout
    assert latest_backup_step(str(first_dir)) == 3
    saved = (first_dir / "config.yaml").read_text()
    assert "steps_per_epoch: 3" in saved and "deterministic: true" in saved
    assert "deterministic: seeding with 0" in first.stderr
    # Same seed (the default 0), deterministic ops: the same weights to the bit.
    readers = [tf.train.load_checkpoint(str(folder / "ckpt-1"))
               for folder in (first_dir, second_dir)]
    keys = sorted(readers[0].get_variable_to_shape_map())
    assert keys == sorted(readers[1].get_variable_to_shape_map())
    for key in keys:
        if not key.startswith("_CHECKPOINTABLE_OBJECT_GRAPH"):
            np.testing.assert_array_equal(readers[0].get_tensor(key), readers[1].get_tensor(key),
                                          err_msg=key)


@pytest.mark.quick
def test_a_deterministic_training_run_without_a_seed_takes_seed_0(tmp_path):
    from efficientdet_keras.data.sources import RecordsSource
    from efficientdet_keras.training.run import TrainingRun
    from helpers import make_records, tiny_config
    config = tiny_config(image_size=64, fpn_num_filters=8, fpn_cell_repeats=1,
                         box_class_repeats=1, batch_size=2, num_epochs=1, deterministic=True)
    (tmp_path / "data").mkdir()
    run = TrainingRun(config, str(tmp_path / "run"),
                      RecordsSource(make_records(str(tmp_path / "data"), count=4, height=64,
                                                 width=64)), steps_per_epoch=1)
    from tensorflow.python.framework import config as framework_config
    run.fit(verbose=0)
    assert run.seed == 0
    assert not framework_config.is_op_determinism_enabled()  # Only during fit.
