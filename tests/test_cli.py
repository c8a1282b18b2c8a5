import os
import re
import subprocess
import sys
import time

import pytest

from helpers import REPO_ROOT, python


@pytest.mark.quick
def test_summary_tool_prints_parts_and_levels():
    result = subprocess.run(
        [python(), os.path.join(REPO_ROOT, "tools", "summary.py"),
         "--model_name=efficientdet-lite0", "--hparams=image_size=256x128,num_classes=3"],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert "efficientdet-lite0  input 128x256 (HxW), 3 classes" in out
    assert "P3     [1, 16, 32, 27]" in out and "P7     [1, 1, 2, 27]" in out
    assert "Mean initial class score on a blank image: 0.0100" in out


def test_summary_tool_rejects_unknown_key():
    result = subprocess.run(
        [python(), os.path.join(REPO_ROOT, "tools", "summary.py"), "--hparams=num_clases=3"],
        capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith(
        "efficientdet-summary: Unknown config key 'num_clases'; closest known keys: num_classes")


def test_bench_postprocess_prints_figures():
    result = subprocess.run(
        [python(), os.path.join(REPO_ROOT, "benchmarks", "bench.py"), "--what=postprocess",
         "--model_name=efficientdet-lite0", "--image_size=128", "--batch_size=1", "--repeats=1"],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert lines[0].startswith("efficientdet-lite0 128x128 batch 1")
    assert lines[1].startswith("network forward (median)") and lines[1].endswith(" ms")
    assert [line.split(" (median)")[0] for line in lines[2:]] == [
        "post-process gaussian", "post-process hard", "post-process combined"]


def console_scripts():
    """{script name: "module:function"} from setup.cfg."""
    import configparser
    parser = configparser.ConfigParser()
    parser.read(os.path.join(REPO_ROOT, "setup.cfg"))
    lines = parser["options.entry_points"]["console_scripts"].strip().splitlines()
    return dict(tuple(part.strip() for part in line.split("=")) for line in lines)


# absl's own flags: --helpfull lists them, --help does not.
ABSL_FLAGS = ("only_check_args", "pdb_post_mortem", "verbosity")


@pytest.mark.quick
@pytest.mark.parametrize("script", sorted(console_scripts()))
def test_help_lists_the_tools_own_flags_without_loading_tensorflow(script):
    module, function = console_scripts()[script].split(":")
    probe = ("import atexit, importlib, sys\n"
             "from absl import flags\n"
             "tool = importlib.import_module(%r)\n"
             "own = [f.name for name, defined in flags.FLAGS.flags_by_module_dict().items()\n"
             "       if name.startswith('efficientdet_keras.cli.') for f in defined]\n"
             "atexit.register(lambda: print('OWN', *own, 'TENSORFLOW', 'tensorflow' in sys.modules))\n"
             "sys.argv = [%r, '--help']\n"
             "tool.%s()\n" % (module, script, function))
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    help_text, probe_line = result.stdout.rsplit("OWN", 1)
    own, loaded = probe_line.split("TENSORFLOW")
    assert loaded.strip() == "False"
    assert help_text.startswith(script + ":")  # The tool's docstring comes first.
    assert len(own.split()) >= 3
    for name in own.split():
        assert ("--%s:" % name in help_text) or ("--[no]%s:" % name in help_text), name
    for name in ABSL_FLAGS:
        assert name not in help_text


@pytest.mark.parametrize("script,own_flag", [
    ("efficientdet-summary", "--ckpt"), ("efficientdet-bench", "--model"),
    ("efficientdet-create-tfrecord", "--input_format"), ("efficientdet-eval", "--val_file_pattern"),
    ("efficientdet-train", "--model_dir"), ("efficientdet-export", "--export_dir"),
    ("efficientdet-infer", "--saved_model_dir"), ("efficientdet-check-data", "--file_pattern"),
    ("efficientdet-gpu-check", "--settings")])
def test_installed_console_script_help(script, own_flag):
    path = os.path.join(os.path.dirname(sys.executable), script)
    if not os.path.exists(path):
        pytest.skip("%s is not installed in this environment (pip install -e .)" % path)
    assert set(console_scripts()) >= {script}
    outputs = []
    for arg in ("--help", "-h"):
        start = time.perf_counter()
        result = subprocess.run([path, arg], capture_output=True, text=True, timeout=60)
        seconds = time.perf_counter() - start
        assert result.returncode == 0 and result.stderr == "", result.stderr[-2000:]
        assert seconds < 10, "%s %s took %.1f s: does it load TensorFlow?" % (script, arg, seconds)
        outputs.append(result.stdout)
    assert outputs[0] == outputs[1]
    assert outputs[0].startswith(script + ":") and own_flag in outputs[0]
    assert "--helpfull" in outputs[0]
    for name in ABSL_FLAGS:
        assert name not in outputs[0]

    full = subprocess.run([path, "--helpfull"], capture_output=True, text=True, timeout=60)
    assert full.returncode == 0 and own_flag in full.stdout
    assert all(name in full.stdout for name in ABSL_FLAGS)


# Lines TensorFlow prints while it starts, which the tools hold back.
STARTUP_NOISE = ("oneDNN", "cuda", "cpu_feature_guard", "absl::InitializeLog", "I0000", "rebuild "
                 "TensorFlow")


def assert_quiet_start(stderr: str) -> None:
    """No TensorFlow start-up notices, and INFO log lines only from this package's files."""
    for notice in STARTUP_NOISE:
        assert notice not in stderr, stderr[-3000:]
    package = os.path.join(REPO_ROOT, "efficientdet_keras")
    own_files = {name for _, _, files in os.walk(package) for name in files if name.endswith(".py")}
    for file_name in re.findall(r"^I\d{4} [\d:.]+\s+\d+ ([\w.]+):\d+\]", stderr, re.M):
        assert file_name in own_files, stderr[-3000:]


def tool_env():
    """The environment of a user's shell: no TF_CPP_MIN_LOG_LEVEL (conftest sets one)."""
    env = dict(os.environ)
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    return env


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A model dir (config.yaml for 4 classes at 64 px, ckpt-1) and two TFRecord files of
    records 100..103: one with class id 9, one with boxes partly outside their images."""
    import dataclasses

    import numpy as np

    from helpers import make_records, tiny_config, write_model_dir, write_tfrecord

    root = tmp_path_factory.mktemp("cli_data_errors")
    model_dir = root / "model"
    write_model_dir(model_dir, tiny_config(image_size=64, num_classes=4, fpn_num_filters=16,
                                           fpn_cell_repeats=1, box_class_repeats=1))
    records = make_records(str(root), count=4, classes=(1, 9))
    bad_class = write_tfrecord(str(root / "bad_class.tfrecord"), records)
    overhanging = [dataclasses.replace(r, classes=np.array([1, 2], np.int64),
                                       boxes=r.boxes + np.float32([0, 0, 0, 200]))
                   for r in records]
    clipped = write_tfrecord(str(root / "clipped.tfrecord"), overhanging)
    return model_dir, bad_class, clipped


def run_eval_tool(model_dir, pattern, *extra):
    return subprocess.run(
        [python(), os.path.join(REPO_ROOT, "tools", "eval.py"), "--model_dir=%s" % model_dir,
         "--val_file_pattern=%s" % pattern, "--batch_size=2", "--use_ema=false",
         "--progress=false", *extra], capture_output=True, text=True, timeout=300, env=tool_env())


def test_eval_with_strict_data_names_a_bad_class_id_in_one_line(tiny_run):
    model_dir, bad_class, _ = tiny_run
    result = run_eval_tool(model_dir, bad_class, "--hparams=strict_data=true")
    assert result.returncode == 1
    # The error is one line, the last; above it only the package's own INFO lines.
    assert "Traceback" not in result.stderr and "Error" not in result.stderr, result.stderr
    assert result.stderr.count("has class id") == 1
    assert re.fullmatch(r"efficientdet-eval: record source_id 10[0-3] / img[0-3]\.jpg \(#[0-3] "
                        r"of \S+\.tfrecord\) has class id 9 outside 1\.\.4 \(strict_data is on.*",
                        result.stderr.strip().splitlines()[-1])
    assert_quiet_start(result.stderr)


def test_eval_shows_data_warnings_but_no_tensorflow_notices(tiny_run):
    model_dir, _, clipped = tiny_run
    result = run_eval_tool(model_dir, clipped)
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(r"Data: boxes clipped in record source_id 10[0-3] / img[0-3]\.jpg",
                     result.stderr), result.stderr[-3000:]
    assert re.search(r"^I\d{4} ", result.stderr, re.M)  # The package's own INFO lines stay.
    assert_quiet_start(result.stderr)
    assert "ARmax100" in result.stdout


@pytest.mark.quick
def test_input_error_cause_picks_the_line_that_names_the_record(tmp_path):
    import tensorflow as tf

    from efficientdet_keras.cli.common import input_error_cause

    def check(value):
        if value > 1:
            raise ValueError("record source_id 7 / seven.jpg has class id 5 outside 1..4")
        return value

    dataset = tf.data.Dataset.range(3).map(
        lambda v: tf.py_function(check, [v], tf.int64), num_parallel_calls=2)
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        list(dataset)
    assert "Traceback" in raised.value.message  # What the user saw before.
    assert input_error_cause(raised.value) == (
        "record source_id 7 / seven.jpg has class id 5 outside 1..4")

    path = str(tmp_path / "data.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        writer.write(b"not a tf.Example")
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        list(tf.data.TFRecordDataset(path).map(lambda s: tf.io.parse_single_example(
            s, {"image/encoded": tf.io.FixedLenFeature((), tf.string)})))
    assert input_error_cause(raised.value) == (
        "Could not parse example input, value: 'not a tf.Example'")

    def strict(value):  # How the strict_data check stops (tf.debugging.Assert).
        tf.debugging.Assert(value < 2, ["record source_id 2 / two.jpg has class id 9"])
        return value

    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        list(tf.data.Dataset.range(3).map(strict))
    assert input_error_cause(raised.value) == "record source_id 2 / two.jpg has class id 9"

    with open(path, "r+b") as f:  # Cut the record short.
        f.truncate(20)
    with pytest.raises(tf.errors.DataLossError) as raised:
        list(tf.data.TFRecordDataset(path))
    assert input_error_cause(raised.value).startswith("truncated record at 0")

    # Not from reading data: left to show its traceback.
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        tf.matmul(tf.ones([2, 3]), tf.ones([2, 3]))
    assert input_error_cause(raised.value) is None
    assert input_error_cause(ValueError("x")) is None


def test_infer_names_a_missing_saved_model_in_one_line(tmp_path):
    path = os.path.join(os.path.dirname(sys.executable), "efficientdet-infer")
    if not os.path.exists(path):
        pytest.skip("%s is not installed in this environment (pip install -e .)" % path)
    result = subprocess.run([path, "--saved_model_dir=%s" % (tmp_path / "none"),
                             "--input=%s" % tmp_path, "--output_dir=%s" % (tmp_path / "out")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "efficientdet-infer: --model %s does not exist (nor is it a released model's name)"
        % (tmp_path / "none"))
