"""What opening a dataset folder costs before the first step (bench.py --what=open_data): a
COCO folder of --images 640x480 JPEGs in train and val, timed as `open_dataset` and reading
each split's records (JSON, image files checked, image headers read for EXIF turns), and as
`describe()` (its checks across splits: file sizes, hashes where sizes match, classes, boxes).
Medians over --repeats, with the per-image cost of each."""

import json
import os

import numpy as np

from benchmarks.common import DATA_DIR, median_seconds


def write_coco_folder(root: str, images: int) -> str:
    """root/annotations/instances_{train,val}.json with 4/5 and 1/5 of `images` JPEGs in
    root/train/ and root/val/, three boxes each; written once and reused."""
    from PIL import Image
    marker = os.path.join(root, "done-%d" % images)
    if os.path.exists(marker):
        return root
    rng = np.random.default_rng(0)
    for split, count in (("train", images * 4 // 5), ("val", images - images * 4 // 5)):
        os.makedirs(os.path.join(root, split), exist_ok=True)
        entries, annotations = [], []
        for i in range(count):
            name = "%s_%06d.jpg" % (split, i)
            pixels = np.zeros([480, 640, 3], np.uint8)
            pixels[:, :, 0] = rng.integers(0, 255)
            for _ in range(3):
                y, x = rng.integers(0, 400), rng.integers(0, 560)
                pixels[y:y + 80, x:x + 80] = rng.integers(0, 255, 3)
            Image.fromarray(pixels).save(os.path.join(root, split, name), quality=80)
            entries.append({"id": i + 1, "file_name": name, "height": 480, "width": 640})
            for k in range(3):
                annotations.append({"id": len(annotations) + 1, "image_id": i + 1,
                                    "category_id": 1 + k, "bbox": [40.0 * k, 30.0, 100.0, 80.0],
                                    "area": 8000.0, "iscrowd": 0})
        os.makedirs(os.path.join(root, "annotations"), exist_ok=True)
        with open(os.path.join(root, "annotations", "instances_%s.json" % split), "w") as f:
            json.dump({"images": entries, "annotations": annotations,
                       "categories": [{"id": k, "name": "class%d" % k} for k in (1, 2, 3)]}, f)
    open(marker, "w").close()
    return root


def bench_open_data(images: int, repeats: int) -> None:
    from efficientdet_keras.data.datasets import open_dataset
    root = write_coco_folder(os.path.join(DATA_DIR, "open_data"), images)

    def read():
        dataset = open_dataset(root)
        for split in dataset.splits:
            dataset.split(split).records  # noqa: B018 - reads them.
        return dataset

    dataset = read()
    read_s = median_seconds(read, repeats)
    describe_s = median_seconds(dataset.describe, repeats)
    print("open_data: COCO folder of %d images (640x480 JPEG), medians of %d runs" % (images,
                                                                                    repeats))
    print("  open_dataset and read the records: %.3f s (%.0f us per image)"
          % (read_s, 1e6 * read_s / images))
    print("  describe() with its checks:        %.3f s (%.0f us per image)"
          % (describe_s, 1e6 * describe_s / images))
