"""MkDocs hook: GitHub's alert blocks shown as the theme's admonitions.

The pages are read in two places: the built site and the repository's web page. A page marks a
trap or a tip the way the repository's web page renders it, as a quote whose first line names
the kind:

    > [!WARNING]
    > OpenVINO's CPU plugin computes in bfloat16 on some CPUs unless told otherwise.

and this hook turns it into the site's admonition (`!!! warning`) as the page is built, so one
source reads as a callout in both places. Fenced code is left as it is.
"""

import re
from typing import List

# GitHub's alert kinds and the Material admonition each becomes.
KINDS = {"NOTE": "note", "TIP": "tip", "IMPORTANT": "info", "WARNING": "warning",
         "CAUTION": "danger"}
_ALERT_START = re.compile(r"^> \[!(%s)\]\s*$" % "|".join(KINDS))
_FENCE = re.compile(r"^\s*```")


def admonitions(markdown: str) -> str:
    """`markdown` with every alert block (outside fenced code) written as an admonition."""
    lines = markdown.split("\n")
    out: List[str] = []
    in_fence = False
    index = 0
    while index < len(lines):
        line = lines[index]
        if _FENCE.match(line):
            in_fence = not in_fence
        start = None if in_fence else _ALERT_START.match(line)
        if not start:
            out.append(line)
            index += 1
            continue
        out.append("!!! %s" % KINDS[start.group(1)])
        index += 1
        while index < len(lines) and lines[index].startswith(">"):
            body = lines[index][1:]
            body = body[1:] if body.startswith(" ") else body
            out.append("    " + body if body.strip() else "")
            index += 1
    return "\n".join(out)


def on_page_markdown(markdown, page, config, files):
    return admonitions(markdown)
