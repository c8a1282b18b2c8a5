import json
import os
import re
import subprocess

import numpy as np
import pytest
import tensorflow as tf

from helpers import REPO_ROOT, SMALL_NETWORK, python, tiny_config
from efficientdet_keras import EfficientDetNet, restore_ckpt, save_ckpt
from efficientdet_keras.checkpoint import variable_name
from efficientdet_keras.data.augmentation.augment import resize_crop_pad
from efficientdet_keras.data.synthetic import write_synthetic_dataset
from efficientdet_keras.exporters.saved_model import export_detector
from efficientdet_keras.detection.postprocess import postprocess_detections

SMALL = dict(SMALL_NETWORK, image_size=64, num_classes=4,
             backbone_survival_prob=1.0)  # No random drop-connect.


def tool(name):
    return os.path.join(REPO_ROOT, "tools", name + ".py")


def run(args, timeout=600):
    return subprocess.run([python(), *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A small model dir (config.yaml + ckpt-1 with EMA values) and synthetic data."""
    root = tmp_path_factory.mktemp("export")
    data = write_synthetic_dataset(str(root / "data"), num_train=16, num_val=4, image_size=64,
                                   seed=9)
    config = tiny_config(**SMALL, label_map=data.label_map)
    model_dir = root / "model"
    model_dir.mkdir()
    config.save_yaml(str(model_dir))
    model = EfficientDetNet(config=config)
    model.build_variables()
    ema = {variable_name(v): v.numpy() * 0.9 for v in model.variables}
    save_ckpt(model, str(model_dir / "ckpt-1"), ema_values=ema)
    return root, model_dir, data, config


def test_hub_module_fine_tunes_through_the_cli(trained):
    root, model_dir, data, config = trained
    hub_dir = root / "hub"
    result = run([tool("export"), "--model_dir=%s" % model_dir, "--format=hub",
                  "--export_dir=%s" % hub_dir])
    assert result.returncode == 0, result.stderr[-3000:]

    # The module and the full model with the same (EMA) weights give the same features.
    import tensorflow_hub as hub
    model = EfficientDetNet(config=config)
    restore_ckpt(model, str(model_dir), use_ema=True)
    layer = hub.KerasLayer(str(hub_dir), trainable=True)
    images = tf.random.uniform([2, 64, 96, 3], -2, 2)
    for training in (False, True):
        got = layer(images, training=training)
        expected = model.head_features(images, training=training)
        for a, b in zip(tf.nest.flatten(got), tf.nest.flatten(expected)):
            np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-4)

    run_dir = root / "finetune"
    result = run([tool("train"), "--mode=traineval", "--model_dir=%s" % run_dir,
                  "--hub_module_url=file://%s" % hub_dir,
                  "--train_file_pattern=%s" % data.train_tfrecord,
                  "--val_file_pattern=%s" % data.val_tfrecord, "--val_json_file=%s" % data.val_json,
                  "--hparams=image_size=64,num_classes=5,fpn_num_filters=16,map_freq=1,"
                  "learning_rate=0.2",
                  "--batch_size=4", "--num_examples_per_epoch=16", "--num_epochs=3",
                  "--tf_random_seed=3"])
    assert result.returncode == 0, result.stderr[-3000:]
    # The loss on the (fixed) validation images falls; epoch means of 4 augmented
    # training batches are too noisy to compare.
    losses = [float(x) for x in re.findall(r" - val_det_loss: ([0-9.]+)", result.stdout)]
    assert len(losses) == 3 and losses[-1] < losses[0], result.stdout[-3000:]
    metrics = json.loads((run_dir / "coco_metrics.json").read_text())
    assert "AP" in metrics["3"]
    # New heads for 5 classes, named like the full model's; the module's weights moved.
    reader = tf.train.load_checkpoint(str(run_dir / "ckpt-3"))
    assert reader.get_variable_to_shape_map()["class_net/class-predict/bias"] == [9 * 5]
    original = tf.train.load_checkpoint(str(model_dir / "ckpt-1"))
    name = "efficientnet-b0/stem/conv2d/kernel"
    assert name in reader.get_variable_to_shape_map()
    assert not np.allclose(reader.get_tensor(name),
                           original.get_tensor(name + "/ExponentialMovingAverage"))


def test_bad_hub_modules_are_clear_errors(trained, tmp_path):
    root, model_dir, data, config = trained
    from efficientdet_keras.training.hub_trainer import EfficientDetNetTrainHub
    detector = export_detector(EfficientDetNet(config=config), str(tmp_path / "detector"))
    # Not callable, its signatures return detections: a finished detector, refused in words.
    with pytest.raises(ValueError, match="^%s is a detector, not features: it returns finished "
                       "detections, which cannot be fine-tuned; fine-tune the released "
                       "checkpoint --pretrained_ckpt=efficientdet-d0 instead$"
                       % re.escape(detector)):
        EfficientDetNetTrainHub(config, detector)

    class OneOutput(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, None, None, 3], tf.float32)])
        def __call__(self, images):
            return images * 2.0

    wrong = str(tmp_path / "wrong")
    tf.saved_model.save(OneOutput(), wrong)
    with pytest.raises(ValueError, match="(?s)%s must return .class_features, box_features.*5 "
                       "feature maps" % re.escape(wrong)):
        EfficientDetNetTrainHub(config, "file://" + wrong)
    with pytest.raises(ValueError, match="Cannot load TF-Hub module /no/such/module"):
        EfficientDetNetTrainHub(config, "/no/such/module")


def test_detection_saved_model_matches_the_model(trained, tmp_path):
    root, model_dir, data, config = trained
    export_dir = tmp_path / "served"
    result = run([tool("export"), "--model_dir=%s" % model_dir, "--export_dir=%s" % export_dir,
                  "--hparams=nms_configs.method=hard"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((export_dir / "label_map.json").read_text())["1"] == "circle"

    config = config.copy()
    config.nms_configs.method = "hard"
    model = EfficientDetNet(config=config)
    restore_ckpt(model, str(model_dir))  # EMA values, as exported.
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, [2, 48, 80, 3], dtype=np.uint8)
    prepared, scales = [], []
    for image in images:
        resized, _, scale, _ = resize_crop_pad(
            image, tf.zeros([0, 4]), (64, 64),
            normalize=lambda x: (x - config.mean_rgb) / np.array(config.stddev_rgb, np.float32))
        prepared.append(resized)
        scales.append(scale)
    class_outputs, box_outputs = model(tf.stack(prepared))
    expected = postprocess_detections(config, class_outputs, box_outputs, tf.stack(scales))
    expected_boxes = expected.boxes.numpy() / np.array([48, 80, 48, 80], np.float32)

    loaded = tf.saved_model.load(str(export_dir))
    png = [tf.io.encode_png(image).numpy() for image in images]
    examples = [tf.train.Example(features=tf.train.Features(feature={
        "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[p]))}))
        .SerializeToString() for p in png]
    outputs = [loaded.signatures["serving_default"](images=tf.constant(images)),
               loaded.signatures["image_bytes"](images=tf.constant(png)),
               loaded.signatures["tf_example"](examples=tf.constant(examples))]
    for out in outputs:
        np.testing.assert_allclose(out["num_detections"], expected.valid.numpy())
        np.testing.assert_allclose(out["detection_scores"], expected.scores, atol=1e-5)
        np.testing.assert_allclose(out["detection_boxes"], expected_boxes, atol=1e-4)
        np.testing.assert_array_equal(out["detection_classes"], expected.classes.numpy())

    # The inference tool on the same SavedModel.
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    for i, p in enumerate(png):
        (inputs / ("img%d.png" % i)).write_bytes(p)
    (inputs / "notes.txt").write_text("not an image")
    out_dir = tmp_path / "infer"
    result = run([tool("infer"), "--saved_model_dir=%s" % export_dir, "--input=%s" % inputs,
                  "--output_dir=%s" % out_dir, "--score_threshold=0", "--max_boxes=3"])
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((out_dir / "detections.json").read_text())
    assert sorted(report) == ["img0.png", "img1.png"]
    first = report["img0.png"]
    assert len(first) == 3 and first[0]["score"] == pytest.approx(float(expected.scores[0, 0]), abs=1e-3)
    assert first[0]["name"] in ("circle", "square", "triangle", "cross")
    assert (out_dir / "img0.png").exists() and (out_dir / "img1.png").exists()


@pytest.mark.quick
def test_the_three_signatures_share_one_trace_and_keep_their_gradients(tmp_path, monkeypatch,
                                                                       caplog):
    """Network and NMS are traced once for the three signatures (each used to trace its own
    copy), and the SavedModel loads without TensorFlow's warning about missing gradients."""
    from efficientdet_keras.inference import serving_graph
    traces = []
    traced_detect = serving_graph.detect
    monkeypatch.setattr(serving_graph, "detect",
                        lambda *args: traces.append(1) or traced_detect(*args))
    model = EfficientDetNet(config=tiny_config(**SMALL))
    export_dir = export_detector(model, str(tmp_path / "served"))
    assert len(traces) == 1
    with caplog.at_level("WARNING"):
        loaded = tf.saved_model.load(export_dir)
    assert sorted(loaded.signatures) == ["image_bytes", "serving_default", "tf_example"]
    assert not [r for r in caplog.records if "gradient" in r.getMessage()], caplog.text


@pytest.mark.quick
def test_saved_model_of_a_stretch_trained_model_stretches(tmp_path):
    """The serving graph fits images as the model was trained: with resize_mode stretch each
    axis alone, and the boxes come back per axis, normalised to the original image."""
    from efficientdet_keras.detection.postprocess import postprocess_detections
    from efficientdet_keras.inference.serving_graph import DetectionModule
    config = tiny_config(image_size=64, num_classes=3, resize_mode="stretch")
    model = EfficientDetNet(config=config)
    model.build_variables()
    image = np.random.RandomState(0).randint(0, 256, [1, 40, 96, 3]).astype(np.uint8)
    module = DetectionModule(model, config)  # Held: its tf.functions refer to it weakly.
    found = module.detect_images(tf.constant(image))
    stretched = tf.image.resize(tf.cast(image, tf.float32), (64, 64))
    outputs = model((stretched - config.mean_rgb) / config.stddev_rgb, training=False)
    expected = postprocess_detections(config, *outputs)  # Input pixels of the 64x64 input.
    count = int(found["num_detections"][0])
    assert count == int(expected.valid[0]) > 0
    np.testing.assert_allclose(found["detection_boxes"][0, :count],
                               expected.boxes[0, :count] / 64.0, atol=1e-4)
