"""The README and the docs pages as a test: every Python snippet, every shell command (but a few
that the contributing page's table of exemptions names, with the reason) and every settings file
runs as written; a page's demo trainings run on the one-step demo's small network.

Each page runs in a sandbox folder of its own, laid out like a user's project, holding every
file the pages name (the hparams folder, small COCO-JSON, TFRecord and VOC datasets, photos, a
video, the demo run in runs/demo), its commands and snippets in reading order, as a reader
follows it. The folder is prepared once per test run and copied for each page, and pages are
spread over the xdist workers. The released models the pages name are served from a loopback HTTP server
(archives built from ../shared/reference) into a cache of the worker's own. The Python snippets
of one page share one namespace, as they would at a reader's Python prompt.
"""

import fnmatch
import json
import os
import re
import shutil
import subprocess

import pytest

from doc_blocks import all_blocks, exempt_commands, written_pages
from helpers import (CLIENTS_PYTHON, HPARAMS_DIR, REFERENCE_DIR, REPO_ROOT,
                     SMALL_NETWORK_HPARAMS,
                     built_once_per_run, command_environment,
                     released_models_served, write_backbone_checkpoint)

WORKED_EXAMPLE = ("docs/guides/training.md", "Fine-tuning a released checkpoint on your own data")
BLOCKS = all_blocks()
PYTHON_BLOCKS = [b for b in BLOCKS if b.language == "python"]
EXAMPLE_BLOCKS = [b for b in BLOCKS if (b.page, b.section) == WORKED_EXAMPLE]
# Commands too long to run here, by their start, with the test that covers them instead: the
# contributing page's table.
EXEMPT = exempt_commands()
# Shell commands outside the worked example (whose test runs its own), in reading order.
COMMANDS = [(b, i, c) for b in BLOCKS if b.language == "sh" and b not in EXAMPLE_BLOCKS
            for i, c in enumerate(b.commands())]
EXAMPLE_COMMANDS = [c for b in EXAMPLE_BLOCKS if b.language == "sh" for c in b.commands()]
RUN_COMMANDS = [(b, i, c) for b, i, c in COMMANDS if not any(c.startswith(e) for e in EXEMPT)]
# What each page runs, in its reading order: its Python snippets and its shell commands.
STEPS = [step for b in BLOCKS for step in ([(b, None, None)] if b.language == "python" else
                                           [s for s in RUN_COMMANDS if s[0] is b])]
# What the pages' commands expect from an earlier run: runs/demo, here a one-step demo of the
# small network at 128 px, so that the exports, conversions and evaluations the pages run on it
# trace a fraction of D0's ops (no page's command trains on runs/demo, which would need the
# demo's own network; the fine-tune of its TF-Hub module is exempt).
SMALL_DEMO_HPARAMS = "image_size=128," + SMALL_NETWORK_HPARAMS
TINY_DEMO = ("efficientdet-train --demo --demo_images=8 --num_epochs=1 "
             "--hparams=steps_per_epoch=1,%s --model_dir=runs/demo" % SMALL_DEMO_HPARAMS)
# The front page is a front page: a reader finds the quick starts without scrolling far.
README_MAX_LINES = 215


def _link(target, link):
    os.makedirs(os.path.dirname(link), exist_ok=True)
    os.symlink(os.path.realpath(target), link)


def _write_coco_dataset(root, synthetic, name):
    """mydata/: the worked example's own dataset, train and val images in one folder."""
    from efficientdet_keras.data.synthetic import write_synthetic_dataset
    data = write_synthetic_dataset(os.path.join(root, "synthetic-" + name), num_train=8,
                                   num_val=4, image_size=synthetic, tfrecord=False)
    folder = os.path.join(root, name)
    os.makedirs(os.path.join(folder, "images"))
    for split, images, annotation in (("train", data.train_images, data.train_json),
                                      ("val", data.val_images, data.val_json)):
        for file_name in os.listdir(images):
            shutil.copy(os.path.join(images, file_name), os.path.join(folder, "images"))
        shutil.copy(annotation, os.path.join(folder, split + ".json"))


def _build_project(root):
    """A user's project folder with every file the pages' snippets and commands name, and the
    demo run (runs/demo) they start from."""
    from efficientdet_keras.data.synthetic import write_synthetic_dataset
    from test_video import write_clip
    from test_voc import make_voc_tree

    os.makedirs(root)
    _link(HPARAMS_DIR, os.path.join(root, "hparams"))
    _write_coco_dataset(root, 256, "mydata")

    # COCO's own names, and TFRecords as efficientdet-create-tfrecord names them.
    coco = write_synthetic_dataset(os.path.join(root, "synthetic"), num_train=8, num_val=4,
                                   image_size=128)
    _link(coco.train_json, os.path.join(root, "annotations", "instances_train2017.json"))
    _link(coco.val_json, os.path.join(root, "annotations", "instances_val2017.json"))
    _link(coco.train_images, os.path.join(root, "train2017"))
    _link(coco.val_images, os.path.join(root, "val2017"))
    _link(coco.train_tfrecord.replace("*", "00000"), os.path.join(
        root, "tfrecord", "train-00000-of-00001.tfrecord"))
    _link(coco.val_tfrecord.replace("*", "00000"), os.path.join(
        root, "tfrecord", "val-00000-of-00001.tfrecord"))
    _link(coco.val_json, os.path.join(root, "tfrecord", "val.json"))
    _link(coco.val_json, os.path.join(root, "val.json"))
    for split in ("train", "val"):
        make_voc_tree(os.path.join(root, "VOCdevkit", "VOC2012"), split=split)
    write_clip(os.path.join(root, "clip.mp4"))  # A video of moving squares.
    os.makedirs(os.path.join(root, "photos"))
    for file_name, photo in zip(sorted(os.listdir(coco.val_images)), ("street.jpg", "park.jpg")):
        shutil.copy(os.path.join(coco.val_images, file_name), os.path.join(root, "photos", photo))
    for block in BLOCKS:  # The settings files the pages ask the reader to write.
        if block.language == "yaml" and block.file_name:
            with open(os.path.join(root, block.file_name), "w") as f:
                f.write(block.code)
    _run_command(TINY_DEMO, root)


@pytest.fixture(scope="module")
def released_models(tmp_path_factory):
    """The released models the pages name, served from loopback into this worker's cache."""
    reference = os.path.join(REFERENCE_DIR, "efficientdet-d0")
    if not os.path.isdir(reference):
        pytest.skip("reference checkpoint %s is absent: it lives in ../shared/reference beside "
                    "the repository (CI has it; a plain clone does not)" % reference)
    mirror = str(tmp_path_factory.mktemp("released-models"))
    served = {"efficientdet-d0": reference,
              "efficientdet-lite0": os.path.join(REFERENCE_DIR, "efficientdet-lite0"),
              "efficientnet-b0": write_backbone_checkpoint(reference, os.path.join(mirror, "b0"))}
    with released_models_served(os.path.join(mirror, "bucket"), served,
                                os.path.join(mirror, "cache")) as server:
        yield server


@pytest.fixture(scope="module")
def project(released_models, tmp_path_factory):
    """The prepared project folder, built once per test run and shared; read-only."""
    return built_once_per_run(tmp_path_factory, "docs-project", _build_project)


@pytest.fixture(scope="module")
def page_sandboxes():
    return {}


@pytest.fixture
def sandbox(request, project, page_sandboxes, tmp_path_factory):
    """The page's own copy of the project: what its commands write stays on the page."""
    page = request.cls.page
    if page not in page_sandboxes:
        folder = tmp_path_factory.mktemp(re.sub(r"\W+", "-", page))
        shutil.rmtree(folder)
        shutil.copytree(project, folder, symlinks=True)
        page_sandboxes[page] = str(folder)
    return page_sandboxes[page]


@pytest.fixture(scope="module")
def page_namespaces():
    """One namespace per page: its snippets build on each other, not on other pages'."""
    return {}


@pytest.mark.quick
def test_pages_have_the_snippets_they_should():
    assert len(written_pages()) >= 10
    assert len(PYTHON_BLOCKS) >= 10
    assert any(b.language == "sh" for b in EXAMPLE_BLOCKS), \
        "the worked example %r is missing" % (WORKED_EXAMPLE,)
    readme = [b for b in BLOCKS if b.page == "README.md"]
    assert [b.language for b in readme].count("python") >= 2, "the README's quick starts"


@pytest.mark.quick
def test_readme_is_a_front_page():
    with open(os.path.join(REPO_ROOT, "README.md")) as f:
        lines = f.read().splitlines()
    shown = [line for line in lines if not line.startswith("<!--")]  # Comments do not show.
    assert len(shown) <= README_MAX_LINES, "README.md shows %d lines" % len(shown)


def _run_python_snippet(block, sandbox, page_namespaces):
    if "import mediapipe" in block.code:  # An app's code: it runs where MediaPipe is installed.
        return _run_in_clients_environment(block, sandbox)
    code = compile(block.code, "%s, line %d" % (block.page, block.line), "exec")
    namespace = page_namespaces.setdefault(block.page, {"__name__": "__docs__"})
    exec(code, namespace)  # noqa: S102 - the docs are ours


def _run_in_clients_environment(block, sandbox):
    """Runs an app's snippet with the clients' Python, where the page's commands above it
    (its export) have run."""
    if not os.path.exists(CLIENTS_PYTHON):
        pytest.skip("%s is absent: make test creates it (tests/clients/requirements.txt)"
                    % CLIENTS_PYTHON)
    result = subprocess.run([CLIENTS_PYTHON, "-c", block.code], cwd=sandbox,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, "%s, line %d:\n%s" % (block.page, block.line,
                                                        result.stderr[-4000:])


def on_the_small_network(command: str) -> str:
    """A page's demo training with the one-step demo's network added to its --hparams: what
    such a command shows (a tracker, a time budget, a data service) is the same on any
    network, and the small one traces in a fraction of D0's time (the pages' fine-tunes of
    the released D0 train D0 itself)."""
    if not command.startswith("efficientdet-train --demo "):
        return command
    if "--hparams=" not in command:
        return command + " --hparams=" + SMALL_DEMO_HPARAMS
    return re.sub(r"--hparams=(\S+)", lambda m: "--hparams=%s,%s" % (m.group(1),
                                                                     SMALL_DEMO_HPARAMS),
                  command, count=1)


@pytest.mark.quick
def test_demo_trainings_keep_their_settings_and_take_the_small_network():
    demo = [c for c in [c for _, _, c in RUN_COMMANDS] + EXAMPLE_COMMANDS
            if c.startswith("efficientdet-train --demo ")]
    assert len(demo) >= 3
    small_settings = SMALL_DEMO_HPARAMS.split(",")
    for command in demo:
        hparams = re.findall(r"--hparams=(\S+)", on_the_small_network(command))
        assert len(hparams) == 1
        settings = hparams[0].split(",")
        assert settings[-len(small_settings):] == small_settings
        written = re.findall(r"--hparams=(\S+)", command)
        assert settings[:-len(small_settings)] == (written[0].split(",") if written else [])
    assert on_the_small_network("efficientdet-train --data=mydata") == \
        "efficientdet-train --data=mydata"


def _run_command(command, cwd):
    result = subprocess.run(["bash", "-c", command], cwd=cwd, env=command_environment(), capture_output=True,
                            text=True, timeout=900)
    assert result.returncode == 0, "%s\nexited %d:\n%s" % (command, result.returncode,
                                                          result.stderr[-4000:])
    assert "Traceback" not in result.stderr, result.stderr[-4000:]
    return result


def test_worked_example_json_is_the_layout_the_loader_reads(project, tmp_path):
    """The example COCO JSON is valid and loads, with the ids and classes it shows."""
    from efficientdet_keras.data.formats.coco_records import load_coco_records
    example = [b for b in EXAMPLE_BLOCKS if b.language == "json"]
    assert len(example) == 1
    (tmp_path / "data.json").write_text(example[0].code)
    shutil.copy(os.path.join(project, "mydata", "images", "000001.jpg"), tmp_path / "1.jpg")
    records = load_coco_records(str(tmp_path / "data.json"), str(tmp_path))
    assert [r.image_id for r in records] == [1] and records[0].classes.tolist() == [3]
    # [x, y, w, h] -> [ymin, xmin, ymax, xmax]
    assert records[0].boxes.tolist() == [[40.5, 12.0, 92.5, 72.0]]


def run_dir_patterns():
    """The names (glob patterns) the worked example's run-directory listing explains."""
    listing = [b for b in EXAMPLE_BLOCKS if b.language == "text"]
    assert len(listing) == 1, "the worked example should list the run directory's files"
    return [line.split()[0].rstrip("/") for line in listing[0].code.splitlines()
            if line.strip() and not line.startswith(" ")]


def worked_example_runs_as_written(sandbox):
    """Runs the example's commands in order and checks that the run directory holds only
    files the guide explains, and every one it promises."""
    commands = [c for c in EXAMPLE_COMMANDS if not any(c.startswith(e) for e in EXEMPT)]
    assert commands
    outputs = [_run_command(on_the_small_network(command), sandbox).stdout
               for command in commands]
    assert any("Best checkpoint" in out for out in outputs)

    run_dir = os.path.join(sandbox, "runs", "mydata")
    patterns = run_dir_patterns()
    present = os.listdir(run_dir)
    unexplained = [n for n in present if not any(fnmatch.fnmatch(n, p) for p in patterns)]
    assert not unexplained, "files the guide does not explain: %s" % unexplained
    missing = [p for p in patterns if not fnmatch.filter(present, p)]
    assert not missing, "files the guide promises but the run lacks: %s" % missing
    with open(os.path.join(run_dir, "coco_metrics.json")) as f:
        assert sorted(json.load(f), key=int) == ["1", "2", "3"]
    exported = os.path.join(sandbox, "exported", "mydata")
    assert os.path.isfile(os.path.join(exported, "saved_model.pb"))
    with open(os.path.join(exported, "label_map.json")) as f:
        assert json.load(f) == {"1": "circle", "2": "square", "3": "triangle", "4": "cross"}
    with open(os.path.join(exported, "classes.json")) as f:
        assert [c["name"] for c in json.load(f)["classes"]] == [
            "circle", "square", "triangle", "cross"]


@pytest.mark.quick
def test_exemptions_name_readme_commands():
    """Each exemption matches a command of the pages, so the list cannot go stale."""
    assert len(EXEMPT) >= 10  # The contributing page's table was found and read.
    for start in EXEMPT:
        assert any(c.startswith(start) for c in [c for _, _, c in COMMANDS] + EXAMPLE_COMMANDS), \
            start


def page_runs_as_written(block, index, command, sandbox, page_namespaces, monkeypatch):
    """A page's snippets and commands, one after another as the page has them."""
    monkeypatch.chdir(sandbox)
    if command is None:
        _run_python_snippet(block, sandbox, page_namespaces)
    else:
        result = _run_command(on_the_small_network(command), sandbox)
        assert result.stdout.strip() or result.stderr.strip()


def page_test_class(page):
    """The tests of one page: a class, so that one worker runs them, in the page's order
    (scheduling.py). The worked example comes first on its page: later steps use its run."""
    steps = [pytest.param(block, index, command, id="line%d%s" % (
        block.line, "" if index is None else "-%d" % index))
        for block, index, command in STEPS if block.page == page]
    def test_worked_example_runs_as_written(self, sandbox):
        worked_example_runs_as_written(sandbox)

    @pytest.mark.parametrize("block, index, command", steps)
    def test_runs_as_written(self, block, index, command, sandbox, page_namespaces, monkeypatch):
        page_runs_as_written(block, index, command, sandbox, page_namespaces, monkeypatch)

    methods = {"page": page}
    if page == WORKED_EXAMPLE[0]:
        methods["test_worked_example_runs_as_written"] = test_worked_example_runs_as_written
    methods["test_runs_as_written"] = test_runs_as_written
    name = "Test" + "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]+",
                                                                    page[:-len(".md")]))
    return name, type(name, (), methods)


for _page in dict.fromkeys(block.page for block, _, _ in STEPS):
    _name, _cls = page_test_class(_page)
    globals()[_name] = _cls


@pytest.mark.quick
def test_readme_links_lead_to_files():
    """The front page is read outside the site (on a code host, in the package metadata), so
    its links are plain file paths; each must exist."""
    with open(os.path.join(REPO_ROOT, "README.md")) as f:
        targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", f.read())
    assert targets
    missing = [t for t in targets if not t.startswith("http")
               and not os.path.exists(os.path.join(REPO_ROOT, t))]
    assert not missing, missing
