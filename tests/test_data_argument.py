"""`--data` on the command-line tools: one argument names a dataset in any layout, its classes
reach the run, and the TFRecords written from it read back as a dataset."""

import json
import os
import subprocess

import pytest
import yaml

import dataset_layouts
from helpers import REPO_ROOT, SMALL_NETWORK_HPARAMS, python
from efficientdet_keras.data.datasets import open_dataset

TOOLS = os.path.join(REPO_ROOT, "tools")
SMALL = SMALL_NETWORK_HPARAMS + ",image_size=64,jitter_min=1.0,jitter_max=1.0"


def run_tool(tool, *args, timeout=600):
    return subprocess.run([python(), os.path.join(TOOLS, tool), *args], capture_output=True,
                          text=True, timeout=timeout)


def test_train_on_a_roboflow_export_takes_classes_and_names_from_the_data(tmp_path):
    data = str(tmp_path / "pets")
    dataset_layouts.write_roboflow(data)
    model_dir = tmp_path / "run"
    result = run_tool("train.py", "--data=" + data, "--model_dir=%s" % model_dir,
                      "--hparams=" + SMALL, "--batch_size=4", "--num_epochs=1",
                      "--eval_images=0", "--tf_random_seed=1")
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[0] == "Data: %s, COCO JSON (Roboflow layout)" % data
    assert " ".join(lines[1].split()).startswith("train 8 images, 8 boxes")
    assert " ".join(lines[2].split()).startswith("val 4 images, 4 boxes")
    assert "classes 2 (widget, gadget)" in lines[3]
    assert "left out the root category 'widgets-xyz'" in lines[4]
    # The per-class AP of the evaluation is by the data's names.
    assert "per-class AP:" in result.stdout
    assert any(line.split()[:1] == ["widget"] for line in lines)
    assert any(line.split()[:1] == ["gadget"] for line in lines)
    config = yaml.safe_load((model_dir / "config.yaml").read_text())
    assert config["num_classes"] == 2
    assert config["label_map"] == {1: "widget", 2: "gadget"}
    classes = json.loads((model_dir / "classes.json").read_text())
    assert classes["format"] == "roboflow" and classes["left_out"] == "widgets-xyz"
    assert classes["classes"] == [{"id": 1, "name": "widget", "data_id": 1},
                                  {"id": 2, "name": "gadget", "data_id": 2}]
    truth = json.loads((model_dir / "val_ground_truth.json").read_text())
    assert len(truth["images"]) == 4 and len(truth["annotations"]) == 4
    matrix = (model_dir / "confusion_matrix" / "epoch-1.csv").read_text().splitlines()
    assert matrix[0].split(",")[1:] == ["widget", "gadget", "background"]
    # The .tflite label file comes from the run's config: the data's names, in id order.
    from efficientdet_keras.config import Config
    from efficientdet_keras.exporters.tflite_metadata import label_lines
    assert label_lines(Config.from_yaml(str(model_dir / "config.yaml"))) == ["widget", "gadget"]
    # The SavedModel carries the names and, beside them, the mapping back to the data's ids.
    export_dir = tmp_path / "exported"
    export = run_tool("export.py", "--model_dir=%s" % model_dir, "--export_dir=%s" % export_dir)
    assert export.returncode == 0, export.stderr[-3000:]
    assert json.loads((export_dir / "label_map.json").read_text()) == {"1": "widget",
                                                                       "2": "gadget"}
    assert json.loads((export_dir / "classes.json").read_text()) == classes

    # efficientdet-eval reads the same folder: its val split, scored with the data's names.
    evaluation = run_tool("eval.py", "--model_dir=%s" % model_dir, "--data=" + data,
                          "--progress=false")
    assert evaluation.returncode == 0, evaluation.stderr[-3000:]
    assert evaluation.stdout.startswith("Data: %s, COCO JSON (Roboflow layout)" % data)
    rows = [line.split()[0] for line in evaluation.stdout.splitlines() if line.startswith("  ")]
    assert "widget" in rows and "gadget" in rows
    assert (model_dir / "confusion_matrix" / "ckpt-1.csv").exists()


LAYOUTS = [("write_coco_folder", "COCO JSON", [1, 2]),
           ("write_yolo", "YOLO", [0, 1]),
           ("write_voc", "Pascal VOC", ["gadget", "widget"])]  # Names in sorted order.


@pytest.mark.parametrize("layout,found,data_ids", LAYOUTS)
def test_each_layout_gives_the_run_its_classes(tmp_path, layout, found, data_ids):
    """What a training run takes from the data, in process: the classes into the config and
    classes.json, each model id with the data's own (the command below trains on one)."""
    from efficientdet_keras import get_efficientdet_config
    from efficientdet_keras.workflows.train_data import DataSpec, find_training_data
    data = str(tmp_path / "pets")
    getattr(dataset_layouts, layout)(data, train=4, val=2)
    config = get_efficientdet_config("efficientdet-d0")
    reported = []
    sources = find_training_data(DataSpec(data=data), config, str(tmp_path), evaluate=False,
                                 report=reported.append)
    assert reported[0].splitlines()[0].endswith(", " + found)
    assert sources.train is not None and sources.val is None
    assert config.num_classes == 2 and sorted(config.label_map.values()) == ["gadget", "widget"]
    classes = json.loads((tmp_path / "classes.json").read_text())["classes"]
    assert [c["id"] for c in classes] == [1, 2]
    assert [c["data_id"] for c in classes] == data_ids


def test_one_command_trains_on_a_layout_by_its_folder_alone(tmp_path):
    data = str(tmp_path / "pets")
    dataset_layouts.write_yolo(data, train=4, val=2)  # 0-based ids: the mapping matters.
    model_dir = tmp_path / "run"
    result = run_tool("train.py", "--data=" + data, "--model_dir=%s" % model_dir,
                      "--mode=train", "--hparams=" + SMALL, "--batch_size=2",
                      "--num_epochs=1", "--tf_random_seed=1")
    assert result.returncode == 0, result.stderr[-3000:]
    first = result.stdout.splitlines()[0]  # YOLO names its data.yaml.
    assert first.startswith("Data: %s" % data) and first.endswith(", YOLO")
    assert (model_dir / "ckpt-1.index").exists()
    config = yaml.safe_load((model_dir / "config.yaml").read_text())
    assert config["num_classes"] == 2
    assert sorted(config["label_map"].values()) == ["gadget", "widget"]
    classes = json.loads((model_dir / "classes.json").read_text())["classes"]
    assert [(c["id"], c["data_id"]) for c in classes] == [(1, 0), (2, 1)]


@pytest.mark.quick
@pytest.mark.parametrize("extra,message", [
    (["--train_json=x.json"], "--data names the whole dataset; drop --train_json"),
    (["--hparams=num_classes=1"], "the data has 2 class ids but num_classes is 1: the boxes of "
                                  "gadget would be dropped"),
])
def test_data_flag_mistakes_stop_with_one_line(tmp_path, extra, message):
    data = str(tmp_path / "pets")
    dataset_layouts.write_coco_folder(data, train=2, val=2)
    result = run_tool("train.py", "--data=" + data, "--model_dir=%s" % (tmp_path / "run"),
                      *extra)
    assert result.returncode != 0
    assert message in result.stderr.strip().splitlines()[-1]


@pytest.mark.quick
def test_training_with_evaluation_on_data_without_a_validation_split_stops_with_one_line(
        tmp_path):
    data = str(tmp_path / "labels.json")
    dataset_layouts.write_coco_json(data, str(tmp_path), 2, (1, 2))
    result = run_tool("train.py", "--data=" + data, "--model_dir=%s" % (tmp_path / "run"))
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1].endswith(
        "labels.json has no val or test split to evaluate on; name a split, train without "
        "evaluation (--mode=train), or add one")


def test_a_dataset_converted_to_tfrecords_reads_back_and_checks(tmp_path, capsys):
    """convert (efficientdet-create-tfrecord's workflow) writes every split of a folder with
    its ground truth and class names; check_data (efficientdet-check-data's) reads them back."""
    from efficientdet_keras import check_data, convert
    data = str(tmp_path / "VOC")
    dataset_layouts.write_voc(data, train=4, val=2)
    prefix = str(tmp_path / "records" / "pets")
    result = convert(prefix, data=data)
    printed = capsys.readouterr().out
    assert "Wrote 4 images (4 objects) to 1 shard(s) %s-train" % prefix in printed
    assert "Wrote 2 images (2 objects) to 1 shard(s) %s-val" % prefix in printed
    assert (result.images_written, result.objects_written, result.images_skipped) == (6, 6, 0)
    assert result.shards == {prefix + "-train": [prefix + "-train-00000-of-00001.tfrecord"],
                             prefix + "-val": [prefix + "-val-00000-of-00001.tfrecord"]}
    assert sorted(os.listdir(tmp_path / "records")) == [
        "label_map.json", "pets-train-00000-of-00001.tfrecord", "pets-train.json",
        "pets-val-00000-of-00001.tfrecord", "pets-val.json"]
    assert result.label_map_file == str(tmp_path / "records" / "label_map.json")

    converted = open_dataset(str(tmp_path / "records"))
    assert converted.format == "tfrecord"
    assert converted.classes.names == {1: "gadget", 2: "widget"}
    truth = converted.ground_truth("val")
    original = open_dataset(data).ground_truth("val")
    assert [a["bbox"] for a in truth["annotations"]] == [a["bbox"] for a in original["annotations"]]

    lines = []
    check = check_data(data=str(tmp_path / "records"), split="val",
                       output_json=str(tmp_path / "check.json"), report=lines.append)
    assert lines[0].startswith("Data: %s, TFRecord" % (tmp_path / "records"))
    assert check.numbers == str(tmp_path / "check.json") and check.chart is None
    numbers = json.loads((tmp_path / "check.json").read_text())
    assert numbers == check.summary and numbers["images"] == 2
    assert [(c["name"], c["boxes"]) for c in numbers["classes"]] == [("gadget", 1), ("widget", 1)]


@pytest.mark.quick
def test_a_folder_of_two_datasets_stops_with_one_line_and_data_layout_picks_one(tmp_path):
    """A YOLO and a COCO export in one folder: every tool's --data group has --data_layout."""
    data = str(tmp_path / "both")
    dataset_layouts.write_yolo(data, train=2, val=1)
    dataset_layouts.write_coco_folder(data, train=2, val=1)
    tool = os.path.join(TOOLS, "check_data.py")
    runs = [subprocess.Popen([python(), tool, "--data=" + data, "--output_png=", *extra],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for extra in ([], ["--data_layout=coco"])]
    (_, refused), (picked, err) = [run.communicate(timeout=300) for run in runs]
    assert runs[0].returncode != 0
    assert refused.strip().splitlines()[-1].endswith(
        "holds two datasets: YOLO (data.yaml) and COCO JSON (annotations/instances_train.json, "
        "annotations/instances_val.json); name the one to read with --data_layout=yolo or "
        "--data_layout=coco (open_dataset(path, layout=...))")
    assert runs[1].returncode == 0, err[-3000:]
    assert picked.startswith("Data: %s, COCO JSON" % data)
