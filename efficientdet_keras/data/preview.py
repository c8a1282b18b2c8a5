"""What the model trains on: the training pipeline's first images, augmented, with their boxes.

    examples = augmented_examples(config, source, count=16, seed=0)
    grid = preview_grid(examples, label_map={1: "circle", 2: "square"})   # uint8 [H', W', 3]
    write_preview("augmented.png", config, source, count=16, seed=0, label_map=label_map)

The images come from `InputPipeline(config, source, is_training=True, seed=seed)`, the
pipeline training uses, so every augmentation key of the config applies; the seed picks the
order and the augmentation draws (the same seed, the same images). They are de-normalised with
the config's mean_rgb and stddev_rgb back to uint8; padding shows as the mean colour. Boxes are
drawn with `drawing.draw_boxes` (the class names of the label map) and the tiles laid out with
`drawing.image_grid`.
"""

import dataclasses
from typing import Mapping, Optional

import numpy as np

from efficientdet_keras.data.pixels import pipeline_images_to_uint8
from efficientdet_keras.utils.drawing import draw_boxes, encode_png, image_grid
from efficientdet_keras.utils.fileio import write_bytes_atomically


@dataclasses.dataclass
class AugmentedExamples:
    """Training examples as the model gets them, in pixels of the network input.

    images: uint8 [N, H, W, 3], de-normalised.
    boxes: float32 [N, max_instances_per_image, 4], [ymin, xmin, ymax, xmax] in input pixels.
    classes: int32 [N, max_instances_per_image], -1 where padded.
    """
    images: np.ndarray
    boxes: np.ndarray
    classes: np.ndarray


def augmented_examples(config, source, count: int, seed: int = 0) -> AugmentedExamples:
    """The first `count` images of the training pipeline (one batch of `count`).

    Args:
      config: the model config (image_size, normalisation, augmentation keys).
      source: a data source (TFRecordSource, CocoSource, RecordsSource, ...).
      count: how many images (>= 1).
      seed: the pipeline's seed (order and augmentation draws).
    """
    from efficientdet_keras.data.pipeline import InputPipeline
    if count < 1:
        raise ValueError("the preview needs at least one image, got count=%d" % count)
    pipeline = InputPipeline(config, source, is_training=True, batch_size=count, seed=seed)
    images, labels = next(iter(pipeline().take(1)))
    return AugmentedExamples(pipeline_images_to_uint8(images.numpy(), config),
                             labels["groundtruth_boxes"].numpy(),
                             labels["groundtruth_classes"].numpy())


def preview_grid(examples: AugmentedExamples, label_map: Optional[Mapping[int, str]] = None,
                 columns: Optional[int] = None) -> np.ndarray:
    """The examples with their boxes and class names drawn, as one grid image.

    Returns:
      uint8 [rows * (H + 4) - 4, columns * (W + 4) - 4, 3] (drawing.image_grid: 4 px gaps,
      default columns ceil(sqrt(N))).
    """
    tiles = [draw_boxes(image, boxes, classes, label_map=label_map)
             for image, boxes, classes in zip(examples.images, examples.boxes, examples.classes)]
    return image_grid(tiles, columns)


def write_preview(path: str, config, source, count: int = 16, seed: int = 0,
                  label_map: Optional[Mapping[int, str]] = None) -> str:
    """Writes the preview grid of the first `count` training images as a PNG (atomically)."""
    grid = preview_grid(augmented_examples(config, source, count, seed), label_map)
    return write_bytes_atomically(path, encode_png(grid))
