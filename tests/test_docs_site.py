"""The docs site: it builds in strict mode, its API page covers the public API, and no page,
comment or docstring of the project speaks of the work's history instead of the package."""

import io
import os
import re
import shutil
import subprocess
import sys
import tokenize

import pytest

from helpers import REPO_ROOT, docs_hook

pytestmark = pytest.mark.quick  # All of this file is in the inner-loop set.

# Words about how the work went rather than what the package does: issue numbers, work
# sessions, machines lent for a while.
PROCESS_WORDS = re.compile(r"\bissues?\s*#?\d+|\(issue\b|#\d{2,}\b|\bsessions?\b"
                           r"|\b(?:was|were) lent\b|\blent (?:machines?|GPUs?|TPUs?)\b",
                           re.IGNORECASE)
# An abbreviated or full git commit: hex with letters and digits. Only the benchmarks page may
# name commits, in the header of each table, and the tables written from the results file.
COMMIT_HASH = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b")
BENCHMARKS_PAGE = os.path.join("docs", "benchmarks.md")
RESULTS_TABLE_START, RESULTS_TABLE_END = "<!-- results: ", "<!-- end results -->"
# pytest's own word for a fixture scope is not about the work.
ALLOWED = ('scope="session"', '"session"')
# This file names the words it looks for.
THIS_FILE = os.path.join("tests", "test_docs_site.py")
SCANNED_FOLDERS = ("efficientdet_keras", "tests", "tools", "benchmarks", "docs")


def _project_files():
    yield "README.md"
    for folder in SCANNED_FOLDERS:
        for root, _, names in os.walk(os.path.join(REPO_ROOT, folder)):
            for name in sorted(names):
                path = os.path.relpath(os.path.join(root, name), REPO_ROOT)
                if name.endswith((".py", ".md", ".yaml", ".yml")) and path != THIS_FILE:
                    yield path
    yield "setup.cfg"
    yield "Makefile"


def _python_prose(source):
    """(line, text, is_comment) of a Python file's comments and strings: the prose in it."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return [(t.start[0], t.string, t.type == tokenize.COMMENT) for t in tokens
            if t.type in (tokenize.COMMENT, tokenize.STRING)]


def process_word_findings(path, text):
    """["path:line: match"] for each process word (and each commit outside the benchmarks
    page) in a file's prose: all of a Markdown or settings file, a Python file's comments and
    strings (commits: its comments; strings may hold hex data)."""
    if path.endswith(".py"):
        pieces = _python_prose(text)
    else:
        pieces = [(1, text, path.endswith(".md") and path != BENCHMARKS_PAGE)]
    findings = []
    for first_line, piece, check_hashes in pieces:
        in_results_table = False
        for offset, line in enumerate(piece.splitlines()):
            if any(allowed in line for allowed in ALLOWED):
                continue
            # A table written from benchmarks/results.json names the commit it measured.
            in_results_table = (line.startswith(RESULTS_TABLE_START) or in_results_table) \
                and not line.startswith(RESULTS_TABLE_END)
            patterns = [PROCESS_WORDS] + (
                [COMMIT_HASH] if check_hashes and not in_results_table else [])
            for pattern in patterns:
                for match in pattern.finditer(line):
                    findings.append("%s:%d: %s" % (path, first_line + offset, match.group(0)))
    return findings


def test_no_process_words_in_the_project():
    findings = []
    for path in _project_files():
        with open(os.path.join(REPO_ROOT, path), encoding="utf-8") as f:
            findings += process_word_findings(path, f.read())
    assert not findings, "history belongs in git, figures on the benchmarks page:\n" + \
        "\n".join(findings)


# Samples of what the scan must catch, assembled here so that this file itself says none of it.
_ISSUE, _LATER, _COMMIT = "issue " + "16", "a sess" + "ion later", "92f" + "1192"


@pytest.mark.parametrize("path, text", [
    ("README.md", "Fixed in %s." % _ISSUE),
    ("docs/guides/data.md", "<!-- results: t -->\nat %s\n<!-- end results -->\n%s\n"
     % (_COMMIT, _COMMIT)),
    ("docs/guides/data.md", "Measured %s." % _LATER),
    ("docs/guides/data.md", "on commit %s, 3 runs" % _COMMIT),
    ("tests/test_x.py", '"""Checks the resume (%s)."""\n' % _ISSUE),
    ("efficientdet_keras/x.py", "x = 1  # the GPU that was " + "lent\n"),
    ("efficientdet_keras/x.py", "x = 1  # faster since %s\n" % _COMMIT),
])
def test_process_words_are_found(path, text):
    assert process_word_findings(path, text)


def test_allowed_words_pass():
    assert not process_word_findings("docs/guides/x.md", "the averages are lent to the model\n")
    assert not process_word_findings("tests/conftest.py", '@pytest.fixture(scope="session")\n')
    assert not process_word_findings(BENCHMARKS_PAGE, "- Commit: `%s`\n" % _COMMIT)
    assert not process_word_findings("tests/test_x.py", 'key = "0123456789abcdef"\n')
    assert not process_word_findings("docs/guides/x.md", "<!-- results: t -->\nat commit `%s`\n"
                                     "<!-- end results -->\n" % _COMMIT)


def _api_pages():
    """The page the site renders with mkdocstrings, and the committed one GitHub shows."""
    pages = []
    for path in (("hooks", "api_page.md"), ("reference", "api.md")):
        with open(os.path.join(REPO_ROOT, "docs", *path)) as f:
            pages.append(f.read())
    return pages


def test_api_page_documents_every_public_name():
    import efficientdet_keras
    written, committed = _api_pages()
    for name in efficientdet_keras.__all__:
        value = getattr(efficientdet_keras, name)
        if callable(value):
            dotted = "%s.%s" % (value.__module__, name)
            assert "::: %s\n" % dotted in written, name
            assert "### %s\n" % name in committed and "`%s`" % dotted in committed, name
            assert (value.__doc__ or "").strip(), "%s has no docstring" % name
        else:
            assert "efficientdet_keras.%s" % name in written, name
    assert ":::" not in committed  # Nothing GitHub would show raw.


def test_api_page_entries_link_to_their_source_files():
    import re
    _, committed = _api_pages()
    links = re.findall(r"\[Source\]\(\.\./\.\./([^)]+)\)", committed)
    assert len(links) >= 20
    for link in links:
        assert os.path.isfile(os.path.join(REPO_ROOT, link)), link


def test_site_builds_in_strict_mode(tmp_path):
    mkdocs = shutil.which("mkdocs", path=os.path.dirname(sys.executable))
    if mkdocs is None:
        pytest.skip("mkdocs is not installed: the docs extra (pip install '.[docs]'), which "
                    "make test installs")
    site = tmp_path / "site"
    result = subprocess.run([mkdocs, "build", "--strict", "--site-dir", str(site)],
                            cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
                            env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))
    assert result.returncode == 0, result.stderr[-6000:]
    with open(site / "reference" / "api.html") as f:
        api = f.read()
    assert "train_step" in api and "EfficientDetNetTrain" in api
    for page in ("config", "cli"):
        assert (site / "reference" / ("%s.html" % page)).stat().st_size > 10000, page
    assert not (site / "hooks").exists()  # The build's code is not published.
    # A page's GitHub alert is the site's admonition.
    with open(site / "guides" / "onnx-openvino.html") as f:
        page = f.read()
    assert '<div class="admonition warning">' in page and "[!WARNING]" not in page


@pytest.mark.quick
def test_alerts_become_admonitions_outside_code():
    hook = docs_hook("alerts")
    page = ("Intro\n\n> [!WARNING]\n> First line,\n>\n> second paragraph.\n\nAfter.\n"
            "> A plain quote stays.\n```markdown\n> [!NOTE]\n> in code\n```\n"
            "> [!TIP]\n> Last.")
    assert hook.admonitions(page) == (
        "Intro\n\n!!! warning\n    First line,\n\n    second paragraph.\n\nAfter.\n"
        "> A plain quote stays.\n```markdown\n> [!NOTE]\n> in code\n```\n"
        "!!! tip\n    Last.")
    assert set(hook.KINDS) == {"NOTE", "TIP", "IMPORTANT", "WARNING", "CAUTION"}


@pytest.mark.parametrize("hook_name", ["config_reference", "cli_reference", "api_reference"])
def test_the_committed_reference_pages_are_the_code_s(hook_name):
    """The config, CLI and API references are committed, so they read on the repository's
    web page; each must hold what its hook renders from the code now."""
    hook = docs_hook(hook_name)
    with open(os.path.join(REPO_ROOT, "docs", hook.PAGE), encoding="utf-8") as f:
        committed = f.read()
    assert committed == hook.render(), "docs/%s is out of date: run make docs" % hook.PAGE


def test_a_stale_committed_page_is_a_warning_that_fails_a_strict_build(tmp_path, monkeypatch,
                                                                        caplog):
    generated = docs_hook("generated_pages")
    monkeypatch.setattr(generated, "DOCS_DIR", str(tmp_path))
    (tmp_path / "reference").mkdir()
    page = tmp_path / "reference" / "config.md"
    page.write_text("# An older page\n")
    with caplog.at_level("WARNING", logger="mkdocs"):
        generated.warn_if_stale("reference/config.md", "# Now\n")
        assert [(r.name, r.getMessage()) for r in caplog.records] == [(
            "mkdocs.hooks",  # Under MkDocs' logger: its strict mode counts the warning.
            "reference/config.md is out of date with the code: run make docs and commit it")]
        caplog.clear()
        page.write_text("# Now\n")
        generated.warn_if_stale("reference/config.md", "# Now\n")
        assert caplog.records == []


@pytest.mark.quick
def test_make_bench_runs_the_benchmarks_the_benchmarks_page_says():
    """The page names the benchmarks `make bench` leaves out; the Makefile runs all others."""
    import re
    with open(os.path.join(REPO_ROOT, "Makefile")) as f:
        makefile = f.read()
    target = makefile[makefile.index("\nbench:"):].split("\n\n")[0]
    run = set(re.findall(r"bench\.py --what=(\w+)", target))
    with open(os.path.join(REPO_ROOT, "benchmarks", "bench.py")) as f:
        choices = re.search(r'DEFINE_enum\("what", "postprocess",\s*\[(.*?)\]', f.read(), re.S)
    every = set(re.findall(r'"(\w+)"', choices.group(1)))
    with open(os.path.join(REPO_ROOT, "docs", "benchmarks.md")) as f:
        sentence = re.search(r"`make bench` \(every `benchmarks/bench.py` benchmark but (.*?), "
                             r"with the", f.read(), re.S).group(1)
    left_out = set(re.findall(r"`(\w+)`", sentence))
    assert len(every) >= 15 and run <= every
    assert every - run == left_out, (every - run, left_out)
