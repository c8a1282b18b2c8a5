"""Backbones that feed the BiFPN."""

from efficientdet_keras.backbone.efficientnet import EfficientNetBackbone, block_specs

__all__ = ["EfficientNetBackbone", "block_specs"]
