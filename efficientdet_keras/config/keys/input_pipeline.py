"""Config keys of the input pipeline: normalisation, resizing, augmentation, label checks, and
where training's pipeline runs (data_service)."""

from efficientdet_keras.config.keys.checks import (ANY_VALUE, BOOLEAN, POSITIVE_NUMBER, Check,
                                                   integer_at_least, number_in, number_list,
                                                   one_of)
from efficientdet_keras.config.keys.choices import AUTOAUGMENT_POLICIES, RESIZE_MODES
from efficientdet_keras.config.keys.row import ConfigKey
from efficientdet_keras.utils.service_address import split_service_address

TITLE = "Input pipeline and augmentation"

_PROBABILITY = number_in(0.0, 1.0, high_open=False, noun="a probability")
_SERVICE_ADDRESS = Check(
    lambda value: value == "" or split_service_address(value) is not None,
    "empty (off) or a tf.data service dispatcher's address, grpc://host:port or host:port")

KEYS = (
    # ImageNet's channel statistics, on the 0-255 scale.
    ConfigKey(
        "mean_rgb", [0.485 * 255, 0.456 * 255, 0.406 * 255], "list of float",
        number_list(lengths=(1, 3)),
        "Subtracted from the input pixels (0-255 scale) before dividing by stddev_rgb: one "
        "value for all channels or three (R, G, B)."),
    ConfigKey(
        "resize_mode", "letterbox", "str", one_of(*RESIZE_MODES),
        "How an image is fitted to image_size, in training, evaluation and every export: "
        "letterbox (resized keeping its aspect ratio, padded at the bottom and right) or "
        "stretch (each axis resized on its own, as MediaPipe and the TFLite Task Library "
        "resize camera frames; train with it for those clients)."),
    ConfigKey(
        "tta", None, "str or null", one_of(None, "", "flip"),
        "Test-time augmentation of efficientdet-eval and the Detector: flip runs each image "
        "and its mirror image and fuses the two sets of detections by weighted box fusion; "
        "null: none. The trainer's own evaluation after each epoch stays plain."),
    ConfigKey(
        "stddev_rgb", [0.229 * 255, 0.224 * 255, 0.225 * 255], "list of float",
        number_list(lengths=(1, 3)),
        "Divides the input pixels (0-255 scale) after subtracting mean_rgb: one value or "
        "three (R, G, B)."),
    ConfigKey(
        "input_rand_hflip", True, "bool", ANY_VALUE,
        "Flip training images left to right with probability 0.5."),
    ConfigKey(
        "jitter_min", 0.1, "float", POSITIVE_NUMBER,
        "Scale jitter: smallest random scale of a training image, relative to image_size, "
        "before the random crop."),
    ConfigKey(
        "jitter_max", 2.0, "float", POSITIVE_NUMBER,
        "Scale jitter: largest random scale of a training image; evaluation always uses 1."),
    ConfigKey(
        "max_instances_per_image", 100, "int", integer_at_least(1),
        "Objects kept per image: the first ones; the rest are dropped, counted in the data "
        "report and efficientdet-check-data (the first few such records named in a "
        "warning). The labels are padded to this count."),
    # The stronger augmentations below are all off in the COCO recipe
    # (docs/guides/augmentation.md).
    ConfigKey(
        "autoaugment_policy", None, "str or null", one_of(*AUTOAUGMENT_POLICIES),
        "AutoAugment: a learned detection policy v0 ... v3, randaug (RandAugment with the two "
        "keys after this one), or null (off)."),
    ConfigKey(
        "randaugment_num_layers", 1, "int", integer_at_least(1),
        "randaug: operations applied to each training image."),
    ConfigKey(
        "randaugment_magnitude", 15.0, "float", number_in(0.0, 30.0, high_open=False),
        "randaug: strength of each operation on the policies' level scale, where 10 is their "
        "largest level."),
    ConfigKey(
        "grid_mask", False, "bool", BOOLEAN,
        "GridMask: cut a randomly placed, rotated grid of square holes from each training "
        "image."),
    ConfigKey(
        "mosaic", 0.0, "float", _PROBABILITY,
        "Probability that a training image is a mosaic of four images; 0: off."),
    ConfigKey(
        "mosaic_close_epochs", 0, "int", integer_at_least(0),
        "The last this many epochs train without mosaic (needs steps_per_epoch); 0: mosaic to "
        "the end."),
    ConfigKey(
        "mixup", 0.0, "float", _PROBABILITY,
        "Probability that a training image is blended with the one before it; 0: off."),
    ConfigKey(
        "skip_crowd_during_training", True, "bool", ANY_VALUE,
        "true: the loss ignores anchors on crowd boxes; false: crowd boxes train as ordinary "
        "objects."),
    ConfigKey(
        "strict_data", False, "bool", ANY_VALUE,
        "Class ids outside 1 .. num_classes: false drops those boxes with a warning, true "
        "stops at the first with an error naming the record."),
    ConfigKey(
        "data_service", "", "str", _SERVICE_ADDRESS,
        "The tf.data service dispatcher (grpc://host:port) whose workers decode, augment, "
        "label and batch the training images, for a trainer whose own CPUs cannot keep its "
        "accelerators busy (the train command's --data_service); empty: the trainer does it "
        "itself. Evaluation stays local."),
    ConfigKey(
        "cache", "", "str", one_of("", "ram", "disk"),
        "Keep the decoded training images after the first epoch, before augmentation: ram "
        "(memory), disk (files in <model_dir>/cache) or empty (decode every epoch). What it "
        "takes is printed before training starts, and refused when it does not fit."),
)
