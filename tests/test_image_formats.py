"""Images as users have them: WebP, TIFF (8- and 16-bit) and 16-bit PNG in a dataset are
read to the pixels they hold, TIFF through one Pillow conversion kept in a cache; a camera
format no reader here decodes stops the run before it starts, with its count."""

import os

import numpy as np
import pytest
from PIL import Image

from efficientdet_keras.data.datasets import open_dataset

pytestmark = pytest.mark.quick
HEIGHT, WIDTH = 24, 32


def pixels(seed):
    return np.random.default_rng(seed).integers(0, 256, (HEIGHT, WIDTH, 3), np.uint8)


def write_yolo_images(root, images):
    """A labelImg-style folder: each image with a YOLO label file beside it, classes.txt."""
    os.makedirs(root, exist_ok=True)
    (root / "classes.txt").write_text("widget\n")
    for name, write in images.items():
        write(str(root / name))
        (root / (os.path.splitext(name)[0] + ".txt")).write_text("0 0.5 0.5 0.5 0.5\n")


def decoded(source):
    """{file name as read: uint8 pixels} as the training pipeline decodes them."""
    from efficientdet_keras.data.decode import decode_and_clean
    from efficientdet_keras.data.health import DataHealth
    found = {}
    for raw in source.raw_dataset(None, shuffle=False, seed=None):
        example = decode_and_clean(raw, num_classes=1, max_instances=10, health=DataHealth())
        assert bool(example["ok"]), example["skip_reason"].numpy()
        found[os.path.basename(raw["path"].numpy().decode())] = example["image"].numpy()
    return found


def test_webp_tiff_and_sixteen_bit_png_read_to_their_pixels(tmp_path, monkeypatch):
    monkeypatch.setenv("EFFICIENTDET_KERAS_HOME", str(tmp_path / "cache"))
    rgb, grey16 = pixels(1), (pixels(2)[:, :, 0].astype(np.uint16) * 257)
    write_yolo_images(tmp_path / "data", {
        "a.webp": lambda path: Image.fromarray(rgb).save(path, "WEBP", lossless=True),
        "b.tif": lambda path: Image.fromarray(rgb).save(path, "TIFF", compression="tiff_lzw"),
        "c.tiff": lambda path: Image.fromarray(grey16).save(path, "TIFF"),
        "d.png": lambda path: Image.fromarray(grey16).save(path, "PNG"),
    })
    source = open_dataset(str(tmp_path / "data")).source("train")
    images = decoded(source)
    assert sorted(images) == ["a.webp", "b.png", "c.png", "d.png"]
    np.testing.assert_array_equal(images["a.webp"], rgb)
    np.testing.assert_array_equal(images["b.png"], rgb)
    grey8 = np.repeat((grey16 >> 8).astype(np.uint8)[:, :, None], 3, axis=2)
    np.testing.assert_array_equal(images["c.png"], grey8)
    np.testing.assert_array_equal(images["d.png"], grey8)
    converted = [r.path for r in source.records if r.path.endswith(("b.png", "c.png"))]
    assert all(p.startswith(str(tmp_path / "cache" / "converted_images")) for p in converted)
    # Once: a second reading finds the PNGs made, and a changed TIFF is converted again.
    times = [os.stat(p).st_mtime_ns for p in converted]
    again = open_dataset(str(tmp_path / "data")).source("train").records
    assert [os.stat(p).st_mtime_ns for p in converted] == times
    Image.fromarray(255 - rgb).save(tmp_path / "data" / "b.tif", "TIFF")
    os.utime(tmp_path / "data" / "b.tif", ns=(1, 10 ** 18))
    changed = decoded(open_dataset(str(tmp_path / "data")).source("train"))
    np.testing.assert_array_equal(changed["b.png"], 255 - rgb)
    assert len(again) == 4


def test_a_camera_format_no_reader_decodes_stops_with_its_count(tmp_path, monkeypatch):
    """HEIC saved under .jpg, as phones share it, and under its own name; bytes of no image
    format stay the pipeline's to skip one by one."""
    monkeypatch.setenv("EFFICIENTDET_KERAS_HOME", str(tmp_path / "cache"))
    heic = b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" + b"\x00" * 64
    write_yolo_images(tmp_path / "data", {
        "a.jpg": lambda path: Image.fromarray(pixels(1)).save(path),
        "b.jpg": lambda path: open(path, "wb").write(heic),
        "c.heic": lambda path: open(path, "wb").write(heic),
        "d.jpg": lambda path: open(path, "wb").write(b"<html>not found</html>"),
    })
    with pytest.raises(ValueError) as refused:
        open_dataset(str(tmp_path / "data")).source("train")
    assert str(refused.value) == (
        "2 of the 4 images are HEIC, which neither TensorFlow nor Pillow reads here, such as "
        "%s: convert them to JPEG or PNG (or install Pillow's plugin for HEIC)"
        % (tmp_path / "data" / "b.jpg"))
