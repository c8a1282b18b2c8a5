"""Training augmentation on decoded images and their boxes: flips and scale jitter,
AutoAugment and RandAugment, GridMask, mosaic and mixup."""
