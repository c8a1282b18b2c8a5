"""The fenced code blocks of README.md, for tests that run them as written."""

import dataclasses
import os
import re
from typing import List

README_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "README.md")
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
_HEADING = re.compile(r"^## (.+)$", re.M)
# A YAML block whose first line is "# <path>" is a file the reader is asked to write.
_FILE_COMMENT = re.compile(r"^# (\S+\.ya?ml)\s*$")


@dataclasses.dataclass
class Block:
    section: str  # the "## " heading the block stands under
    language: str  # "python", "sh", "yaml", ...
    code: str
    line: int  # 1-based line of the opening fence

    @property
    def id(self) -> str:
        return "%s-line%d" % (self.language, self.line)

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


def readme_blocks(path: str = README_PATH) -> List[Block]:
    """Every fenced block of the README, in order."""
    with open(path) as f:
        text = f.read()
    headings = [(m.start(), m.group(1).strip()) for m in _HEADING.finditer(text)]
    blocks = []
    for match in _FENCE.finditer(text):
        section = ""
        for start, heading in headings:
            if start > match.start():
                break
            section = heading
        blocks.append(Block(section, match.group(1), match.group(2),
                            text.count("\n", 0, match.start()) + 1))
    return blocks
