"""The EfficientDet network: BiFPN, prediction heads and the full model."""

from efficientdet_keras.model.efficientdet import EfficientDetNet, num_anchors_per_location

__all__ = ["EfficientDetNet", "num_anchors_per_location"]
