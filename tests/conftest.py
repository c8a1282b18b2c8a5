"""Pytest fixtures and the process setup every test relies on; plain helpers are in helpers.py."""

import logging
import os
import signal

# Before anything imports TensorFlow: tests import it directly, not only via the package.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# oneDNN (TensorFlow's and OpenVINO's copies, and the commands tests start) stops below AMX:
# OpenVINO's CPU plugin crashes in int8 inference with its AMX kernels. Not lower: TensorFlow
# sends float16 convolutions to oneDNN wherever the CPU has AVX512-FP16.
os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_FP16")

import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

from helpers import PYTHON_ENV, REFERENCE_DIR, REPO_ROOT  # noqa: E402
from scheduling import (DurationRecorder, SlowShardReport, choose_slow_shard,  # noqa: E402
                        costliest_groups_first, load_durations, slow_shard_turn)
from warm_python import WarmPython  # noqa: E402

# The processes tests start take Ctrl-C (SIGINT) as they would from a terminal, also when the
# suite itself runs as a background job: a shell starts those with SIGINT ignored, every child
# inherits that, and a Python started so never catches SIGINT (a second Ctrl-C is then lost).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Two logical CPUs, so tf.distribute.MirroredStrategy tests run on this machine.
# Must happen before TensorFlow initialises its runtime, hence here.
tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * 2)


def pytest_addoption(parser):
    parser.addoption("--write-durations", metavar="PATH", default="",
                     help="Write each group's seconds (a test file or class, see "
                          "scheduling.py) to PATH as JSON and print them (make profile).")
    parser.addoption("--slow-shard", metavar="TURN", default="",
                     help="Run the tests not marked slow and one shard of the slow ones: the "
                          "shard TURN (modulo their count), or 'auto', the commit's number "
                          "(make test; scheduling.py).")
    parser.addoption("--suite-minutes", type=float, default=25.0,
                     help="With --slow-shard: the wall time the suite is to fit, which sizes "
                          "the shards.")


class _CostliestGroupsFirst:
    @pytest.hookimpl(trylast=True)  # After pytest's own reordering by fixture scopes.
    def pytest_collection_modifyitems(self, config, items):
        durations = load_durations()
        turn = config.getoption("slow_shard")
        if turn:
            workers = getattr(config, "workerinput", {}).get("workercount", 1)
            kept, groups, number, count = choose_slow_shard(
                items, durations, 60 * config.getoption("suite_minutes"), workers,
                slow_shard_turn(REPO_ROOT) if turn == "auto" else int(turn))
            keep = set(kept)
            dropped = [item for item in items if item not in keep]
            if dropped:
                config.hook.pytest_deselected(items=dropped)
            items[:] = kept
        items[:] = costliest_groups_first(items, durations)


def pytest_report_header(config):
    """The temp folder's free space heads the report: a full disk fails hundreds of tests at
    their setup, far from the cause."""
    import shutil
    import tempfile
    folder = tempfile.gettempdir()
    free_gb = shutil.disk_usage(folder).free / 1e9
    return "temp folder %s: %.1f GB free%s" % (
        folder, free_gb, " (the full suite writes a few GB there)" if free_gb < 10 else "")


def pytest_configure(config):
    config.pluginmanager.register(_CostliestGroupsFirst(), "costliest-groups-first")
    if config.getoption("slow_shard"):
        config.pluginmanager.register(SlowShardReport(), "slow-shard-report")
    if config.getoption("write_durations"):
        config.pluginmanager.register(DurationRecorder(config.getoption("write_durations")),
                                      "duration-recorder")


# absl's logger as the run starts; a tool's flags parsed in this process (--verbosity) set it.
ABSL_LOG_LEVEL = logging.getLogger("absl").level


@pytest.fixture(autouse=True)
def reset_absl_log_level_after_each_test():
    """A test that leaves absl's logger at WARNING must not hide the package's INFO lines from
    a later test's caplog."""
    yield
    logging.getLogger("absl").setLevel(ABSL_LOG_LEVEL)


@pytest.fixture(autouse=True)
def unset_global_seed_after_each_test():
    """A test that calls tf.random.set_seed must not reorder later tests' data: tf.data's
    seeded shuffles mix the global seed in (the preview test compares a child's grid, made
    with no global seed, against one made in this process)."""
    yield
    tf.random.set_seed(None)


@pytest.fixture
def reference_dir():
    """Path of ../shared/reference/<name>; skips the test when it is absent (a user's clone)."""
    def get(name: str) -> str:
        path = os.path.join(REFERENCE_DIR, name)
        if not os.path.isdir(path):
            pytest.skip("reference data %s is absent: it lives in ../shared/reference beside "
                        "the repository (CI has it; a plain clone does not)" % path)
        return path
    return get


@pytest.fixture(scope="session")
def two_cpu_strategy():
    """One MirroredStrategy over the two logical CPUs for the whole test run: separate
    strategy objects in one process can collide on collective-op instance keys."""
    return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])


@pytest.fixture(scope="session", autouse=True)
def warm_python(tmp_path_factory):
    """Commands that tests run as processes start from a server that has TensorFlow imported
    (warm_python.py): `helpers.python()` and the package's console scripts on PATH reach it.
    EFFICIENTDET_TEST_WARM=0 runs every command from a cold start instead."""
    if os.environ.get("EFFICIENTDET_TEST_WARM", "1") == "0":
        yield None
        return
    server = WarmPython(str(tmp_path_factory.mktemp("warm-python")))
    saved = {name: os.environ.get(name) for name in ("PATH", PYTHON_ENV)}
    os.environ["PATH"] = server.bin_dir + os.pathsep + os.environ["PATH"]
    os.environ[PYTHON_ENV] = server.python
    try:
        yield server
    finally:
        server.close()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
