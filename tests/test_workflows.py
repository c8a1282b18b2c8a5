"""The Python verbs: train, evaluate and export a detector in one call each, in process, on a
YOLO dataset folder; the files they write run through the command-line tools' --model."""

import json
import os
import subprocess

import pytest

import dataset_layouts
from helpers import SMALL_NETWORK_HPARAMS, python
from efficientdet_keras import Detector, evaluate, export, train
from efficientdet_keras.checkpoint.archive import ARCHIVE_MONITOR

pytest.importorskip("onnxruntime", reason="onnxruntime (the onnx extra) is not installed")
pytest.importorskip("openvino", reason="openvino (the openvino extra) is not installed")

SMALL = SMALL_NETWORK_HPARAMS + (",image_size=64,jitter_min=1.0,jitter_max=1.0,batch_size=4,"
                                 "num_epochs=1,nms_configs.method=hard")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A run trained by `train` on a YOLO folder, and the folder."""
    root = tmp_path_factory.mktemp("workflows")
    data = str(root / "shapes")
    dataset_layouts.write_yolo(data)
    lines = []
    result = train(str(root / "run"), data=data, hparams=SMALL, seed=1, eval_images=0,
                   report=lines.append)
    return result, data, lines


def test_train_takes_the_datas_classes_and_returns_the_best_checkpoint(trained):
    result, data, lines = trained
    assert lines[0].startswith("Data: %s" % data)  # What it found, said before training.
    assert result.best_checkpoint and os.path.exists(result.best_checkpoint + ".index")
    assert result.best["epoch"] == result.last_epoch == 1
    assert result.best[ARCHIVE_MONITOR] == pytest.approx(result.last_metrics["AP"])
    assert "Best checkpoint: %s (epoch 1" % result.best_checkpoint in result.summary()
    with open(os.path.join(result.model_dir, "classes.json")) as f:
        classes = json.load(f)
    assert [c["name"] for c in classes["classes"]] == list(dataset_layouts.NAMES)


def test_train_again_resumes_the_finished_run(trained):
    result, data, _ = trained
    again = train(result.model_dir, data=data, hparams=SMALL, eval_images=0,
                  report=lambda line: None)
    assert again.best_checkpoint == result.best_checkpoint  # No epoch was added.
    assert again.last_epoch == 1 and again.last_metrics == result.last_metrics


def test_evaluate_scores_the_run_as_training_did(trained):
    result, data, _ = trained
    scored = evaluate(result.model_dir, data=data, progress=False)
    assert scored.metrics["AP"] == pytest.approx(result.last_metrics["AP"], abs=1e-4)
    assert scored.summary().splitlines()[0].startswith(scored.evaluated)


def test_other_layouts_of_the_same_data_score_the_run_the_same(trained, tmp_path):
    """The YOLO folder's images and boxes written as VOC (classes numbered by sorted name,
    the model's the other way round) and as COCO: the model's ids are matched by name, so
    every metric, per class too, is the YOLO folder's."""
    result, data, _ = trained
    on_yolo = evaluate(result.model_dir, data=data, progress=False).metrics
    assert on_yolo["ARmax100"] > 0 and on_yolo["AP_/widget"] != on_yolo["AP_/gadget"]
    dataset_layouts.write_voc(str(tmp_path / "voc"))
    dataset_layouts.write_coco_folder(str(tmp_path / "coco"))
    for layout in ("voc", "coco"):
        scored = evaluate(result.model_dir, data=str(tmp_path / layout), progress=False)
        assert scored.metrics == pytest.approx(on_yolo, abs=1e-6), layout


@pytest.mark.slow  # test_onnx, test_openvino and the docs' export commands keep export().
def test_export_writes_checks_and_runs_each_graph_file(trained, tmp_path):
    result, data, _ = trained
    checkpoint_ap = evaluate(result.model_dir, data=data, progress=False).metrics["AP"]
    for fmt, file_name in (("onnx", "model.onnx"), ("openvino", "model.xml")):
        exported = export(result.model_dir, fmt, str(tmp_path / fmt))
        assert exported.path == str(tmp_path / fmt / file_name)
        assert exported.parity and not exported.failed_checks, exported.summary()
        assert os.path.exists(tmp_path / fmt / "classes.json")  # The run's, copied beside it.
        # The file scores as the checkpoint does (hard NMS in both).
        file_ap = evaluate(exported.path, data=data, progress=False).metrics["AP"]
        assert file_ap == pytest.approx(checkpoint_ap, abs=0.02)
        # The infer command runs it from --model, as the Python Detector does.
        out = tmp_path / ("out-" + fmt)
        command = subprocess.run(
            [python(), "-m", "efficientdet_keras.cli.infer", "--model=%s" % exported.path,
             "--input=%s" % os.path.join(data, "images", "val"), "--output_dir=%s" % out,
             "--score_threshold=0.0"], capture_output=True, text=True, timeout=600)
        assert command.returncode == 0, command.stderr[-3000:]
        with open(out / "detections.json") as f:
            found = json.load(f)
        image = os.path.join(data, "images", "val", "img00.jpg")
        expected = Detector(exported.path).detect(image, score_threshold=0.0, max_detections=20)
        assert len(found["img00.jpg"]) == len(expected) > 0


def test_export_refuses_what_cannot_work_before_loading_a_model(tmp_path):
    with pytest.raises(ValueError, match="onnx takes precision float32, not 'int8'"):
        export("nowhere", "onnx", str(tmp_path), precision="int8")
    with pytest.raises(ValueError, match="openvino int8 needs calibration images"):
        export("nowhere", "openvino", str(tmp_path), precision="int8")
    with pytest.raises(ValueError, match="onnx_opset: ONNX opset must be 13 to 18"):
        export("nowhere", "onnx", str(tmp_path), onnx_opset=9)
    assert not os.listdir(tmp_path)


@pytest.mark.quick
def test_a_renamed_flag_still_works_and_names_its_new_name(tmp_path):
    command = subprocess.run(
        [python(), "-m", "efficientdet_keras.cli.export", "--model_dir=%s" % tmp_path,
         "--format=tflite", "--tflite_quantization=int8", "--export_dir=%s" % (tmp_path / "x")],
        capture_output=True, text=True, timeout=600)
    lines = command.stderr.strip().splitlines()
    assert command.returncode == 1 and "Traceback" not in command.stderr
    assert ("efficientdet-export: --tflite_quantization is now --precision (the old name still "
            "works)") in lines
    assert lines[-1].startswith("efficientdet-export: tflite int8 needs calibration images")
    both = subprocess.run(
        [python(), "-m", "efficientdet_keras.cli.eval", "--tflite=a.tflite", "--model=b.onnx",
         "--val_file_pattern=x"], capture_output=True, text=True, timeout=600)
    assert both.returncode == 1
    assert both.stderr.strip().splitlines()[-1] == (
        "efficientdet-eval: give one of --model, --tflite")
