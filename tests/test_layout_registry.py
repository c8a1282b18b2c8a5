"""The contract of every dataset layout in the registry: a sample of it, written as its tools
write it, is found as that layout (and as no layout before it), opens by name too, describes
itself under its title and reads back box for box; and the --data help, the refusal line and
the data guide's table are the registry's."""

import os

import pytest

from layout_samples import SAMPLES
from efficientdet_keras.data.datasets import open_dataset
from efficientdet_keras.data.layouts.registry import LAYOUTS, get_layout
from efficientdet_keras.data.split_names import split_name
from helpers import REPO_ROOT, docs_hook


def read_back(dataset, split):
    """{image file name: [(class name, box rounded to pixels)]} of a split as the input
    pipeline gets it (records and TFRecords alike)."""
    found = {}
    for raw in dataset.source(split).raw_dataset(None, False, None):
        boxes = raw["boxes"].numpy()
        if bool(raw["boxes_normalized"]):
            boxes = boxes * [raw["height"], raw["width"], raw["height"], raw["width"]]
        name = os.path.basename(raw["filename"].numpy().decode() or raw["path"].numpy().decode())
        found[name] = [(dataset.classes.names[int(c)], [round(float(v)) for v in box])
                       for c, box in zip(raw["classes"].numpy(), boxes)]
    return found


def test_every_layout_has_a_sample_and_a_name_of_its_own():
    names = [layout.name for layout in LAYOUTS]
    assert len(set(names)) == len(names)
    assert sorted(SAMPLES) == sorted(names), "write a sample of each new layout"
    for layout in LAYOUTS:
        assert layout.title and layout.writers and layout.recognised and layout.splits
        assert layout.sign


@pytest.mark.parametrize("name", [layout.name for layout in LAYOUTS])
def test_a_sample_of_each_layout_is_found_described_and_read_box_for_box(tmp_path, name):
    layout = get_layout(name)
    truth = SAMPLES[name](str(tmp_path))
    fits = [row.name for row in LAYOUTS if row.find(str(tmp_path)) is not None]
    assert fits[0] == name, "an earlier layout takes the sample: %s" % fits
    dataset = open_dataset(str(tmp_path))
    assert dataset.format == layout.data_format
    expected = {split_name(folder): boxes for folder, boxes in truth.items()}
    assert list(dataset.splits) == [s for s in ("train", "val", "test") if s in expected]
    described = dataset.describe().splitlines()
    assert described[0].startswith("Data: %s" % tmp_path)
    assert described[0].endswith(", " + layout.title)
    for split, boxes in expected.items():
        assert read_back(dataset, split) == {
            file: [(cls, list(box)) for cls, box in objects] for file, objects in boxes.items()}
        if dataset.split(split).records is not None:
            assert any(line.split()[:5] == [split, str(len(boxes)), "images,",
                                           str(sum(map(len, boxes.values()))), "boxes"]
                       for line in described), described
    by_name = open_dataset(str(tmp_path), layout=name)
    assert by_name.format == dataset.format and list(by_name.splits) == list(dataset.splits)


def test_a_layout_asked_for_that_is_not_there_is_one_line(tmp_path):
    SAMPLES["coco"](str(tmp_path))
    with pytest.raises(ValueError, match="does not hold Pascal VOC: looked for VOC's "
                                         "Annotations/ and ImageSets/Main/"):
        open_dataset(str(tmp_path), layout="voc")
    with pytest.raises(ValueError, match="unknown data layout 'pascal': choose from yolo, "):
        open_dataset(str(tmp_path), layout="pascal")


def test_the_refusal_and_the_data_help_name_every_layout(tmp_path):
    from efficientdet_keras.cli.flag_groups import data_help
    (tmp_path / "notes.txt").write_text("nothing here")
    with pytest.raises(ValueError) as refused:
        open_dataset(str(tmp_path))
    line = str(refused.value)
    assert line.startswith("%s holds no dataset this package reads: looked for " % tmp_path)
    assert "\n" not in line and all(layout.sign in line for layout in LAYOUTS)
    assert all(layout.title in data_help("") for layout in LAYOUTS)


def test_the_data_guide_table_is_the_registry_s():
    hook = docs_hook("layouts_table")
    with open(os.path.join(REPO_ROOT, "docs", hook.PAGE), encoding="utf-8") as f:
        page = f.read()
    assert hook.render_page(page) == page, "run make docs"
    for layout in LAYOUTS:
        assert "| `%s` | %s |" % (layout.name, layout.writers) in page


def test_two_datasets_in_one_folder_are_named_with_the_flag_that_picks_one(tmp_path):
    """A YOLO export and a COCO export side by side: taking either would be a guess."""
    SAMPLES["yolo"](str(tmp_path))
    coco = SAMPLES["coco"](str(tmp_path))
    with pytest.raises(ValueError) as refused:
        open_dataset(str(tmp_path))
    assert str(refused.value) == (
        "%s holds two datasets: YOLO (data.yaml) and COCO JSON (annotations/instances_train.json,"
        " annotations/instances_val.json); name the one to read with --data_layout=yolo or "
        "--data_layout=coco (open_dataset(path, layout=...))" % tmp_path)
    dataset = open_dataset(str(tmp_path), layout="coco")
    assert dataset.format == "coco" and read_back(dataset, "val") == {
        file: [(cls, list(box)) for cls, box in objects] for file, objects in coco["val"].items()}
    assert open_dataset(str(tmp_path), layout="yolo").format == "yolo"


def test_files_two_layouts_read_alike_are_one_dataset(tmp_path):
    """A VOC year folder's XMLs are VOC XMLs in a folder too, and TFRecords' ground truth is
    a COCO JSON beside them: one dataset each, read as the earlier layout."""
    SAMPLES["voc"](str(tmp_path / "voc"))
    assert open_dataset(str(tmp_path / "voc")).title == "Pascal VOC"
    from dataset_layouts import write_coco_json
    os.makedirs(tmp_path / "records")
    SAMPLES["tfrecord"](str(tmp_path / "records"))
    write_coco_json(str(tmp_path / "records" / "records-val.json"),
                    str(tmp_path / "records" / "images"), 1, (1, 2))
    dataset = open_dataset(str(tmp_path / "records"))
    assert dataset.format == "tfrecord"
    assert dataset.split("val").ground_truth_file.endswith("records-val.json")
