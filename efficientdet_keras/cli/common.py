"""What the command-line tools share: start-up and --help, one-line errors, evaluation reports.

Nothing here imports TensorFlow at module level: `--help` must answer at once.
"""

import gc
import logging
import os
import re
import sys
import tempfile

from efficientdet_keras.utils.error_text import first_cause_line
from efficientdet_keras.utils.fileio import FileWriteError
from efficientdet_keras.workflows.evaluate import EVAL_TIMEOUT_WITHOUT_TRAINER_S

# Errors caused by what the user gave (flags, files, data) or by the disk (full, read-only):
# reported in one line.
USER_ERRORS = (ValueError, FileNotFoundError, KeyError, FileWriteError)
# The --eval_timeout flag of the tools that evaluate continuously.
EVAL_TIMEOUT_HELP = ("Continuous evaluation: stop after this many seconds without a new "
                     "checkpoint; 0: wait until the final epoch's checkpoint; default: stop once "
                     "no trainer runs in --model_dir (its train.lock) and its newest checkpoint "
                     "is over %d s old." % EVAL_TIMEOUT_WITHOUT_TRAINER_S)
# The --hparams flag of every tool.
HPARAMS_HELP = ("Config overrides: 'k=v,k2=v2', or a YAML file: a path, or the name of a file "
                "shipped in the package's hparams/ (demo.yaml, voc.yaml).")
# Arguments that ask for a tool's usage and own flags, or for every flag (absl's too).
HELP_ARGS = ("--help", "-h", "-?", "--helpshort")
HELPFULL_ARGS = ("--helpfull",)
# What TensorFlow writes to stderr while it loads and looks for devices: notices, not
# problems (its own level setting cannot hide them). Other start-up lines pass through.
_STARTUP_NOISE = re.compile(
    r"WARNING: All log messages before absl::InitializeLog\(\) is called"
    r"|[IW]\d{4} \S+\s+\d+ \S+:\d+\] "  # INFO and WARNING lines of TensorFlow's C++ log.
    r"|E\d{4} .*(failed call to cuInit|Unable to register cu\w+ factory)"
    r"|To enable the following instructions: .* rebuild TensorFlow")
# This package's folder: its own INFO lines are worth showing, TensorFlow's are not.
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
# An exception raised by Python code inside tf.data (tf.py_function), as TensorFlow quotes it.
_QUOTED_PYTHON_ERROR = re.compile(r"^(?:\w+\.)*\w*(?:Error|Exception): (.+)$")


def run_app(main, module_name: str) -> None:
    """Runs a tool's main(argv) under absl, the way every efficientdet-* command starts.

    --help (-h, -?, --helpshort) prints the tool's docstring and its own flags, --helpfull
    every flag (absl's too); both exit 0 without loading TensorFlow. TensorFlow's start-up
    notices are held back, and unless --verbosity is given the log shows warnings, errors
    and this package's own INFO lines (which weights were evaluated, what was archived),
    not TensorFlow's INFO chatter.

    Args:
      main: the tool's main(argv).
      module_name: the tool module's __name__ ("__main__" under `python -m`).
    """
    from absl import app
    wanted = wants_help(sys.argv)
    if wanted:
        print(tool_help(module_name, everything=wanted == "full"))
        sys.exit(0)
    app.run(lambda argv: main(quiet_start(argv)))


def wants_help(argv):
    """"short" when the command line (argv[0] is the program) asks for --help, "full" for
    --helpfull, else None."""
    for arg in argv[1:]:
        if arg == "--":  # What follows is not a flag.
            break
        if arg in HELP_ARGS:
            return "short"
        if arg in HELPFULL_ARGS:
            return "full"
    return None


def tool_help(module_name: str, everything: bool = False) -> str:
    """The tool module's docstring and the help of the flags it defines (all flags, by
    defining module, when `everything`)."""
    from absl import flags
    doc = (sys.modules[module_name].__doc__ or "").strip()
    if everything:
        return "%s\n\nflags:\n%s" % (doc, flags.FLAGS.get_help())
    # absl files the flags of the __main__ module under the program path; the tool's flag
    # groups are filed under the cli modules that define them.
    key = sys.argv[0] if module_name == "__main__" else module_name
    modules = [key] + sorted(name for name in flags.FLAGS.flags_by_module_dict()
                             if name.startswith(__package__ + ".") and name != module_name)
    own_flags = [line for name in modules  # Each module's help without its title.
                 for line in flags.FLAGS.module_help(name).strip().splitlines()[1:]]
    return "%s\n\nflags:\n%s\n\nTry --helpfull to see every flag, absl's too." \
        % (doc, "\n".join(own_flags))


def quiet_start(argv):
    """After absl parsed the flags: TensorFlow imported with its start-up notices held back
    and, unless --verbosity was given, INFO lines from outside this package dropped.
    Returns argv."""
    from absl import flags
    from absl import logging as absl_logging
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import_tensorflow_quietly()
    if not flags.FLAGS["verbosity"].present:
        absl_logging.get_absl_handler().addFilter(own_info_and_all_warnings)
    return argv


def own_info_and_all_warnings(record: logging.LogRecord) -> bool:
    """A log filter: warnings and errors from anywhere, lower levels from this package only."""
    return (record.levelno >= logging.WARNING
            or os.path.realpath(record.pathname).startswith(_PACKAGE_DIR + os.sep))


def import_tensorflow_quietly() -> None:
    """Imports TensorFlow and lists its devices with stderr captured, then writes back
    the captured lines that are not start-up noise (`_STARTUP_NOISE`)."""
    if "tensorflow" in sys.modules:
        return
    sys.stderr.flush()
    saved_stderr = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as captured:
        os.dup2(captured.fileno(), 2)  # TensorFlow's C++ log writes to file descriptor 2.
        try:
            import tensorflow as tf
            tf.config.list_physical_devices()  # Where CUDA reports a missing driver.
        finally:  # Also when the import fails: its messages may say why.
            sys.stderr.flush()
            os.dup2(saved_stderr, 2)
            os.close(saved_stderr)
            captured.seek(0)
            lines = captured.read().decode(errors="replace").splitlines()
            kept = [line for line in lines if line.strip() and not _STARTUP_NOISE.match(line)]
            if kept:
                print("\n".join(kept), file=sys.stderr)


def run_or_exit(tool: str, fn, *args, **kwargs):
    """Calls fn(*args, **kwargs); a user error, or a TensorFlow error from reading the data (a bad
    class id, a malformed record), ends the program with "tool: message" and no traceback."""
    try:
        return fn(*args, **kwargs)
    except USER_ERRORS as e:
        message = e.args[0] if isinstance(e, KeyError) and e.args else e
    except Exception as e:  # noqa: BLE001 (only input-pipeline errors are caught; see below)
        message = input_error_cause(e)
        if message is None:
            raise
    # Outside the except block the error and its traceback are let go; collecting them now
    # destroys the input pipelines their frames held while Python still runs. Left to the
    # interpreter's exit, tf.data threads that run Python code can deadlock it.
    gc.collect()
    sys.exit("%s: %s" % (tool, message))


def input_error_cause(error: BaseException):
    """The line of a TensorFlow error raised while reading data that names the problem
    (for example "record source_id 7 / 000007.jpg has class id 5 outside 1..4"), or None
    when `error` is not a TensorFlow error from an input pipeline."""
    tf = sys.modules.get("tensorflow")
    if tf is None or not isinstance(error, tf.errors.OpError):
        return None
    message = error.message or ""
    from_input = isinstance(error, tf.errors.DataLossError) or re.search(
        r"IteratorGetNext|Iterator::|PyFunc|ParseExample|TFRecord", message)
    if not from_input:
        return None
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    quoted = [m.group(1) for m in map(_QUOTED_PYTHON_ERROR.match, lines) if m]
    if quoted:  # The data code's own message, raised inside tf.data.
        return quoted[-1]
    line = first_cause_line(lines)
    if line is None:
        return type(error).__name__
    line = re.sub(r"^Error in user-defined function passed to .*? transformation with "
                  r"iterator: \S+: ", "", line)
    line = re.sub(r"\s*\[Op:\w+\]( name: \S*)?$", "", line)
    return re.sub(r"^assertion failed: \[(.*)\]$", r"\1", line)[:300]  # tf Assert


def print_result(result) -> None:
    """Prints a workflow's result (its summary), after a blank line."""
    print("\n" + result.summary())


def print_continuous_end(ended) -> None:
    """The line saying whether a continuous evaluation reached the run's final epoch, and
    the best checkpoint's."""
    from efficientdet_keras.checkpoint.archive import ARCHIVE_MONITOR
    print("Final epoch %d evaluated." % ended.num_epochs if ended.finished
          else "Stopped before the final epoch's checkpoint.")
    if ended.best is not None:
        print("Best checkpoint: %s (%s %.4f)" % (ended.best["path"], ARCHIVE_MONITOR,
                                                 ended.best[ARCHIVE_MONITOR]))
