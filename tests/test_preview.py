"""The augmentation preview (data/preview.py, efficientdet-check-data --preview_png) and the
augmentation throughput benchmark (benchmarks/bench.py --what=augment)."""

import io
import os
import subprocess

import numpy as np
import pytest
from PIL import Image

from helpers import REPO_ROOT, bright_box_image, python, tiny_config, write_image, write_tfrecord
from efficientdet_keras.data.sources import RecordsSource, TFRecordSource
from efficientdet_keras.data.preview import augmented_examples, preview_grid
from efficientdet_keras.data.formats.records import ImageRecord
from efficientdet_keras.utils.drawing import class_colour, image_grid

HEIGHT, WIDTH = 120, 160  # Originals; at 128 px they scale by 0.8 to 96x128 (rows 96+ pad).
SIZE, GAP = 128, 4
COUNT = 5


def object_box(i):
    """Image i's white object (class 1), original pixels; each image has its own left edge."""
    return np.array([50, 80 + 5 * i, 110, 150], np.float32)


# A class-2 box where the image is black: boxes need not hold anything bright.
EMPTY_BOX = np.array([10, 10, 40, 60], np.float32)


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """COUNT black images, each with a white object (class 1) and a box on black (class 2)."""
    folder = tmp_path_factory.mktemp("preview")
    result = []
    for i in range(COUNT):
        path = write_image(str(folder / ("%d.jpg" % i)),
                           bright_box_image(HEIGHT, WIDTH, object_box(i)))
        result.append(ImageRecord(i + 1, path, HEIGHT, WIDTH, np.stack([object_box(i), EMPTY_BOX]),
                                  np.array([1, 2]), np.zeros(2, bool), np.zeros(2, np.float32)))
    return result


def no_augmentation():
    return tiny_config(input_rand_hflip=False, jitter_min=1.0, jitter_max=1.0)


def edge_has_colour(tile, row, column, colour) -> bool:
    """Whether the class colour is at `row` within a pixel of `column` (the drawn box edge)."""
    column = int(round(column))
    return (tile[row, column - 1:column + 2] == colour).all(axis=-1).any()


def test_image_grid_places_tiles_left_to_right_then_down():
    tiles = [np.full([6, 8, 3], 10 * (i + 1), np.uint8) for i in range(5)]
    grid = image_grid(tiles, columns=2, gap=3)
    assert grid.shape == (3 * 6 + 2 * 3, 2 * 8 + 3, 3)
    for i in range(5):
        top, left = (i // 2) * 9, (i % 2) * 11
        assert (grid[top:top + 6, left:left + 8] == 10 * (i + 1)).all()
    assert (grid[18:24, 11:] == 255).all() and (grid[6:9] == 255).all()  # Empty cell, gap.
    with pytest.raises(ValueError, match="one size"):
        image_grid([tiles[0], np.zeros([7, 8, 3], np.uint8)])


@pytest.mark.quick
def test_preview_tiles_show_the_images_and_boxes_the_pipeline_gives(records):
    """Augmentation off: each tile is one training image at 128 px (scale 0.8) with its ground
    truth drawn where the records put it, in the class colours; padding is the mean colour."""
    config = no_augmentation()
    examples = augmented_examples(config, RecordsSource(records), COUNT, seed=3)
    assert examples.images.shape == (COUNT, SIZE, SIZE, 3)
    assert examples.images.dtype == np.uint8
    grid = preview_grid(examples, label_map={1: "object", 2: "empty"})
    columns = 3  # ceil(sqrt(5)): two rows of three, the last cell empty.
    assert grid.shape == (2 * (SIZE + GAP) - GAP, columns * (SIZE + GAP) - GAP, 3)
    shown_left_edges = []
    for i in range(COUNT):
        top, left = (i // columns) * (SIZE + GAP), (i % columns) * (SIZE + GAP)
        tile = grid[top:top + SIZE, left:left + SIZE]
        real = examples.classes[i] >= 1
        np.testing.assert_array_equal(examples.classes[i][real], [1, 2])
        box, empty = examples.boxes[i][real]
        np.testing.assert_allclose(empty, EMPTY_BOX * 0.8, atol=1e-4)
        shown_left_edges.append(box[1] / 0.8)
        # Left and right edges halfway down each box, in the class colour.
        for (ymin, xmin, ymax, xmax), colour in ((box, class_colour(1)),
                                                 (empty, class_colour(2))):
            middle = int((ymin + ymax) / 2) + 4  # Below a label drawn inside the top edge.
            assert edge_has_colour(tile, middle, xmin, colour), (i, "left")
            assert edge_has_colour(tile, middle, xmax, colour), (i, "right")
        # The de-normalised image: the white object inside its box, black outside, the
        # padding below the 96 rows of content in the mean colour.
        centre = examples.images[i][int(box[0] + box[2]) // 2, int(box[1] + box[3]) // 2]
        assert (centre >= 250).all() and (examples.images[i][90, 10] <= 5).all()
        np.testing.assert_array_equal(examples.images[i][100:, :],
                                      np.broadcast_to(np.round(config.mean_rgb), (28, SIZE, 3)))
    # Every record once (the first pass of the shuffled stream), each with its own box.
    np.testing.assert_allclose(sorted(shown_left_edges), [object_box(i)[1] for i in range(COUNT)],
                               atol=1e-3)


def run_tool(tool, *args, cwd):
    """tools/<tool>, or benchmarks/bench.py for "bench.py"."""
    folder = "benchmarks" if tool == "bench.py" else "tools"
    return subprocess.Popen([python(), os.path.join(REPO_ROOT, folder, tool)]
                            + list(args), cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_check_data_writes_the_preview_and_bench_measures_each_option(records, tmp_path):
    """Four tools at once: check-data with only --preview_png (flip and scale jitter on: the
    grid is the library's for that --seed); a bad --preview_images; the augment benchmark on a
    few small images; an unknown benchmark option."""
    tfrecord = write_tfrecord(str(tmp_path / "data.tfrecord"), records)
    preview = run_tool("check_data.py", "--file_pattern=data.tfrecord", "--output_png=",
                       "--hparams=image_size=64,num_classes=2", "--preview_png=grid.png",
                       "--preview_images=3", "--seed=2", cwd=tmp_path)
    bad_count = run_tool("check_data.py", "--file_pattern=data.tfrecord", "--preview_png=a.png",
                         "--preview_images=0", cwd=tmp_path)
    bench = run_tool("bench.py", "--what=augment", "--image_size=64", "--batch_size=2",
                     "--repeats=1", "--augment_options=baseline,grid_mask", "--notrain_step",
                     "--pipeline_images=8", "--data_dir=bench_data", cwd=tmp_path)
    bad_option = run_tool("bench.py", "--what=augment", "--augment_options=baseline,mosiac",
                          cwd=tmp_path)
    expected = preview_grid(augmented_examples(
        tiny_config(image_size=64, num_classes=2), TFRecordSource(tfrecord), 3, seed=2))

    out, err = preview.communicate(timeout=300)
    assert preview.returncode == 0, err[-3000:]
    assert "Augmented training images: grid.png" in out
    assert "Usable images           %d" % COUNT in out  # The check ran too.
    grid = np.asarray(Image.open(io.BytesIO((tmp_path / "grid.png").read_bytes())))
    assert grid.shape == (2 * 64 + GAP, 2 * 64 + GAP, 3)  # 3 tiles in a 2x2 grid.
    np.testing.assert_array_equal(grid, expected)
    assert any((grid == class_colour(c)).all(axis=-1).any() for c in (1, 2))  # Boxes drawn.
    assert [name for name in os.listdir(tmp_path) if name.startswith("grid")] == ["grid.png"]

    _, err = bad_count.communicate(timeout=300)
    assert bad_count.returncode == 1
    assert err.strip().splitlines()[-1] == \
        "efficientdet-check-data: --preview_images must be at least 1, got 0"

    out, err = bench.communicate(timeout=300)
    assert bench.returncode == 0, err[-3000:]
    lines = out.strip().splitlines()
    assert lines[1:3] == ["| option | --hparams | pipeline |", "|---|---|---|"]
    assert [line.split(" | ")[:2] for line in lines[3:]] == [
        ["| baseline", "(flip and scale jitter)"], ["| grid_mask", "grid_mask=true"]]
    assert all(float(line.split(" | ")[2].split()[0]) > 0 for line in lines[3:])

    _, err = bad_option.communicate(timeout=300)
    assert bad_option.returncode == 1
    assert err.strip().splitlines()[-1].startswith(
        "benchmarks/bench.py: --augment_options: unknown option(s) 'mosiac'; choose from "
        "baseline")
