import copy
import json
import os
import time

import numpy as np
import pytest
import tensorflow as tf

from efficientdet_keras.data.formats.coco_records import load_coco_records
from efficientdet_keras.data.formats.tf_example import parse_tf_example
from efficientdet_keras.data.formats.tfrecord_files import list_files
from efficientdet_keras.data.synthetic import (MAX_OBJECTS, SYNTHETIC_LABEL_MAP, draw_example,
                                               generate_examples, make_background, paint_shape,
                                               shape_mask, write_synthetic_dataset)
from benchmarks.synthetic_glyphs import GLYPHS, GLYPHS_LABEL_MAP, glyph_mask, striped_fill

pytestmark = pytest.mark.quick  # All of this file is in the inner-loop set.


def boxes_intersect(a, b):
    return min(a[2], b[2]) > max(a[0], b[0]) and min(a[3], b[3]) > max(a[1], b[1])


def pixel_extent(mask):
    """[ymin, xmin, ymax, xmax] of the True pixels of a 2-D mask, pixel edges."""
    rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
    return [rows[0], cols[0], rows[-1] + 1, cols[-1] + 1]


def isolated_objects(boxes):
    """Indices of boxes that intersect no other box."""
    return [i for i in range(len(boxes))
            if not any(boxes_intersect(boxes[i], boxes[j]) for j in range(len(boxes)) if j != i)]


def test_draw_example_is_deterministic():
    first = draw_example(np.random.default_rng(7), 96, 128)
    second = draw_example(np.random.default_rng(7), 96, 128)
    other = draw_example(np.random.default_rng(8), 96, 128)
    assert first[0].shape == (96, 128, 3) and first[0].dtype == np.uint8
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(first[0], other[0])


@pytest.mark.parametrize("class_id", sorted(SYNTHETIC_LABEL_MAP))
def test_paint_shape_box_is_tight_and_square(class_id):
    for size in range(4, 60, 3):
        image = np.zeros([80, 80, 3], np.uint8)
        box = paint_shape(image, class_id, 7, 11, size, (200, 100, 50))
        painted = image.any(axis=-1)
        assert pixel_extent(painted) == box.tolist() == [7, 11, 7 + size, 11 + size]
        # A filled shape, not an outline: it covers a good part of its box.
        assert painted.sum() >= 0.4 * size * size


def test_shapes_differ_between_classes():
    masks = []
    for class_id in sorted(SYNTHETIC_LABEL_MAP):
        image = np.zeros([40, 40, 3], np.uint8)
        paint_shape(image, class_id, 0, 0, 40, (255, 255, 255))
        masks.append(image[..., 0] > 0)
    for i in range(len(masks)):
        for j in range(i + 1, len(masks)):
            assert (masks[i] != masks[j]).mean() > 0.1, (i, j)


def test_boxes_match_drawn_pixels():
    """Every isolated object's box is the extent of the pixels that differ from the background."""
    checked = 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        background = np.round(make_background(copy.deepcopy(rng), 96, 96)).astype(np.uint8)
        image, boxes, _ = draw_example(rng, 96, 96)
        changed = (image != background).any(axis=-1)
        covered = np.zeros_like(changed)
        for ymin, xmin, ymax, xmax in boxes.astype(int):
            covered[ymin:ymax, xmin:xmax] = True
        assert not (changed & ~covered).any(), "pixels changed outside every box (seed %d)" % seed
        for i in isolated_objects(boxes):
            ymin, xmin, ymax, xmax = boxes[i].astype(int)
            inside = np.zeros_like(changed)
            inside[ymin:ymax, xmin:xmax] = changed[ymin:ymax, xmin:xmax]
            assert pixel_extent(inside) == boxes[i].tolist(), (seed, i)
            checked += 1
    assert checked >= 40


def test_boxes_sizes_and_classes_are_valid():
    height, width = 128, 160
    seen_classes, counts = set(), []
    for seed in range(50):
        _, boxes, classes = draw_example(np.random.default_rng(seed), height, width)
        assert boxes.dtype == np.float32 and boxes.shape == (len(classes), 4)
        assert classes.dtype == np.int64
        assert np.all(boxes[:, :2] >= 0)
        assert np.all(boxes[:, 2] <= height) and np.all(boxes[:, 3] <= width)
        sides = np.concatenate([boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]])
        assert np.all(sides >= round(0.12 * height)) and np.all(sides <= round(0.45 * height))
        assert set(classes.tolist()) <= {1, 2, 3, 4}
        seen_classes.update(classes.tolist())
        counts.append(len(classes))
    assert seen_classes == {1, 2, 3, 4}
    assert min(counts) >= 1 and max(counts) <= MAX_OBJECTS and len(set(counts)) >= 3


def test_colours_do_not_predict_the_class():
    colours = {c: [] for c in SYNTHETIC_LABEL_MAP}
    for seed in range(150):
        image, boxes, classes = draw_example(np.random.default_rng(seed), 64, 64)
        for i in isolated_objects(boxes):
            ymin, xmin, ymax, xmax = boxes[i].astype(int)
            # The centre pixel of the box lies inside every one of the four shapes.
            centre = image[ymin + (ymax - ymin) // 2, xmin + (xmax - xmin) // 2]
            colours[int(classes[i])].append(centre.astype(float))
    overall = np.concatenate([np.array(v) for v in colours.values()]).mean(axis=0)
    for class_id, values in colours.items():
        values = np.array(values)
        brightness = values.mean(axis=1)
        assert len(values) >= 40, class_id
        assert brightness.min() < 70 and brightness.max() > 185, class_id
        np.testing.assert_allclose(values.mean(axis=0), overall, atol=30)


def file_mtimes(root):
    return {os.path.join(d, n): os.stat(os.path.join(d, n)).st_mtime_ns
            for d, _, names in os.walk(root) for n in names}


def test_write_synthetic_dataset(tmp_path):
    out_dir = str(tmp_path / "synthetic")
    dataset = write_synthetic_dataset(out_dir, num_train=6, num_val=3, image_size=64, seed=3,
                                      num_shards=2)
    assert dataset.label_map == SYNTHETIC_LABEL_MAP
    expected = {"train": list(generate_examples(6, 64, 64, seed=3, start_id=1,
                                                image_dir=dataset.train_images)),
                "val": list(generate_examples(3, 64, 64, seed=3, start_id=7,
                                              image_dir=dataset.val_images))}
    from pycocotools.coco import COCO
    for split, json_file, image_dir, pattern in (
            ("train", dataset.train_json, dataset.train_images, dataset.train_tfrecord),
            ("val", dataset.val_json, dataset.val_images, dataset.val_tfrecord)):
        records = [r for r, _ in expected[split]]
        coco = COCO(json_file)
        assert sorted(coco.getImgIds()) == [r.image_id for r in records]
        assert sorted(c["name"] for c in coco.loadCats(coco.getCatIds())) == sorted(
            SYNTHETIC_LABEL_MAP.values())
        for record in records:
            anns = coco.loadAnns(coco.getAnnIds(imgIds=[record.image_id]))
            xywh = [[x, y, w, h] for y, x, ymax, xmax in record.boxes.tolist()
                    for w, h in [(xmax - x, ymax - y)]]
            assert [a["bbox"] for a in anns] == xywh
            assert [a["category_id"] for a in anns] == record.classes.tolist()
            assert [a["iscrowd"] for a in anns] == [0] * len(anns)
            assert [a["area"] for a in anns] == [w * h for _, _, w, h in xywh]

        loaded = load_coco_records(json_file, image_dir)
        assert len(loaded) == len(records)
        for got, want in zip(loaded, records):
            assert (got.image_id, got.path, got.height, got.width) == (
                want.image_id, want.path, 64, 64)
            assert os.path.isfile(got.path)
            np.testing.assert_array_equal(got.boxes, want.boxes)
            np.testing.assert_array_equal(got.classes, want.classes)

        files = list_files(pattern)
        assert len(files) == 2
        by_id = {str(r.image_id): (r, image) for r, image in expected[split]}
        parsed = [parse_tf_example(s) for s in tf.data.TFRecordDataset(files)]
        assert sorted(p["source_id"].numpy().decode() for p in parsed) == sorted(by_id)
        for example in parsed:
            record, image = by_id[example["source_id"].numpy().decode()]
            decoded = tf.io.decode_jpeg(example["encoded"]).numpy()
            assert decoded.shape == (64, 64, 3)
            # JPEG (quality 95, chroma subsampled) blurs the pixel noise a little.
            assert np.abs(decoded.astype(float) - image).mean() < 8
            np.testing.assert_allclose(example["boxes"].numpy(), record.boxes / 64.0, atol=1e-5)
            np.testing.assert_array_equal(example["classes"].numpy(), record.classes)

    # A second call with the same parameters reuses the files.
    before = file_mtimes(out_dir)
    start = time.perf_counter()
    again = write_synthetic_dataset(out_dir, num_train=6, num_val=3, image_size=64, seed=3,
                                    num_shards=2)
    assert time.perf_counter() - start < 2.0
    assert again == dataset
    assert file_mtimes(out_dir) == before

    # A different seed regenerates, and leaves no stale shard files behind.
    with open(dataset.train_json) as f:
        old_json = f.read()
    changed = write_synthetic_dataset(out_dir, num_train=6, num_val=3, image_size=64, seed=4)
    with open(changed.train_json) as f:
        assert f.read() != old_json
    assert len(list_files(changed.train_tfrecord)) == 1
    assert len(os.listdir(os.path.join(out_dir, "tfrecords"))) == 2
    with open(os.path.join(out_dir, "manifest.json")) as f:
        assert json.load(f)["seed"] == 4


def test_same_seed_writes_identical_files_and_incomplete_output_is_rewritten(tmp_path):
    first = write_synthetic_dataset(str(tmp_path / "a"), num_train=3, num_val=2,
                                    image_size=(48, 64), seed=1, tfrecord=False)
    second = write_synthetic_dataset(str(tmp_path / "b"), num_train=3, num_val=2,
                                     image_size=(48, 64), seed=1, tfrecord=False)
    assert first.train_tfrecord is None
    for a, b in ((first.train_json, second.train_json), (first.val_json, second.val_json)):
        with open(a, "rb") as fa, open(b, "rb") as fb:
            assert fa.read() == fb.read()
    with open(first.val_json) as f:
        val = json.load(f)
    assert [image["id"] for image in val["images"]] == [4, 5]
    assert {(image["height"], image["width"]) for image in val["images"]} == {(48, 64)}

    # A missing image means the dataset is incomplete: it is written again.
    missing = os.path.join(first.train_images, "000002.jpg")
    os.remove(missing)
    write_synthetic_dataset(str(tmp_path / "a"), num_train=3, num_val=2, image_size=(48, 64),
                            seed=1, tfrecord=False)
    with open(missing, "rb") as fa, open(os.path.join(second.train_images, "000002.jpg"),
                                         "rb") as fb:
        assert fa.read() == fb.read()


# --- The second dataset: striped glyphs (the short-run benchmark's) ---------------

@pytest.mark.parametrize("class_id", sorted(GLYPHS_LABEL_MAP))
def test_glyph_box_is_tight_and_glyphs_differ_from_each_other_and_from_the_shapes(class_id):
    for size in range(6, 60, 5):
        image = np.zeros([80, 80, 3], np.uint8)
        box = paint_shape(image, class_id, 5, 9, size, (200, 100, 50), glyph_mask)
        assert pixel_extent(image.any(axis=-1)) == box.tolist() == [5, 9, 5 + size, 9 + size]
    glyph = glyph_mask(class_id, 40)
    for other in sorted(GLYPHS_LABEL_MAP):
        if other != class_id:
            assert (glyph != glyph_mask(other, 40)).mean() > 0.15
    for shape_class in sorted(SYNTHETIC_LABEL_MAP):  # Not the demo's shapes under new names.
        assert (glyph != shape_mask(shape_class, 40)).mean() > 0.15


def test_glyphs_are_striped_in_two_colours_on_noisier_backgrounds():
    rng = np.random.default_rng(3)
    image, boxes, classes = draw_example(rng, 128, 128, GLYPHS)
    assert set(classes.tolist()) <= set(GLYPHS_LABEL_MAP) and 1 <= len(boxes) <= MAX_OBJECTS
    fill = striped_fill(np.random.default_rng(0), np.zeros([10, 3], np.float32), 30)
    assert len(np.unique(fill.reshape(-1, 3), axis=0)) == 2
    # Pixel noise: neighbouring background pixels differ more than in the demo's images.
    demo, _, _ = draw_example(np.random.default_rng(3), 128, 128)
    roughness = [np.abs(np.diff(im.astype(float), axis=1)).mean() for im in (demo, image)]
    assert roughness[1] > 2 * roughness[0]


def category_names(json_file):
    with open(json_file) as f:
        return sorted(c["name"] for c in json.load(f)["categories"])


def test_glyph_dataset_names_its_classes_and_keeps_its_own_manifest(tmp_path):
    glyphs = write_synthetic_dataset(str(tmp_path / "glyphs"), num_train=3, num_val=2,
                                     image_size=64, tfrecord=False, style=GLYPHS)
    shapes = write_synthetic_dataset(str(tmp_path / "shapes"), num_train=3, num_val=2,
                                     image_size=64, tfrecord=False)
    assert glyphs.label_map == GLYPHS_LABEL_MAP
    assert category_names(glyphs.train_json) == sorted(GLYPHS_LABEL_MAP.values())
    with open(os.path.join(glyphs.root, "manifest.json")) as f:
        assert json.load(f)["style"] == "glyphs"
    with open(os.path.join(shapes.root, "manifest.json")) as f:
        assert "style" not in json.load(f)  # Demo datasets written before stay valid.
    # The same folder asked for the other style is regenerated, not reused.
    again = write_synthetic_dataset(str(tmp_path / "glyphs"), num_train=3, num_val=2,
                                    image_size=64, tfrecord=False)
    assert again.label_map == SYNTHETIC_LABEL_MAP
    assert category_names(again.train_json) == sorted(SYNTHETIC_LABEL_MAP.values())
