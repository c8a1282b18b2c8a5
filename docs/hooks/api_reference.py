"""MkDocs hook: the page reference/api.md, from the page written in docs/hooks/api_page.md.

That page names each documented object with a mkdocstrings line (`::: module.Name`), which
the site renders as the object's whole docstring. The repository's web page cannot run
mkdocstrings and would show the bare `:::` lines, so the committed reference/api.md is this
module's rendering instead: each `:::` line becomes the object's name, its signature, the
first paragraph of its docstring and a link to its source file. The site is served the
written page.
"""

import importlib
import inspect
import os
import re
import sys

HOOKS_DIR = os.path.dirname(os.path.abspath(__file__))
if HOOKS_DIR not in sys.path:  # MkDocs loads a hook by its path, not as a package.
    sys.path.insert(0, HOOKS_DIR)
from generated_pages import serve_page  # noqa: E402

REPO_ROOT = os.path.dirname(os.path.dirname(HOOKS_DIR))
PAGE = "reference/api.md"
WRITTEN_PAGE = os.path.join(HOOKS_DIR, "api_page.md")
DIRECTIVE = re.compile(r"^::: ([\w.]+)$", re.M)
QUALIFIED_NAME = re.compile(r"\b(?:[A-Za-z_]\w*\.)+([A-Za-z_]\w*)")
# Signatures longer than this are written one parameter per line.
MAX_SIGNATURE_CHARS = 88
NOTE = ("*The built site (`make docs`) shows each docstring in full; this page lists each "
        "object with its signature and summary.*\n")


def written_page() -> str:
    with open(WRITTEN_PAGE, encoding="utf-8") as f:
        return f.read()


def documented_objects(page: str):
    """The dotted names of the page's `:::` lines, in order."""
    return DIRECTIVE.findall(page)


def import_object(dotted: str):
    module_name, name = dotted.rsplit(".", 1)
    return getattr(importlib.import_module(module_name), name)


def parameter_text(parameter: inspect.Parameter) -> str:
    """`name: Type = default`, each type by its own name: module paths (TensorFlow's
    internal ones among them) change between versions and say nothing to a reader."""
    text = str(parameter)
    declared, equals, default = text.partition(" = ")
    return QUALIFIED_NAME.sub(r"\1", declared) + equals + default


def signature_text(name: str, obj) -> str:
    try:
        parameters = [parameter_text(p) for p in inspect.signature(obj).parameters.values()]
    except (TypeError, ValueError):  # An object without a Python signature.
        return name
    one_line = "%s(%s)" % (name, ", ".join(parameters))
    if len(one_line) <= MAX_SIGNATURE_CHARS:
        return one_line
    return "%s(\n%s\n)" % (name, "\n".join("    %s," % p for p in parameters))


def summary(obj) -> str:
    """The docstring's first paragraph, on one line."""
    doc = inspect.getdoc(obj) or ""
    return " ".join(doc.split("\n\n", 1)[0].split())


def source_link(dotted: str) -> str:
    """The module's file (a package's __init__.py), relative to reference/api.md."""
    module_path = dotted.rsplit(".", 1)[0].replace(".", "/")
    if os.path.isdir(os.path.join(REPO_ROOT, module_path)):
        module_path += "/__init__"
    return "../../%s.py" % module_path


def render_entry(dotted: str) -> str:
    obj = import_object(dotted)
    name = dotted.rsplit(".", 1)[1]
    text = signature_text(name, obj)
    if "0x" in text:  # An object's default repr would change from run to run.
        raise ValueError("%s: a default value shows as an address: %s" % (dotted, text))
    return "### %s\n\n```python\n%s\n```\n\n%s\n\n[Source](%s) `%s`" % (
        name, text, summary(obj), source_link(dotted), dotted)


def render() -> str:
    """The committed page: the written one with each `:::` line rendered."""
    page = written_page()
    title, rest = page.split("\n", 1)
    return "%s\n\n%s%s" % (title, NOTE, DIRECTIVE.sub(lambda m: render_entry(m.group(1)), rest))


def on_files(files, config):
    """MkDocs hook: serves the written page (mkdocstrings renders it), and warns when the
    committed page is not this module's rendering of it."""
    return serve_page(files, config, PAGE, written_page(), committed=render())
