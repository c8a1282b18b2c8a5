"""MkDocs hook: the data guide's table of dataset layouts, written from the registry the
readers use (`efficientdet_keras.data.layouts.registry.LAYOUTS`), in its order.

The page marks where the table goes:

    <!-- layouts table -->
    ...the table, written by `make docs`...
    <!-- end layouts table -->

`make docs` (generated_pages.py) rewrites what stands between the two lines; the build warns (a
strict build fails) when the page's table is not the registry's.
"""

import logging
import os
import re

HOOKS_DIR = os.path.dirname(os.path.abspath(__file__))
PAGE = "guides/data.md"
REGION = re.compile(r"(<!-- layouts table -->\n)(.*?)(<!-- end layouts table -->)", re.S)
STALE_MESSAGE = "%s: the layouts table is not the registry's: run make docs"


def render_table() -> str:
    from efficientdet_keras.data.layouts.registry import LAYOUTS
    lines = ["| `--data_layout` | layout | what is looked for | splits |", "|---|---|---|---|"]
    lines += ["| `%s` | %s | %s | %s |" % (layout.name, layout.writers, layout.recognised,
                                           layout.splits) for layout in LAYOUTS]
    return "\n".join(lines) + "\n"


def render_page(text: str) -> str:
    """`text` with its layouts table as the registry gives it."""
    return REGION.sub(lambda m: m.group(1) + render_table() + m.group(3), text)


def page_path() -> str:
    return os.path.join(os.path.dirname(HOOKS_DIR), PAGE)


def write_table() -> bool:
    """Rewrites the page's table; whether it changed."""
    with open(page_path(), encoding="utf-8") as f:
        text = f.read()
    rendered = render_page(text)
    if rendered != text:
        with open(page_path(), "w", encoding="utf-8") as f:
            f.write(rendered)
    return rendered != text


def on_page_markdown(markdown, page, config, files):
    """MkDocs hook: warns when the page's table is not the registry's."""
    if page.file.src_path == PAGE and render_page(markdown) != markdown:
        logging.getLogger("mkdocs.hooks").warning(STALE_MESSAGE, PAGE)
    return markdown
