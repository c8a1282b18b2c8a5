"""The generated command-line reference (docs/hooks/cli_reference.py): every console script
and every flag its --help lists, each with a real description."""

import copy
import os
import re
import subprocess
import sys

import pytest

from helpers import REPO_ROOT, docs_hook

pytestmark = pytest.mark.quick  # All of this file is in the inner-loop set.

HOOK_PATH = os.path.join(REPO_ROOT, "docs", "hooks", "cli_reference.py")
# A flag line of a tool's --help: "  --name: ..." or "  --[no]name: ..." for a bool.
HELP_FLAG_LINE = re.compile(r"^  --(?:\[no\])?(\w+):", re.MULTILINE)


def load_hook():
    return docs_hook("cli_reference")


hook = load_hook()
COMMANDS = [command for command, _ in hook.console_scripts()]


@pytest.fixture(scope="module")
def page():
    return hook.render()


def page_sections(page: str) -> dict:
    """{heading: text} of the page's "## " sections."""
    parts = re.split(r"^## (.+)$", page, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2]))


def help_flag_names(command: str) -> list:
    """The flag names the installed command's --help lists."""
    script = os.path.join(os.path.dirname(sys.executable), command)
    result = subprocess.run([script, "--help"], capture_output=True, text=True, check=True)
    return HELP_FLAG_LINE.findall(result.stdout)


def fake_collection(commands):
    """A stand-in for hook.collected_commands that returns `commands`."""
    def collected():
        return commands
    collected.cache_clear = lambda: None
    return collected


def with_help(command: str, flag_name: str, text: str) -> list:
    """The collected commands with one flag's help replaced by `text`."""
    commands = copy.deepcopy(hook.collected_commands())
    entry = next(c for c in commands if c["command"] == command)
    next(f for f in entry["flags"] if f["name"] == flag_name)["help"] = text
    return commands


def test_page_has_a_section_per_console_script_in_setup_cfg_order(page):
    assert len(COMMANDS) == 10
    assert list(page_sections(page)) == COMMANDS


@pytest.mark.parametrize("command", COMMANDS)
def test_section_lists_every_flag_of_the_commands_help(page, command):
    listed = help_flag_names(command)
    section = page_sections(page)[command]
    assert listed, "%s --help listed no flags" % command
    missing = [name for name in listed if "| `--%s` |" % name not in section]
    assert not missing, "%s: not in the reference: %s" % (command, missing)


def test_every_flag_has_a_description():
    assert hook.missing_help() == []


@pytest.mark.parametrize("text", ["", "   ", "TODO", "(no help available)"])
def test_missing_help_names_a_flag_without_a_description(monkeypatch, text):
    monkeypatch.setattr(hook, "collected_commands",
                        fake_collection(with_help("efficientdet-train", "model_dir", text)))
    assert hook.missing_help() == ["efficientdet-train --model_dir"]


def test_docs_build_stops_on_a_flag_without_a_description(monkeypatch):
    from mkdocs.exceptions import PluginError
    monkeypatch.setattr(hook, "collected_commands",
                        fake_collection(with_help("efficientdet-eval", "tflite", "")))
    with pytest.raises(PluginError, match="efficientdet-eval --tflite"):
        hook.on_files([], config=None)


def test_table_cells_escape_markdown():
    flag = {"name": "x", "help": "a|b <model_dir> *.jpg", "enum_values": ["p", "q"],
            "lower_bound": 1, "upper_bound": None}
    assert hook.meaning(flag) == r"a\|b &lt;model\_dir> \*.jpg One of: `p`, `q`. At least 1."


def test_mkdocs_build_writes_the_page(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# Home\n")
    (tmp_path / "mkdocs.yml").write_text("site_name: test\nhooks:\n  - %s\n" % HOOK_PATH)
    mkdocs = os.path.join(os.path.dirname(sys.executable), "mkdocs")
    subprocess.run([mkdocs, "build", "--strict", "--quiet"], cwd=tmp_path, check=True)
    html = (tmp_path / "site" / "reference" / "cli" / "index.html").read_text()
    assert all('id="%s"' % command in html for command in COMMANDS)
