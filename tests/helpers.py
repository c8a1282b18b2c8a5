"""What tests import besides pytest fixtures: repository paths, small model configs and
small on-disk datasets with known content.

Fixtures and hooks live in conftest.py; tests import everything else from here.
"""

import os

import numpy as np
import tensorflow as tf

from efficientdet_keras.data.records import ImageRecord
from efficientdet_keras.data.tf_example import record_to_tf_example

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REFERENCE_DIR = os.path.join(REPO_ROOT, "..", "shared", "reference")
HPARAMS_DIR = os.path.join(REPO_ROOT, "hparams")


def tiny_config(model_name: str = "efficientdet-d0", **overrides):
    """A full-architecture config at a small input size, for fast tests."""
    from efficientdet_keras import get_efficientdet_config
    config = get_efficientdet_config(model_name)
    config.override(dict(dict(image_size=128, num_classes=4), **overrides))
    return config


def bright_box_image(height, width, box, channels=3):
    """Black image with one white rectangle at pixel box [ymin, xmin, ymax, xmax]."""
    image = np.zeros([height, width, channels], np.uint8)
    ymin, xmin, ymax, xmax = (int(v) for v in box)
    image[ymin:ymax, xmin:xmax] = 255
    return image


def write_image(path, image, fmt="jpeg"):
    encode = tf.io.encode_png if fmt == "png" else lambda x: tf.io.encode_jpeg(x, quality=100)
    with open(path, "wb") as f:
        f.write(encode(image).numpy())
    return path


def make_records(folder, count=6, height=120, width=160, classes=(1, 2)):
    """`count` images, each a white box on black, with that box (class 1) and a second box."""
    records = []
    rng = np.random.default_rng(0)
    for i in range(count):
        ymin, xmin = rng.integers(0, height // 2), rng.integers(0, width // 2)
        box = np.array([ymin, xmin, ymin + height // 3, xmin + width // 3], np.float32)
        path = write_image(os.path.join(folder, "img%d.jpg" % i), bright_box_image(height, width, box))
        boxes = np.stack([box, [0, 0, height / 4, width / 4]]).astype(np.float32)
        records.append(ImageRecord(100 + i, path, height, width, boxes,
                                   np.array(classes, np.int64), np.zeros(2, bool),
                                   np.zeros(2, np.float32)))
    return records


def write_tfrecord(path, records):
    with tf.io.TFRecordWriter(path) as writer:
        for record in records:
            with open(record.path, "rb") as f:
                writer.write(record_to_tf_example(record, f.read()).SerializeToString())
    return path


def write_model_dir(model_dir, config):
    """A run folder as the trainer leaves it: config.yaml and ckpt-1 of a freshly built
    EfficientDetNet. Returns the model."""
    from efficientdet_keras import EfficientDetNet, save_ckpt
    os.makedirs(model_dir, exist_ok=True)
    config.save_yaml(str(model_dir))
    model = EfficientDetNet(config=config)
    model.build_variables()
    save_ckpt(model, os.path.join(str(model_dir), "ckpt-1"))
    return model
