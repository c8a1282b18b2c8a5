"""The generated reference pages are committed beside the written ones, so that they read on
the repository's web page too. `make docs` writes them from the code (this file, run as a
script) before it builds; the hooks serve the same content to MkDocs and warn (which fails a
strict build) when a committed page is out of date."""

import logging
import os
import sys

HOOKS_DIR = os.path.dirname(os.path.abspath(__file__))
DOCS_DIR = os.path.dirname(HOOKS_DIR)
STALE_MESSAGE = "%s is out of date with the code: run make docs and commit it"


def committed_path(page: str) -> str:
    """Where `page` (e.g. "reference/config.md") lives in the repository."""
    return os.path.join(DOCS_DIR, page)


def is_current(page: str, content: str) -> bool:
    """Whether the committed page holds `content`."""
    try:
        with open(committed_path(page), encoding="utf-8") as f:
            return f.read() == content
    except FileNotFoundError:
        return False


def warn_if_stale(page: str, content: str) -> None:
    """A warning (MkDocs counts it: a strict build fails) when the committed page differs."""
    if not is_current(page, content):
        logging.getLogger("mkdocs.hooks").warning(STALE_MESSAGE, page)


def serve_page(files, config, page: str, content: str, committed: str = None):
    """Gives MkDocs `content` as `page` in place of the committed file, which may be stale
    (the committed file should hold `committed`, by default `content` itself)."""
    from mkdocs.structure.files import File
    warn_if_stale(page, content if committed is None else committed)
    existing = files.get_file_from_path(page)
    if existing is not None:
        files.remove(existing)
    files.append(File.generated(config, page, content=content))
    return files


def write_pages() -> None:
    """Writes every generated page that changed, and the pages' tables of measured figures
    (results_tables.py)."""
    if HOOKS_DIR not in sys.path:
        sys.path.insert(0, HOOKS_DIR)
    import api_reference
    import cli_reference
    import config_reference
    for hook in (config_reference, cli_reference, api_reference):
        content = hook.render()
        if not is_current(hook.PAGE, content):
            with open(committed_path(hook.PAGE), "w", encoding="utf-8") as f:
                f.write(content)
            print("wrote docs/%s" % hook.PAGE)
    import layouts_table
    if layouts_table.write_table():
        print("wrote the layouts table of docs/%s" % layouts_table.PAGE)
    import results_tables
    for page in results_tables.write_tables():
        print("wrote the results tables of %s" % page)


if __name__ == "__main__":
    write_pages()
