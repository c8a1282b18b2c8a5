"""Markdown tables for the generated reference pages (imported by the hooks beside it)."""

from typing import List


def table(header: List[str], rows: List[List[str]]) -> str:
    """A pipe table; the cells are Markdown already (see `cell` for plain text)."""
    lines = [header, ["---"] * len(header)] + rows
    return "\n".join("| %s |" % " | ".join(cells) for cells in lines)


def cell(text: str) -> str:
    """Plain text that Markdown shows as written inside a table cell: no emphasis, links,
    HTML tags or cell breaks."""
    for char in "\\`*_[]|":
        text = text.replace(char, "\\" + char)
    return text.replace("<", "&lt;")
