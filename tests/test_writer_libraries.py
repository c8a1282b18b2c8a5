"""`open_dataset` against the libraries users export datasets with: one small COCO dataset is
written by supervision, datumaro (CVAT's exporter), globox, labelme, labelformat, Label
Studio's converter, FiftyOne and pylabel themselves, in every box layout each writes (tests/writers/write_layouts.py, run in their own environment,
.venv-writers, which `make test` builds), and each result is read back: the source's
classes and boxes, or one line for a layout the data guide says is not read."""

import json
import os
import subprocess

import pytest

import dataset_layouts
from helpers import REPO_ROOT
from efficientdet_keras.data.datasets import open_dataset

pytestmark = pytest.mark.quick

WRITERS_PYTHON = os.environ.get("EFFICIENTDET_WRITERS_PYTHON",
                                os.path.join(REPO_ROOT, ".venv-writers", "bin", "python"))
WRITE_LAYOUTS = os.path.join(REPO_ROOT, "tests", "writers", "write_layouts.py")

# Each export the package reads, and the format it is read as.
READ = {
    "supervision-coco": "roboflow", "supervision-pascal_voc": "voc",
    "supervision-yolo": "yolo", "supervision-labelme": "labelme",
    "datumaro-coco": "coco", "datumaro-coco_instances": "coco", "datumaro-voc": "voc",
    "datumaro-voc_detection": "voc", "datumaro-voc_layout": "voc", "datumaro-voc_action": "voc",
    "datumaro-voc_instance_segmentation": "voc", "datumaro-yolo": "yolo",
    "datumaro-yolo_ultralytics": "yolo", "datumaro-cvat": "cvat",
    "datumaro-open_images": "open_images",
    "globox-coco": "coco", "globox-pascal_voc": "voc", "globox-yolo_darknet": "yolo",
    "globox-yolo_v5": "yolo", "globox-labelme": "labelme", "globox-cvat": "cvat",
    "globox-openimage": "open_images",
    "labelme-json": "labelme", "labelme-json_imagedata": "labelme",
    "labelformat-coco": "coco", "labelformat-pascalvoc": "voc", "labelformat-yolov8": "yolo",
    "labelformat-cvat": "cvat",
    "label_studio-coco": "coco", "label_studio-voc": "voc", "label_studio-yolo": "yolo",
    "fiftyone-coco": "coco", "fiftyone-voc": "voc", "fiftyone-yolov5": "yolo",
    "datumaro-kitti": "kitti", "datumaro-kitti_detection": "kitti", "labelformat-kitti": "kitti",
    "fiftyone-kitti": "kitti", "globox-yolo_darknet_bare": "yolo",
    "label_studio-json": "label_studio", "label_studio-json_min": "label_studio",
    "supervision-createml": "createml", "globox-via_json": "via", "globox-cvat_beside": "cvat",
    "pylabel-voc": "voc", "pylabel-yolov5": "yolo", "pylabel-coco": "coco",
    "fiftyone-tfrecords": "tfrecord", "datumaro-tf_detection_api": "tfrecord",
}
# Exports without the class names (globox's YOLO writes no classes.txt): the classes are
# named by their ids, the source's classes in category id order.
NAMED_BY_ID = {"globox-yolo_darknet_bare"}
# Exports of one split (a Label Studio project; labelformat's one split per run; FiftyOne's
# export of one view), and which.
ONE_SPLIT = {"label_studio-json": "train", "label_studio-json_min": "train",
             "label_studio-coco": "train", "label_studio-voc": "train",
             "label_studio-yolo": "train", "labelformat-pascalvoc": "train",
             "labelformat-cvat": "train", "labelformat-yolov8": "val",
             "fiftyone-coco": "train", "fiftyone-voc": "train", "fiftyone-yolov5": "val",
             "labelformat-kitti": "train", "fiftyone-kitti": "train", "pylabel-voc": "train",
             "pylabel-coco": "train", "fiftyone-tfrecords": "train"}
# Exports whose val split lists the training images (pylabel's dataset.yaml names its one
# images folder as both), read as written, with describe()'s warning.
VAL_IS_TRAIN = {"pylabel-yolov5"}
# Each export the data guide says is not read, and the start of its one-line refusal.
NOT_READ = {
    "datumaro-datumaro": "is datumaro's own format",
    **{name: "holds no dataset this package reads" for name in (
        "datumaro-datumaro_binary", "datumaro-arrow",
        "datumaro-label_me",
        "datumaro-mot_seq_gt", "datumaro-wider_face", "datumaro-ava",
        "datumaro-icdar_text_localization", "datumaro-mvtec_detection", "globox-txt", "labelformat-lightly", "label_studio-csv")},
}
# Pixels: the YOLO and Open Images layouts store fractions with 5 or more decimals.
TOLERANCE = 0.01


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """(the source's truth, {export: its folder}, the writer script's report)."""
    if not os.path.exists(WRITERS_PYTHON):
        pytest.skip("the writers' environment %s is not there (`make test` builds it from "
                    "tests/writers/requirements.txt)" % WRITERS_PYTHON)
    root = tmp_path_factory.mktemp("writers")
    truth = dataset_layouts.write_writer_source(str(root / "source"))
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    env.pop("PYTHONPATH", None)
    command = subprocess.run([WRITERS_PYTHON, WRITE_LAYOUTS, str(root / "source"),
                              str(root / "out")], capture_output=True, text=True, env=env,
                             timeout=600)
    assert command.returncode == 0, command.stderr[-3000:]
    report = json.loads(command.stdout)
    return truth, {name: str(root / "out" / name) for name in report}, report


def test_every_export_is_written_and_classified(written):
    _, _, report = written
    failed = {name: r["error"] for name, r in report.items() if not r["ok"]}
    assert not failed
    # A layout a writer gains must be classified here (read, or said not to be).
    assert set(report) == set(READ) | set(NOT_READ)


@pytest.mark.parametrize("export", sorted(READ))
def test_each_layout_is_read_box_for_box(written, export):
    truth, folders, _ = written
    dataset = open_dataset(folders[export])
    assert dataset.format == READ[export]
    names = dict(dataset.classes.names)
    if export in NAMED_BY_ID:
        assert sorted(names.values()) == [str(i) for i in range(len(dataset_layouts.NAMES))]
        assert "no classes.txt or obj.names or data.yaml names the classes" in dataset.describe()
        names = {k: dataset_layouts.NAMES[int(name)] for k, name in names.items()}
    assert sorted(names.values()) == sorted(dataset_layouts.NAMES)
    splits = [ONE_SPLIT[export]] if export in ONE_SPLIT else ["train", "val"]
    assert list(dataset.splits) == splits
    if export in VAL_IS_TRAIN:
        assert "warning: the val split is the train split" in dataset.describe()
    for split in splits:
        read = {name: sorted((names[int(c)], box) for c, box in objects)
                for name, objects in read_boxes(dataset, split).items()}
        written_split = "train" if export in VAL_IS_TRAIN else split
        expected = {name: sorted(boxes) for name, boxes in truth[written_split].items()}
        assert set(read) == set(expected), split
        for name, boxes in expected.items():
            assert [c for c, _ in read[name]] == [c for c, _ in boxes], name
            assert read[name] and max(abs(a - b) for (_, got), (_, box) in zip(read[name], boxes)
                                      for a, b in zip(got, box)) <= TOLERANCE, (name, read[name])


def read_boxes(dataset, split):
    """{image file name: [(class id, [ymin, xmin, ymax, xmax] pixels)]} of a split: its
    records' (whose images must be on disk), or what its TFRecords hold."""
    records = dataset.split(split).records
    if records is not None:
        assert all(os.path.isfile(record.path) for record in records)
        return {os.path.basename(r.path): [(c, [float(v) for v in box])
                                           for c, box in zip(r.classes, r.boxes)]
                for r in records}
    read = {}
    for raw in dataset.source(split).raw_dataset(None, False, None):
        size = [float(raw["height"]), float(raw["width"])] * 2
        read[os.path.basename(raw["filename"].numpy().decode())] = [
            (c, [float(v) * s for v, s in zip(box, size)])
            for c, box in zip(raw["classes"].numpy(), raw["boxes"].numpy())]
    return read


@pytest.mark.parametrize("export", sorted(NOT_READ))
def test_each_layout_not_read_is_refused_in_one_line(written, export):
    _, folders, _ = written
    with pytest.raises(ValueError) as refusal:
        open_dataset(folders[export])
    message = str(refusal.value)
    assert NOT_READ[export] in message and "\n" not in message
