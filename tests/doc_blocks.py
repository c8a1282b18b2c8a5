"""The fenced code blocks of the README and the docs pages, for tests that run them as written."""

import dataclasses
import os
import re
from typing import Dict, List

import yaml

from helpers import REPO_ROOT

README_PATH = os.path.join(REPO_ROOT, "README.md")
MKDOCS_PATH = os.path.join(REPO_ROOT, "mkdocs.yml")
DOCS_DIR = os.path.join(REPO_ROOT, "docs")
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
_HEADING = re.compile(r"^## (.+)$", re.M)
# A YAML block whose first line is "# <path>" is a file the reader is asked to write.
_FILE_COMMENT = re.compile(r"^# (\S+\.ya?ml)\s*$")
# Pages the docs hooks write from the code (docs/hooks/generated_pages.py).
GENERATED_PAGES = ("reference/config.md", "reference/cli.md", "reference/api.md")


@dataclasses.dataclass
class Block:
    page: str  # the file, relative to the repository root ("README.md", "docs/guides/data.md")
    section: str  # the "## " heading the block stands under
    language: str  # "python", "sh", "yaml", ...
    code: str
    line: int  # 1-based line of the opening fence

    @property
    def id(self) -> str:
        return "%s-%s-line%d" % (self.page, self.language, self.line)

    @property
    def file_name(self) -> str:
        """For a YAML block headed by "# path.yaml": that path; else ""."""
        match = _FILE_COMMENT.match(self.code.splitlines()[0]) if self.code else None
        return match.group(1) if match else ""

    def commands(self) -> List[str]:
        """Shell commands of an sh block: continuation lines joined, comments dropped."""
        joined = re.sub(r"\\\n\s*", "", self.code)
        commands = []
        for line in joined.splitlines():
            line = line.split("  #")[0].strip()
            if line and not line.startswith("#"):
                commands.append(line)
        return commands


def page_blocks(path: str) -> List[Block]:
    """Every fenced block of one Markdown file, in order."""
    with open(path) as f:
        text = f.read()
    page = os.path.relpath(path, REPO_ROOT)
    headings = [(m.start(), m.group(1).strip()) for m in _HEADING.finditer(text)]
    blocks = []
    for match in _FENCE.finditer(text):
        section = ""
        for start, heading in headings:
            if start > match.start():
                break
            section = heading
        blocks.append(Block(page, section, match.group(1), match.group(2),
                            text.count("\n", 0, match.start()) + 1))
    return blocks


def _nav_files(entries) -> List[str]:
    """The Markdown files of an mkdocs.yml nav, in reading order."""
    files = []
    for entry in entries:
        value = list(entry.values())[0] if isinstance(entry, dict) else entry
        if isinstance(value, list):
            files.extend(_nav_files(value))
        elif isinstance(value, str) and value.endswith(".md"):
            files.append(value)
    return files


def written_pages() -> List[str]:
    """The README, then every docs page someone wrote (not the generated references), in the
    site's reading order: what a reader follows, one page after another."""
    with open(MKDOCS_PATH) as f:
        site = yaml.load(f, Loader=yaml.BaseLoader)  # mkdocs.yml has !! tags for its plugins.
    names = [name for name in _nav_files(site["nav"]) if name not in GENERATED_PAGES]
    return [README_PATH] + [os.path.join(DOCS_DIR, name) for name in names]


EXEMPTIONS_PAGE = os.path.join(DOCS_DIR, "contributing.md")
_EXEMPTIONS_SECTION = "### Commands the suite does not run"
_EXEMPTION_ROW = re.compile(r"^\| `([^`]+)` \| (.+) \|$", re.M)


def exempt_commands() -> Dict[str, str]:
    """{start of a command the suite does not run: why, and what covers it}, from the table
    the contributing page shows readers."""
    with open(EXEMPTIONS_PAGE) as f:
        text = f.read()
    section = text.split(_EXEMPTIONS_SECTION, 1)[1].split("\n#", 1)[0]
    return dict(_EXEMPTION_ROW.findall(section))


def all_blocks() -> List[Block]:
    """The blocks of every written page, in reading order."""
    return [block for page in written_pages() for block in page_blocks(page)]
