"""Malformed records and images: each is skipped or repaired with a warning naming the record,
counted in the data report, and the good records keep flowing."""

import collections
import contextlib
import io
import logging
import os
import subprocess
import sys
import tempfile
import zlib

import numpy as np
import pytest
import tensorflow as tf

from helpers import REPO_ROOT, tiny_config
from efficientdet_keras.data.decode import decode_and_clean
from efficientdet_keras.data.health import DataHealth
from efficientdet_keras.data.pipeline import InputPipeline
from efficientdet_keras.data.sources import RecordsSource, TFRecordSource
from efficientdet_keras.data.formats.records import ImageRecord
from efficientdet_keras.data.formats.tf_example import record_to_tf_example

NUM_CLASSES = 3


def jpeg(height=40, width=60, channels=3):
    return tf.io.encode_jpeg(np.full([height, width, channels], 200, np.uint8)).numpy()


def example(image_id, encoded=None, boxes=((10, 10, 30, 40),), classes=(1,), height=40, width=60):
    """A tf.train.Example (Object Detection API layout) of one image with pixel `boxes`."""
    boxes = np.array(boxes, np.float32).reshape(-1, 4)
    record = ImageRecord(image_id, "img%d.jpg" % image_id, height, width, boxes,
                         np.array(classes, np.int64), np.zeros(len(classes), bool),
                         np.zeros(len(classes), np.float32))
    return record_to_tf_example(record, jpeg(height, width) if encoded is None else encoded)


def write_records(path, *records):
    """Writes tf.train.Examples (or raw bytes) into one TFRecord file."""
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in records:
            writer.write(record if isinstance(record, bytes) else record.SerializeToString())
    return str(path)


def decoded(source, strict=False, health=None):
    """(the examples that decode, as numpy dicts, DataHealth) after one pass over `source`."""
    health = health or DataHealth()
    dataset = source.raw_dataset(None, False, None).map(
        lambda raw: decode_and_clean(raw, NUM_CLASSES, 100, health, strict))
    return list(dataset.filter(lambda e: e["ok"]).as_numpy_iterator()), health


@contextlib.contextmanager
def stderr_lines():
    """Collects what is written to file descriptor 2 (tf.print's warnings) into a list."""
    lines = []
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield lines
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            lines.extend(captured.read().decode(errors="replace").splitlines())


def one_pass(source):
    """(good source ids, problem counts, warning lines): every warning printed."""
    with stderr_lines() as lines:
        examples, health = decoded(source, health=DataHealth(warnings_per_kind=100))
    return [e["source_id"].decode() for e in examples], health.summary(), lines


def set_feature(name, kind, values):
    def change(proto):
        feature = proto.features.feature[name]
        feature.Clear()
        getattr(feature, kind).value.extend(values)
    return change


def drop_feature(name):
    def change(proto):
        del proto.features.feature[name]
    return change


def mutated(image_id, change):
    proto = example(image_id)
    change(proto)
    return proto


def claiming(image_format, width, height):
    """Image bytes whose header claims width x height pixels (a decompression bomb's header);
    what follows it is a small image's data, or nothing."""
    if image_format == "jpeg":
        data = bytearray(jpeg())
        frame = data.index(b"\xff\xc0")  # The baseline frame header: height, then width.
        data[frame + 5:frame + 9] = height.to_bytes(2, "big") + width.to_bytes(2, "big")
        return bytes(data)
    if image_format == "png":
        data = bytearray(tf.io.encode_png(np.zeros([4, 4, 3], np.uint8)).numpy())
        data[16:24] = width.to_bytes(4, "big") + height.to_bytes(4, "big")  # IHDR.
        data[29:33] = zlib.crc32(bytes(data[12:29])).to_bytes(4, "big")  # Its checksum.
        return bytes(data)
    from PIL import Image
    saved = io.BytesIO()
    Image.fromarray(np.zeros([4, 4, 3], np.uint8)).save(saved, format=image_format)
    data = bytearray(saved.getvalue())
    if image_format == "gif":  # The logical screen, then the image descriptor after the palette.
        data[6:10] = width.to_bytes(2, "little") + height.to_bytes(2, "little")
        descriptor = data.index(b",", 13)
        data[descriptor + 5:descriptor + 9] = data[6:10]
        return bytes(data)
    # BMP: a top-down bitmap stores its height negative.
    data[18:26] = width.to_bytes(4, "little") + (-height).to_bytes(4, "little", signed=True)
    return bytes(data)


# (case, the bad record, kind counted, text naming the record; "#N of" is added).
# Record i of the file is bad case i // 2; good records (ids 1000+) sit between them.
TFRECORD_CASES = [
    ("not_a_tf_example", lambda i: b"\x00 these bytes are no tf.Example", "unparseable_examples",
     "record"),
    ("empty_example", lambda i: tf.train.Example(), "missing_images", "record"),
    ("missing_image_encoded", lambda i: mutated(i, drop_feature("image/encoded")),
     "missing_images", "record source_id {i} / img{i}.jpg"),
    ("label_of_wrong_type",
     lambda i: mutated(i, set_feature("image/object/class/label", "float_list", [1.0])),
     "unparseable_examples", "record"),
    ("box_lists_of_different_lengths",
     lambda i: mutated(i, set_feature("image/object/bbox/ymin", "float_list", [0.1, 0.2])),
     "mismatched_box_lists", "record source_id {i} / img{i}.jpg"),
    ("more_labels_than_boxes",
     lambda i: mutated(i, set_feature("image/object/class/label", "int64_list", [1, 2])),
     "label_box_count_mismatches", "record source_id {i} / img{i}.jpg"),
    ("more_boxes_than_labels", lambda i: example(i, boxes=[[1, 1, 9, 9], [2, 2, 8, 8]], classes=[1]),
     "label_box_count_mismatches", "record source_id {i} / img{i}.jpg"),
    ("is_crowd_of_wrong_length",
     lambda i: mutated(i, set_feature("image/object/is_crowd", "int64_list", [0, 1, 0])),
     "mismatched_crowd_or_area", "record source_id {i} / img{i}.jpg"),
    ("area_of_wrong_length",
     lambda i: mutated(i, set_feature("image/object/area", "float_list", [4.0, 5.0])),
     "mismatched_crowd_or_area", "record source_id {i} / img{i}.jpg"),
    ("corrupt_jpeg", lambda i: example(i, encoded=b"\xff\xd8\xff\xe0" + b"\x17" * 300),
     "undecodable_images", "record source_id {i} / img{i}.jpg"),
    ("truncated_jpeg", lambda i: example(i, encoded=jpeg()[:120]), "undecodable_images",
     "record source_id {i} / img{i}.jpg"),
    ("truncated_png",
     lambda i: example(i, encoded=tf.io.encode_png(np.zeros([40, 60, 3], np.uint8)).numpy()[:60]),
     "undecodable_images", "record source_id {i} / img{i}.jpg"),
    ("zero_bytes", lambda i: mutated(i, set_feature("image/encoded", "bytes_list", [b""])),
     "missing_images", "record source_id {i} / img{i}.jpg"),
    ("not_an_image", lambda i: example(i, encoded=b"GIF? no, plain text"), "undecodable_images",
     "record source_id {i} / img{i}.jpg"),
    ("jpeg_claiming_60000x60000", lambda i: example(i, encoded=claiming("jpeg", 60000, 60000)),
     "oversized_images", "record source_id {i} / img{i}.jpg"),
    ("png_claiming_100000x100000",
     lambda i: example(i, encoded=claiming("png", 100000, 100000)), "oversized_images",
     "record source_id {i} / img{i}.jpg"),
    ("gif_claiming_65535x65535", lambda i: example(i, encoded=claiming("gif", 65535, 65535)),
     "oversized_images", "record source_id {i} / img{i}.jpg"),
    ("bmp_claiming_100000x100000",
     lambda i: example(i, encoded=claiming("bmp", 100000, 100000)), "oversized_images",
     "record source_id {i} / img{i}.jpg"),
    ("boxes_in_pixels",
     lambda i: mutated(i, set_feature("image/object/bbox/ymax", "float_list", [35.0])),
     "pixel_boxes", "record source_id {i} / img{i}.jpg"),
]


@pytest.fixture(scope="module")
def tfrecord_pass(tmp_path_factory):
    """One pass over a file of good records (ids 1000+) with each bad case between them."""
    records = []
    for case, (_, make_bad, _, _) in enumerate(TFRECORD_CASES):
        records += [example(1000 + case), make_bad(case)]
    path = write_records(tmp_path_factory.mktemp("bad_records") / "data.tfrecord", *records)
    return (path,) + one_pass(TFRecordSource(path))


@pytest.mark.parametrize("case", range(len(TFRECORD_CASES)), ids=[c[0] for c in TFRECORD_CASES])
def test_bad_tfrecord_record_is_skipped_with_a_warning_naming_it(tfrecord_pass, case):
    path, good_ids, _, lines = tfrecord_pass
    _, _, kind, name = TFRECORD_CASES[case]
    named = "%s (#%d of %s): " % (name.format(i=case), 2 * case + 1, path)
    assert any(line.startswith("Data: %s in %s" % (kind.replace("_", " "), named))
               for line in lines), (named, lines)
    assert str(case) not in good_ids


def test_an_oversized_image_is_named_with_the_size_its_header_claims(tfrecord_pass):
    _, _, _, lines = tfrecord_pass
    claims = sorted(int(line.split("its header claims ")[1].split()[0]) for line in lines
                    if "its header claims" in line)
    assert claims == [60000 * 60000, 65535 * 65535, 100000 * 100000, 100000 * 100000]
    assert all("more than the 178,956,970 an image may have here (tile or downscale it)" in line
               for line in lines if "its header claims" in line)


def test_bad_tfrecord_records_are_counted_and_the_good_ones_all_arrive(tfrecord_pass):
    _, good_ids, counts, _ = tfrecord_pass
    assert good_ids == [str(1000 + case) for case in range(len(TFRECORD_CASES))]
    expected = collections.Counter(kind for _, _, kind, _ in TFRECORD_CASES)
    assert {k: v for k, v in counts.items() if v} == dict(expected)


def test_truncated_file_and_bad_crc_skip_the_rest_of_that_file_only(tmp_path):
    truncated = write_records(tmp_path / "a.tfrecord", *[example(i) for i in (1, 2, 3)])
    corrupt = write_records(tmp_path / "b.tfrecord", *[example(i) for i in (4, 5, 6)])
    intact = write_records(tmp_path / "c.tfrecord", example(7))
    size = os.path.getsize(truncated)
    with open(truncated, "r+b") as f:
        f.truncate(size - 40)  # Cuts into record 3.
    data = bytearray(open(corrupt, "rb").read())
    data[len(data) // 3 + 20] ^= 0xFF  # Record 5's data no longer matches its CRC.
    open(corrupt, "wb").write(bytes(data))
    ids, counts, lines = one_pass(TFRecordSource([truncated, corrupt, intact]))
    assert sorted(ids) == ["1", "2", "4", "7"]
    assert counts["truncated_files"] == 2
    warnings = "\n".join(lines)
    assert "truncated files in record (TFRecord file %s): truncated or corrupt (bad CRC) after " \
           "2 records" % truncated in warnings
    assert "TFRecord file %s): truncated or corrupt (bad CRC) after 1 records" % corrupt in warnings


def png(image):
    return tf.io.encode_png(image).numpy()


def cmyk_jpeg():
    from PIL import Image
    buffer = io.BytesIO()
    Image.fromarray(np.full([40, 60, 4], 30, np.uint8), "CMYK").save(buffer, "JPEG")
    return buffer.getvalue()


# (case, image bytes, the value every decoded pixel has, or None)
IMAGE_CASES = [
    ("cmyk_jpeg", cmyk_jpeg(), None),
    ("png_16_bit", png(np.full([40, 60, 3], 40000, np.uint16)), round(40000 / 257)),
    ("greyscale", png(np.full([40, 60, 1], 77, np.uint8)), 77),
    ("rgba", png(np.full([40, 60, 4], 99, np.uint8)), 99),
]


@pytest.fixture(scope="module")
def image_pass(tmp_path_factory):
    path = write_records(tmp_path_factory.mktemp("images") / "images.tfrecord",
                         *[example(i, encoded=c[1]) for i, c in enumerate(IMAGE_CASES)])
    examples, health = decoded(TFRecordSource(path))
    return {int(e["source_id"]): e for e in examples}, health.summary()


@pytest.mark.parametrize("case", range(len(IMAGE_CASES)), ids=[c[0] for c in IMAGE_CASES])
def test_unusual_image_formats_decode_to_rgb(image_pass, case):
    examples, counts = image_pass
    image = examples[case]["image"]
    assert image.shape == (40, 60, 3) and image.dtype == np.uint8
    if IMAGE_CASES[case][2] is not None:
        assert (image == IMAGE_CASES[case][2]).all()
    assert not any(counts.values())


def test_size_fields_that_disagree_with_the_image_warn_and_use_the_image(tmp_path):
    stated = mutated(2, set_feature("image/height", "int64_list", [400]))
    ids, counts, lines = one_pass(TFRecordSource(write_records(tmp_path / "d.tfrecord", stated)))
    assert ids == ["2"] and counts["size_mismatches"] == 1
    assert any(line.startswith("Data: size mismatches in record source_id 2 / img2.jpg") and
               "say 400x60, the image is 40x60; using the image's size" in line for line in lines)


def test_a_stated_size_of_the_images_shape_is_the_frame_of_its_pixel_boxes(tmp_path):
    # Labelled at 200x160, the image resized to 100x80 afterwards; and one whose stated size
    # swaps the image's (labelled as displayed under an EXIF rotation), said so.
    resized = image_record(tmp_path, 1, [[20, 40, 100, 120]], [1], height=80, width=100)
    resized.height, resized.width = 160, 200
    swapped = image_record(tmp_path, 2, [[10, 10, 30, 30]], [1], height=80, width=100)
    swapped.height, swapped.width = 100, 80
    with stderr_lines() as lines:
        examples, health = decoded(RecordsSource([resized, swapped]),
                                   health=DataHealth(warnings_per_kind=100))
    by_id = {int(e["source_id"]): e for e in examples}
    np.testing.assert_allclose(by_id[1]["boxes"], [[20 / 160, 40 / 200, 100 / 160, 120 / 200]],
                               rtol=1e-6)
    assert health.summary()["size_mismatches"] == 2
    text = "\n".join(lines)
    assert "say 160x200, the image is 80x100; boxes read in the stated size's pixels" in text
    assert "say 100x80, the image is 80x100; width and height swapped" in text


def image_record(folder, image_id, boxes, classes, height=100, width=100):
    path = os.path.join(str(folder), "img%d.jpg" % image_id)
    with open(path, "wb") as f:
        f.write(jpeg(height, width))
    boxes = np.array(boxes, np.float32).reshape(-1, 4)
    return ImageRecord(image_id, path, height, width, boxes, np.array(classes, np.int64),
                       np.zeros(len(classes), bool), np.zeros(len(classes), np.float32))


# (case, pixel boxes of a 100x100 image, class ids, kind, count, boxes kept, normalised)
BOX_CASES = [
    ("nan_and_inf", [[np.nan, 0, 10, 10], [0, 0, np.inf, 10], [10, 10, 50, 50]], [1, 1, 2],
     "nan_boxes_dropped", 2, [[0.1, 0.1, 0.5, 0.5]]),
    ("inverted", [[50, 10, 10, 50], [10, 10, 50, 50]], [1, 2], "inverted_boxes_dropped", 1,
     [[0.1, 0.1, 0.5, 0.5]]),
    ("outside_the_image", [[-10, 80, 40, 130]], [1], "boxes_clipped", 1, [[0, 0.8, 0.4, 1.0]]),
    ("zero_area", [[20, 20, 20, 60], [10, 10, 50, 50]], [1, 2], "empty_boxes_dropped", 1,
     [[0.1, 0.1, 0.5, 0.5]]),
    ("class_id_0", [[10, 10, 50, 50], [0, 0, 20, 20]], [0, 2], "bad_class_boxes_dropped", 1,
     [[0, 0, 0.2, 0.2]]),
    ("class_id_negative", [[10, 10, 50, 50], [0, 0, 20, 20]], [-1, 2], "bad_class_boxes_dropped", 1,
     [[0, 0, 0.2, 0.2]]),
    ("class_id_above_num_classes", [[10, 10, 50, 50], [0, 0, 20, 20]], [4, 2],
     "bad_class_boxes_dropped", 1, [[0, 0, 0.2, 0.2]]),
]


@pytest.fixture(scope="module")
def box_pass(tmp_path_factory):
    folder = tmp_path_factory.mktemp("boxes")
    records = [image_record(folder, i, c[1], c[2]) for i, c in enumerate(BOX_CASES)]
    with stderr_lines() as lines:
        examples, health = decoded(RecordsSource(records), health=DataHealth(100))
    return {int(e["source_id"]): e for e in examples}, health.summary(), lines


@pytest.mark.parametrize("case", range(len(BOX_CASES)), ids=[c[0] for c in BOX_CASES])
def test_bad_boxes_and_labels_are_dropped_or_clipped_with_a_warning(box_pass, case):
    examples, _, lines = box_pass
    _, _, _, kind, count, kept = BOX_CASES[case]
    np.testing.assert_allclose(examples[case]["boxes"], kept, rtol=1e-6)
    assert "Data: %s in record source_id %d / img%d.jpg: %d box(es)" % (
        kind.replace("_", " "), case, case, count) in "\n".join(lines)


def test_bad_boxes_are_counted(box_pass):
    expected = collections.Counter()
    for _, _, _, kind, count, _ in BOX_CASES:
        expected[kind] += count
    assert {k: v for k, v in box_pass[1].items() if v} == dict(expected)


@pytest.mark.quick
def test_strict_data_makes_a_bad_class_id_an_error_naming_the_record(tmp_path):
    source = RecordsSource([image_record(tmp_path, 5, [[10, 10, 50, 50]], [7])])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"record source_id 5 / img5\.jpg has "
                       r"class id 7 outside 1\.\.3 \(strict_data is on"):
        decoded(source, strict=True)


@pytest.mark.quick
def test_pixel_boxes_are_warned_about_once(tmp_path):
    pixels = [mutated(i, set_feature("image/object/bbox/xmax", "float_list", [40.0]))
              for i in (2, 3, 4)]
    path = write_records(tmp_path / "p.tfrecord", example(1), *pixels)
    ids, counts, lines = one_pass(TFRecordSource(path))
    assert ids == ["1"] and counts["pixel_boxes"] == 3
    assert [line for line in lines if "look like pixels" in line] == [
        "Data: pixel boxes in record source_id 2 / img2.jpg (#1 of %s): box coordinates up to "
        "40 look like pixels, but the records should hold normalised 0..1 values; skipping "
        "such records (warned once)" % path]
    assert "Data: more pixel boxes; counting without further warnings." in lines


def test_training_on_data_where_every_record_is_bad_stops_with_a_clear_error(tmp_path):
    path = write_records(tmp_path / "bad.tfrecord", b"\x00junk", example(2, encoded=b""))
    pipeline = InputPipeline(tiny_config(num_classes=NUM_CLASSES, batch_size=2),
                             TFRecordSource(path), is_training=True, seed=1)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"no usable records in TFRecord files .*bad\.tfrecord: every record "
                             r"was skipped as bad data"):
        next(iter(pipeline()))
    assert pipeline.health.summary()["unparseable_examples"] >= 1


def test_training_pipeline_keeps_going_past_bad_records(tmp_path, capfd):
    records = [example(i) for i in range(1, 5)] + [b"\x00junk", example(9, encoded=b"\xff\xd8\xff")]
    path = write_records(tmp_path / "mixed.tfrecord", *records)
    pipeline = InputPipeline(tiny_config(num_classes=NUM_CLASSES, batch_size=2),
                             TFRecordSource(path), is_training=True, seed=1)
    seen = {int(i) for _, labels in pipeline().take(6) for i in labels["source_ids"]}
    assert seen == {1, 2, 3, 4}  # Three epochs of four good records.
    pipeline.health.log_summary()
    assert pipeline.health.summary()["unparseable_examples"] >= 1
    assert "source_id 9 / img9.jpg" in capfd.readouterr().err


def test_a_record_over_max_instances_is_warned_about_and_counted_once_over_epochs(tmp_path,
                                                                                   caplog):
    six = [[i, i, 20 + i, 30 + i] for i in range(6)]
    records = [example(1), example(7, boxes=six, classes=[1] * 6),
               example(8, boxes=six[:3], classes=[2] * 3), example(9)]
    path = write_records(tmp_path / "crowded.tfrecord", *records)
    pipeline = InputPipeline(
        tiny_config(num_classes=NUM_CLASSES, batch_size=2, max_instances_per_image=3),
        TFRecordSource(path), is_training=True, seed=1)
    with stderr_lines() as lines:
        batches = list(pipeline().take(6))  # Three epochs of four records.
    assert all(labels["groundtruth_classes"].shape == (2, 3) for _, labels in batches)
    assert [line for line in lines if "instances truncated" in line] == [
        "Data: instances truncated in record source_id 7 / img7.jpg (#1 of %s): 6 objects; "
        "the first 3 are kept, 3 dropped (max_instances_per_image)" % path]
    assert pipeline.health.summary()["instances_truncated"] == 1
    assert vars(pipeline.health.truncation()) == {"records": 1, "objects_dropped": 3,
                                                  "most_objects": 6, "max_instances": 3}
    with caplog.at_level(logging.WARNING):
        pipeline.health.log_summary()
    assert ("instances_truncated=1; 1 record has more objects than max_instances_per_image=3 "
            "(up to 6): 3 objects dropped; raise max_instances_per_image to 6 to keep them all"
            ) in caplog.text


EXIT_WHILE_ITERATING = """
import sys
sys.path.insert(0, {tests!r})
from helpers import tiny_config
from efficientdet_keras.data.pipeline import InputPipeline
from efficientdet_keras.data.sources import TFRecordSource
pipeline = InputPipeline(tiny_config(num_classes=3, batch_size=2, image_size=64),
                         TFRecordSource({path!r}),
                         is_training=True, seed=1)
iterator = iter(pipeline())
next(iterator)
print("one batch")
"""


@pytest.mark.slow  # Five processes that each import TensorFlow.
def test_a_script_that_exits_while_the_training_iterator_is_alive_ends_promptly(tmp_path):
    path = write_records(tmp_path / "d.tfrecord", *[example(i) for i in range(1, 5)])
    script = EXIT_WHILE_ITERATING.format(tests=os.path.join(REPO_ROOT, "tests"), path=path)
    runs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True) for _ in range(5)]
    try:
        for run in runs:  # Started together: five at once take little longer than one.
            out, _ = run.communicate(timeout=120)
            assert run.returncode == 0 and "one batch" in out
    finally:
        for run in runs:
            run.kill()  # Only those still hanging; harmless for the others.


def test_create_tfrecord_checks_records_like_training_and_writes_only_good_ones(tmp_path):
    from efficientdet_keras.data.tfrecord_writer import write_tfrecords
    good = image_record(tmp_path, 1, [[10, 10, 50, 50], [np.nan, 0, 5, 5], [0, 0, 20, 20]],
                        [1, 2, 9])
    corrupt = image_record(tmp_path, 2, [[10, 10, 50, 50]], [1])
    with open(corrupt.path, "wb") as f:
        f.write(jpeg()[:100])
    empty = image_record(tmp_path, 3, [[10, 10, 50, 50]], [1])
    open(empty.path, "wb").close()
    with stderr_lines() as lines:
        stats = write_tfrecords([good, corrupt, empty], str(tmp_path / "out"),
                                label_map={1: "a", 2: "b", 3: "c"}, show_progress=False)
    assert stats.skipped_paths == [corrupt.path, empty.path]
    assert stats.data_report == {"undecodable_images": 2, "nan_boxes_dropped": 1,
                                 "bad_class_boxes_dropped": 1}
    warnings = "\n".join(lines)
    assert "undecodable images in record source_id 2 / img2.jpg: corrupt or truncated jpeg" \
        in warnings
    assert "undecodable images in record source_id 3 / img3.jpg: zero bytes" in warnings
    # The written record is the one training would use: its bad boxes are gone.
    examples, health = decoded(TFRecordSource(stats.shard_paths[0]))
    assert [e["source_id"] for e in examples] == [b"1"]
    np.testing.assert_allclose(examples[0]["boxes"], [[0.1, 0.1, 0.5, 0.5]], rtol=1e-6)
    assert not any(health.summary().values())
