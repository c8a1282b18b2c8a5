"""The per-example steps of an input pipeline: augment, resize and normalise, then label.

Each step of a training example draws from stateless seeds made from the pipeline's seed
and the element's number (`op_seed`), so the draws repeat for the same seed and index.
"""

from typing import Optional, Sequence

import numpy as np
import tensorflow as tf

from efficientdet_keras.config.precision import policy_from_config
from efficientdet_keras.data.augmentation import augment, autoaugment, gridmask, mixing
from efficientdet_keras.detection.anchors import AnchorLabeler

# Each augmentation after flip and jitter folds its own number into the element's seed.
_OP_SEED_SALTS = {"policy": 1, "grid_mask": 2, "mosaic": 3, "mixup": 4}


def op_seed(seed: Optional[int], index: tf.Tensor, op: str) -> tf.Tensor:
    """The stateless seed pair of augmentation `op` for the element numbered `index`."""
    base = tf.stack([tf.constant(seed or 0, tf.int64), tf.cast(index, tf.int64)])
    return tf.random.experimental.stateless_fold_in(base, _OP_SEED_SALTS[op])


class RowNormalizer:
    """(image - mean) / stddev per channel for float `[H, W, 3]` images at most `max_width`
    wide, with the same values as broadcasting over the image (`mean` and `stddev`: a value
    per channel, or one for all).

    Broadcasting a `[3]` vector over every pixel is among the slowest patterns of TensorFlow's
    CPU kernels, and on a 512 x 512 image it cost more than the rest of the augmentation. Here
    each image row is flattened to `W * 3` values and the mean and stddev come as rows of
    `W * 3` values, broadcast only down the rows.
    """

    def __init__(self, mean: Sequence[float], stddev: Sequence[float], max_width: int):
        self.channels = 3
        per_channel = [np.broadcast_to(np.asarray(v, np.float32).reshape(-1), [self.channels])
                       for v in (mean, stddev)]
        self.mean_row, self.stddev_row = (np.tile(v, int(max_width)) for v in per_channel)

    def __call__(self, image: tf.Tensor) -> tf.Tensor:
        shape = tf.shape(image)
        row_values = shape[1] * self.channels
        rows = tf.reshape(image, [shape[0], row_values])
        normalized = ((rows - tf.constant(self.mean_row)[:row_values])
                      / tf.constant(self.stddev_row)[:row_values])
        return tf.reshape(normalized, shape)


class ExampleTransforms:
    """Turns one decoded example into the (image, labels) pair of a batch element.

    Args:
      config: the model config (image_size, levels, anchors, augmentation, normalisation,
        max_instances_per_image, mixed_precision).
      is_training: augment (flip, AutoAugment / RandAugment, scale jitter and crop, GridMask)
        and drop the boxes the crop emptied; otherwise an aspect-preserving resize and pad.
      seed: with each element's index, picks the augmentation draws.
    """

    def __init__(self, config, is_training: bool, seed: Optional[int]):
        self.config = config
        self.is_training = is_training
        self.seed = seed
        self.image_size = tuple(config.image_size)
        self.labeler = AnchorLabeler(config, self.image_size)
        self.compute_dtype = policy_from_config(config).compute_dtype
        # The crop the normaliser gets is at most the input's width.
        self._normalize = RowNormalizer(config.mean_rgb, config.stddev_rgb, self.image_size[1])

    def prepare(self, index: tf.Tensor, example):
        """Augments, resizes, normalises and labels one decoded example.

        `index` (int64 scalar) with the seed picks the augmentation draws.
        """
        return self.label(self.augment(index, example))

    def augment(self, index: tf.Tensor, example):
        """One decoded example, augmented (training only), resized and normalised.

        Returns:
          image float32 [H, W, 3] at the input size; boxes [N, 4] in input pixels (training
          drops those the crop emptied), classes, is_crowd, area [N]; image_scale (original
          pixels per input pixel; [y, x] with resize_mode stretch); image_id.
        """
        config = self.config
        image, boxes = example["image"], example["boxes"]
        if self.is_training:
            # Flip and jitter keep the draws they always had; later options fold in their own.
            seeds = tf.random.experimental.stateless_split(
                tf.stack([tf.constant(self.seed or 0, tf.int64), index]), 2)
            if config.input_rand_hflip:
                image, boxes = augment.random_horizontal_flip(image, boxes, seeds[0])
            image, boxes = self.autoaugment(image, boxes, op_seed(self.seed, index, "policy"))
            scale_range = (config.jitter_min, config.jitter_max)
        else:
            seeds, scale_range = [None, None], (1.0, 1.0)
        image, boxes, image_scale, _ = augment.resize_crop_pad(
            image, boxes, self.image_size, scale_range, seeds[1], normalize=self._normalize,
            stretch=config.resize_mode == "stretch")
        instances = {key: example[key] for key in mixing.INSTANCE_KEYS}
        instances["boxes"] = boxes
        if self.is_training:
            if config.grid_mask:
                image = gridmask.grid_mask(image, op_seed(self.seed, index, "grid_mask"))
            # Objects the crop cut away are gone.
            keep = augment.non_empty_boxes(boxes)
            instances = {key: tf.boolean_mask(value, keep) for key, value in instances.items()}
        return dict(instances, image=image, image_scale=image_scale,
                    image_id=example["image_id"])

    def autoaugment(self, image, boxes, seed):
        """The config's AutoAugment policy or RandAugment on the uint8 image (or neither)."""
        policy = self.config.autoaugment_policy
        if not policy:
            return image, boxes
        if policy == "randaug":
            return autoaugment.distort_image_with_randaugment(
                image, boxes, self.config.randaugment_num_layers,
                self.config.randaugment_magnitude, seed)
        return autoaugment.distort_image_with_autoaugment(image, boxes, policy, seed)

    def label(self, example):
        """Anchor targets and padded ground truth for one augmented example (see augment)."""
        config = self.config
        boxes, classes = example["boxes"], example["classes"]
        is_crowd, area = example["is_crowd"], example["area"]
        # Crowd boxes are never positives; with skip_crowd_during_training the
        # anchors inside them are ignored, otherwise they are ordinary objects.
        ignore = is_crowd if config.skip_crowd_during_training else tf.zeros_like(is_crowd)
        class_targets, box_targets, num_positives = self.labeler.label(boxes, classes, ignore)

        labels = {"num_positives": num_positives, "source_ids": example["image_id"],
                  "image_scales": example["image_scale"]}
        for level in class_targets:
            labels["class_targets_%d" % level] = class_targets[level]
            labels["box_targets_%d" % level] = box_targets[level]
        labels.update(self._pad_groundtruth(boxes, classes, is_crowd, area))
        return tf.cast(example["image"], self.compute_dtype), labels

    def _pad_groundtruth(self, boxes, classes, is_crowd, area):
        max_instances = self.config.max_instances_per_image
        pad = max_instances - tf.shape(classes)[0]

        def padded(tensor, value, inner=()):
            paddings = [[0, pad]] + [[0, 0]] * len(inner)
            return tf.ensure_shape(tf.pad(tensor, paddings, constant_values=value),
                                   (max_instances,) + tuple(inner))

        return {"groundtruth_boxes": padded(boxes, 0.0, (4,)),
                "groundtruth_classes": padded(classes, -1),
                "groundtruth_is_crowd": padded(is_crowd, False),
                "groundtruth_area": padded(area, 0.0)}
