"""A Python that starts warm: commands that tests run as processes skip importing TensorFlow.

`python warm_python.py SOCKET BIN` imports TensorFlow and the package once, then serves: each
request forks a process that runs one command (`python -c`, `python -m`, `python script.py` or
a console script) with the caller's arguments, folder, environment and stdin/stdout/stderr. BIN
gets small launchers: `python` and one per console script of the package. A launcher is a real
process of its own: it forwards the signals it gets to the command, ends with the command's exit
status (or its signal) and, when killed itself, takes the command down with it. So a test sees a
process as it would see the real one, minus the 4-8 s of imports.

A launcher falls back to the real executable when the server is not running, for Python
options it does not know, or when the environment differs from the server's in a variable read
at start-up (PYTHON*, XLA and thread settings), so such tests get what they asked for.
"""

import json
import os
import signal
import socket
import sys

# Variables read when Python or TensorFlow starts: a command that sets them differently needs
# a process that starts with them.
START_UP_VARIABLES = ("PYTHON", "TF_XLA_FLAGS", "XLA_FLAGS", "TF_ENABLE_ONEDNN_OPTS",
                      "TF_NUM_", "OMP_", "MKL_", "KMP_", "LD_", "COVERAGE_", "TF_USE_LEGACY_KERAS")
# Real signals a launcher passes on to its command.
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT,
                     signal.SIGUSR1, signal.SIGUSR2)
PACKAGE_SCRIPTS_PREFIX = "efficientdet-"

# The launcher: standard library only, started with `python -S` so that it starts in ~20 ms.
LAUNCHER = r'''
import json, os, signal, socket, sys

SOCKET, REAL = %(socket)r, %(real)r
START_UP_VARIABLES, SERVER_START_UP = %(start_up)r, %(server_start_up)r
FORWARDED = %(forwarded)r
name = os.path.basename(sys.argv[0])
args = sys.argv[1:]


def real():
    os.execv(REAL, [REAL] + args)


def start_up_environment(env):
    return {k: v for k, v in env.items() if k.startswith(START_UP_VARIABLES)}


if name == "python" and (not args or (args[0].startswith("-") and args[0] not in ("-c", "-m"))):
    real()  # An interactive Python or an option the server does not handle.
if start_up_environment(os.environ) != SERVER_START_UP:
    real()
try:
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect(SOCKET)
except OSError:
    real()
request = json.dumps({"name": name, "argv": [REAL] + args,
                      "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
socket.send_fds(connection, [len(request).to_bytes(8, "big") + request], [0, 1, 2])
reply = connection.makefile("rb")
pid = int(reply.readline())
for number in FORWARDED:
    signal.signal(number, lambda number, frame: os.kill(pid, number))
line = reply.readline()
status = int(line) if line else 0x7f00  # The server gone: exit status 127.
if os.WIFSIGNALED(status):
    for number in FORWARDED:
        signal.signal(number, signal.SIG_DFL)
    os.kill(os.getpid(), os.WTERMSIG(status))
sys.exit(os.waitstatus_to_exitcode(status) if not os.WIFSIGNALED(status) else 1)
'''


def start_up_environment(env):
    return {k: v for k, v in env.items() if k.startswith(START_UP_VARIABLES)}


def write_launchers(bin_dir, socket_path, server_env):
    """The launchers in bin_dir: `python` and the package's console scripts."""
    from importlib import metadata
    os.makedirs(bin_dir, exist_ok=True)
    names = ["python"] + sorted(e.name for e in metadata.entry_points(group="console_scripts")
                                if e.name.startswith(PACKAGE_SCRIPTS_PREFIX))
    for name in names:
        real = sys.executable if name == "python" else os.path.join(
            os.path.dirname(sys.executable), name)
        source = LAUNCHER % dict(socket=socket_path, real=real, start_up=START_UP_VARIABLES,
                                 server_start_up=start_up_environment(server_env), forwarded=[int(s) for s in FORWARDED_SIGNALS])
        path = os.path.join(bin_dir, name)
        with open(path, "w") as f:
            f.write("#!%s -S\n%s" % (sys.executable, source))
        os.chmod(path, 0o755)


def preload():
    """What commands import, imported once here: the package's modules (the tools' own, which
    define flags, excepted) and what they import. No TensorFlow runtime starts beyond listing
    the devices: forking after that is safe, after ops have run it is not."""
    import importlib
    import pkgutil
    import matplotlib
    matplotlib.use("Agg")
    import tensorflow as tf
    import efficientdet_keras
    for module in pkgutil.walk_packages(efficientdet_keras.__path__, "efficientdet_keras."):
        if not module.name.startswith("efficientdet_keras.cli."):
            try:
                importlib.import_module(module.name)
            except ImportError:  # An optional extra not installed: its commands import it.
                pass
    tf.config.list_physical_devices()


def _receive_request(connection):
    message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
    size = int.from_bytes(message[:8], "big")
    while len(message) < size + 8:
        message += connection.recv(1 << 20)
    return json.loads(message[8:]), fds


def _watch(connection, pid):
    """In the command's parent: reports the pid, then the exit status; kills the command when
    the launcher goes away first."""
    connection.sendall(b"%d\n" % pid)
    exited = os.pidfd_open(pid)
    import select
    while True:
        ready, _, _ = select.select([exited, connection], [], [])
        if exited in ready:
            _, status = os.waitpid(pid, 0)
            try:
                connection.sendall(b"%d\n" % status)
            except OSError:
                pass
            return
        if not connection.recv(1):  # The launcher was killed.
            os.kill(pid, signal.SIGKILL)


def serve(socket_path):
    """Accepts requests for ever; returns (in the forked command process only) the request to
    run."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.listen(64)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # Each request's parent reaps itself.
    while True:
        connection, _ = listener.accept()
        if os.fork():
            connection.close()
            continue
        listener.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        request, fds = _receive_request(connection)
        pid = os.fork()
        if pid:
            _watch(connection, pid)
            os._exit(0)
        connection.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        return request


def run(request):
    """Becomes the command: its folder, environment, arguments and signals, then runs it."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for number in FORWARDED_SIGNALS:
        signal.signal(number, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(line_buffering=stream.isatty())
    try:
        _run_command(request["name"], request["argv"][1:])
    except SystemExit as exit:
        _exit(exit.code)
    except BaseException as error:  # noqa: B036 - as Python's top level does
        frames = error.__traceback__
        while frames and frames.tb_frame.f_code.co_filename == __file__:
            frames = frames.tb_next  # The command's own frames, as Python would show them.
        sys.excepthook(type(error), error.with_traceback(frames), frames)
        _exit(1, signal.SIGINT if isinstance(error, KeyboardInterrupt) else None)
    _exit(0)


def _run_command(name, args):
    import runpy
    if name != "python":
        from importlib import metadata
        entry, = [e for e in metadata.entry_points(group="console_scripts") if e.name == name]
        sys.argv = [os.path.join(os.path.dirname(sys.executable), name)] + args
        sys.path[0] = os.path.dirname(sys.argv[0])
        sys.exit(entry.load()())
    if args[0] == "-c":
        import types
        sys.argv = ["-c"] + args[2:]
        sys.path[0] = ""
        main = sys.modules["__main__"] = types.ModuleType("__main__")
        exec(compile(args[1], "<string>", "exec"), main.__dict__)  # noqa: S102
    elif args[0] == "-m":
        sys.argv = [args[1]] + args[2:]
        sys.path[0] = os.getcwd()
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = args
        sys.path[0] = os.path.dirname(os.path.abspath(args[0]))
        runpy.run_path(args[0], run_name="__main__")


def _exit(code, killed_by=None):
    """Python's own exit steps that matter to a command (non-daemon threads joined, atexit
    handlers, buffers flushed), without tearing down the heap it inherited: that alone takes
    about a second."""
    import atexit
    import threading
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    threading._shutdown()  # noqa: SLF001 - what Python's finalisation calls first
    atexit._run_exitfuncs()  # noqa: SLF001
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    if killed_by:  # An unhandled Ctrl-C ends with SIGINT, as Python ends.
        signal.signal(killed_by, signal.SIG_DFL)
        os.kill(os.getpid(), killed_by)
    os._exit((code or 0) & 0xFF)


class WarmPython:
    """A server for this test process's commands, and the launchers that reach it."""

    def __init__(self, folder):
        import subprocess
        self.bin_dir = os.path.join(folder, "bin")
        self.socket_path = os.path.join(folder, "server.sock")
        environment = dict(os.environ)
        write_launchers(self.bin_dir, self.socket_path, environment)
        with open(os.path.join(folder, "server.log"), "wb") as log:
            # Launchers started before the server listens run the real executable.
            self.process = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), self.socket_path],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=environment)

    @property
    def python(self):
        return os.path.join(self.bin_dir, "python")

    def close(self):
        self.process.kill()
        self.process.wait()


if __name__ == "__main__":
    preload()
    sys.stdout.flush()
    sys.stderr.flush()
    run(serve(sys.argv[1]))
