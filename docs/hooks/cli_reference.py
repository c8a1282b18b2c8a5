"""MkDocs hook: the page reference/cli.md, every console script's flags, read from absl.

Each command's flags come from importing its module and asking absl, so the page cannot
drift from the code. Two tools define flags with the same names, and absl keeps one global
flag registry, so each module is imported in a fresh process (`--dump MODULE` below).

The build fails when a flag has no real description (`missing_help`).
"""

import concurrent.futures
import configparser
import functools
import json
import os
import subprocess
import sys

HOOKS_DIR = os.path.dirname(os.path.abspath(__file__))
if HOOKS_DIR not in sys.path:  # MkDocs loads a hook by its path, not as a package.
    sys.path.insert(0, HOOKS_DIR)
from generated_pages import serve_page  # noqa: E402
from markdown_tables import cell, table  # noqa: E402

REPO_ROOT = os.path.dirname(os.path.dirname(HOOKS_DIR))
PACKAGE = "efficientdet_keras"
PAGE = "reference/cli.md"
# Help shorter than this is a placeholder, not a description.
MIN_HELP_CHARS = 10
# What absl stores when a flag is defined with help=None.
ABSL_NO_HELP = "(no help available)"
# The dump processes run side by side: each spends its time starting Python and importing.
COLLECT_WORKERS = 4


def console_scripts():
    """[(command, module)] from setup.cfg's console_scripts, in their order there."""
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(os.path.join(REPO_ROOT, "setup.cfg"))
    scripts = []
    for line in parser["options.entry_points"]["console_scripts"].strip().splitlines():
        command, target = (part.strip() for part in line.split("=", 1))
        scripts.append((command, target.split(":")[0]))
    return scripts


def dump_module_flags(module_name: str) -> dict:
    """The module's docstring and the flags this package defines once it is imported.

    Runs in the `--dump` child process, where the module is the only cli module imported.
    """
    import importlib
    from absl import flags
    module = importlib.import_module(module_name)
    by_module = flags.FLAGS.flags_by_module_dict()
    own = [flag for name, defined in by_module.items() if is_package_module(name)
           for flag in defined]
    return {"doc": module.__doc__ or "", "flags": [describe_flag(flag) for flag in own]}


def is_package_module(module_name: str) -> bool:
    return module_name == PACKAGE or module_name.startswith(PACKAGE + ".")


def describe_flag(flag) -> dict:
    """A JSON-ready description of one absl flag."""
    enum_values = getattr(flag.parser, "enum_values", None)
    return {
        "name": flag.name,
        "type": "enum" if enum_values is not None else flag.flag_type(),
        "default": flag.default,
        "enum_values": enum_values,
        "lower_bound": getattr(flag.parser, "lower_bound", None),
        "upper_bound": getattr(flag.parser, "upper_bound", None),
        "help": help_without_enum_prefix(flag.help, enum_values),
    }


def help_without_enum_prefix(text: str, enum_values) -> str:
    """absl prepends "<a|b|c>: " to an enum flag's help; the page lists the values itself."""
    prefix = "<%s>: " % "|".join(enum_values) if enum_values is not None else ""
    return text[len(prefix):] if prefix and text.startswith(prefix) else text


def collect_command(command: str, module_name: str) -> dict:
    """{"command", "module", "doc", "flags"} of one console script, from a fresh process."""
    result = subprocess.run([sys.executable, os.path.abspath(__file__), "--dump", module_name],
                            capture_output=True, text=True, cwd=REPO_ROOT, check=False)
    if result.returncode != 0:
        raise RuntimeError("could not read the flags of %s (%s):\n%s"
                           % (command, module_name, result.stderr.strip()))
    return dict(json.loads(result.stdout), command=command, module=module_name)


@functools.lru_cache(maxsize=None)
def collected_commands():
    """Every console script's flags, in setup.cfg order; collected once per process."""
    with concurrent.futures.ThreadPoolExecutor(COLLECT_WORKERS) as pool:
        return list(pool.map(lambda script: collect_command(*script), console_scripts()))


def missing_help() -> list:
    """"command --flag" for each flag whose help is empty or a placeholder."""
    return ["%s --%s" % (command["command"], flag["name"])
            for command in collected_commands() for flag in command["flags"]
            if is_placeholder_help(flag["help"])]


def is_placeholder_help(text) -> bool:
    text = (text or "").strip()
    return text == ABSL_NO_HELP or len(text) < MIN_HELP_CHARS


def render() -> str:
    """The Markdown of reference/cli.md."""
    sections = [render_command(command) for command in collected_commands()]
    intro = ("Every command also answers `--help` (its own flags) and `--helpfull` (absl's "
             "flags too); a bool flag `--name` is turned off with `--noname`.")
    return "# Command-line reference\n\n%s\n\n%s\n" % (intro, "\n\n".join(sections))


def render_command(command: dict) -> str:
    """One console script's heading, summary and flag table."""
    rows = [flag_cells(flag) for flag in command["flags"]]
    return "## %s\n\n%s\n\n%s" % (command["command"], summary(command),
                                   table(["Flag", "Type", "Default", "Meaning"], rows))


def summary(command: dict) -> str:
    """The docstring's first paragraph, without its "command: " lead-in."""
    first = " ".join(command["doc"].strip().split("\n\n")[0].split())
    lead_in = command["command"] + ":"
    if first.startswith(lead_in):
        first = first[len(lead_in):].strip()
        first = first[:1].upper() + first[1:]
    return cell(first)


def flag_cells(flag: dict) -> list:
    return ["`--%s`" % flag["name"], flag["type"], format_default(flag["default"]),
            meaning(flag)]


def meaning(flag: dict) -> str:
    """The flag's help, then its allowed values and bounds."""
    parts = [cell(" ".join(flag["help"].split()))]
    if flag["enum_values"] is not None:
        parts.append("One of: %s." % ", ".join(code(value) for value in flag["enum_values"]))
    if flag["lower_bound"] is not None:
        parts.append("At least %s." % flag["lower_bound"])
    if flag["upper_bound"] is not None:
        parts.append("At most %s." % flag["upper_bound"])
    return " ".join(parts)


def format_default(value) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return code("true" if value else "false")
    if isinstance(value, list):
        return code(",".join(str(item) for item in value))
    return code(str(value))


def code(text: str) -> str:
    """A Markdown code span; the empty string shows as `""`."""
    return "`%s`" % (text or '""')


def on_files(files, config):
    """MkDocs hook: serves reference/cli.md, or stops the build when a flag has
    no description."""
    from mkdocs.exceptions import PluginError
    collected_commands.cache_clear()  # `mkdocs serve` rebuilds must see edited flags.
    undocumented = missing_help()
    if undocumented:
        raise PluginError("%s: these flags need a help text (at least %d characters): %s"
                          % (PAGE, MIN_HELP_CHARS, ", ".join(undocumented)))
    return serve_page(files, config, PAGE, render())


def main(argv) -> None:
    if len(argv) != 3 or argv[1] != "--dump":
        sys.exit("usage: %s --dump efficientdet_keras.cli.MODULE" % argv[0])
    sys.path.insert(0, REPO_ROOT)  # This checkout's package, whatever is installed.
    json.dump(dump_module_flags(argv[2]), sys.stdout, default=str)


if __name__ == "__main__":
    main(sys.argv)
