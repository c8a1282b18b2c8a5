"""The warm Python that tests run commands with (warm_python.py) behaves as a process started
cold would: arguments, folder, environment, streams, exit status, signals; and it falls back to a
cold start where a warm one would differ."""

import os
import signal
import subprocess
import sys
import time

import pytest

from helpers import python

pytestmark = pytest.mark.quick


@pytest.fixture
def warm(warm_python):
    if warm_python is None:
        pytest.skip("EFFICIENTDET_TEST_WARM=0: commands start cold in this run")
    deadline = time.monotonic() + 120
    while not os.path.exists(warm_python.socket_path):  # The server is still importing.
        assert warm_python.process.poll() is None, "the warm Python server exited"
        assert time.monotonic() < deadline, "the warm Python server did not start"
        time.sleep(0.2)
    return warm_python


def run(*args, **kwargs):
    return subprocess.run([python(), *args], capture_output=True, text=True, timeout=60, **kwargs)


def test_a_command_gets_its_arguments_folder_environment_and_stdin(warm, tmp_path):
    code = ("import os, sys, json; print(json.dumps([sys.argv, os.getcwd(), "
            "os.environ.get('ASKED'), sys.stdin.read(), __name__, sys.path[0]]))")
    result = run("-c", code, "a", "b c", cwd=str(tmp_path), input="from stdin",
                 env=dict(os.environ, ASKED="yes"))
    assert result.returncode == 0, result.stderr
    import json
    assert json.loads(result.stdout) == [["-c", "a", "b c"], str(tmp_path), "yes", "from stdin",
                                         "__main__", ""]
    assert "tensorflow" in run("-c", "import sys; print(sorted(sys.modules))").stdout


def test_scripts_modules_and_console_scripts_run_as_main(warm, tmp_path):
    script = tmp_path / "script.py"
    script.write_text("import sys\nprint(__name__, sys.argv[1:], sys.path[0])\n")
    assert run(str(script), "x").stdout.split() == ["__main__", "['x']", str(tmp_path)]
    result = run("-m", "efficientdet_keras.cli.summary", "--helpshort")
    assert result.returncode == 0 and "--model_name" in result.stdout, result.stderr
    launcher = os.path.join(warm.bin_dir, "efficientdet-summary")
    result = subprocess.run([launcher, "--hparams=num_clases=3"], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith(
        "efficientdet-summary: Unknown config key 'num_clases'"), result.stderr


def test_exit_status_and_uncaught_errors_are_pythons(warm):
    assert run("-c", "import sys; sys.exit(3)").returncode == 3
    assert run("-c", "import sys; sys.exit('bad')").returncode == 1
    result = run("-c", "import atexit\natexit.register(print, 'at exit')\nraise ValueError('boom')")
    assert result.returncode == 1 and result.stdout == "at exit\n"
    assert result.stderr.startswith("Traceback (most recent call last):\n  File \"<string>\"")
    assert result.stderr.strip().endswith("ValueError: boom")
    assert "warm_python" not in result.stderr


def test_signals_reach_the_command_and_its_end_is_the_launchers(warm):
    command = subprocess.Popen([python(), "-c", (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: (print('got SIGTERM', flush=True), sys.exit(7)))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n")], stdout=subprocess.PIPE, text=True)
    assert command.stdout.readline() == "ready\n"
    command.send_signal(signal.SIGTERM)
    assert command.wait(timeout=30) == 7 and command.stdout.read() == "got SIGTERM\n"
    command = subprocess.Popen([python(), "-c", "import time; print('ready', flush=True); "
                                "time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    assert command.stdout.readline() == "ready\n"
    command.send_signal(signal.SIGINT)  # Uncaught KeyboardInterrupt: Python ends by SIGINT.
    assert command.wait(timeout=30) == -signal.SIGINT


def test_a_killed_launcher_takes_its_command_down(warm, tmp_path):
    marker = tmp_path / "pid"
    launcher = subprocess.Popen([python(), "-c", (
        "import os, time; open(%r, 'w').write(str(os.getpid())); time.sleep(60)" % str(marker))])
    deadline = time.monotonic() + 30
    while not marker.exists() or not marker.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    command = int(marker.read_text())
    assert command != launcher.pid  # The command is the server's fork, not the launcher.
    launcher.kill()
    launcher.wait()
    deadline = time.monotonic() + 10
    while os.path.exists("/proc/%d" % command) and "Z" not in _state(command):
        assert time.monotonic() < deadline, "the command outlived its launcher"
        time.sleep(0.05)


def _state(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "Z"


def test_start_up_settings_and_unknown_options_start_cold(warm):
    probe = "import sys; print('tensorflow' in sys.modules)"
    assert run("-c", probe).stdout == "True\n"
    assert run("-c", probe, env=dict(os.environ, PYTHONHASHSEED="1")).stdout == "False\n"
    assert run("-c", probe, env=dict(os.environ, TF_XLA_FLAGS="--tf_xla_auto_jit=2")).stdout \
        == "False\n"
    assert run("-I", "-c", probe).stdout == "False\n"
    assert run("-c", "import sys; print(sys.executable)").stdout == sys.executable + "\n"
