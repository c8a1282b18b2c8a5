"""The names some config keys choose from.

The code that reads these keys accepts the same names; they are spelled out here because
that code imports TensorFlow and checking a config must not (tests/test_config_reference.py
compares the two): model/layers.py (activations), model/bifpn.py (fusion, pooling),
model/efficientnet.py (backbones), config/precision.py, detection/losses.py,
detection/postprocess.py, training/optimizers.py, training/runtime.py and
training/grappler.py.
"""

ACTIVATIONS = ("swish", "silu", "swish_native", "relu", "relu6", "hswish", "leaky_relu",
               "mish")

BACKBONES = tuple("efficientnet-b%d" % i for i in range(8)) + tuple(
    "efficientnet-lite%d" % i for i in range(5))

FPN_WEIGHT_METHODS = ("fastattn", "attn", "channel_attn", "channel_fastattn", "sum")
POOLING_TYPES = ("max", "avg")

# How an image meets the network input: keeping its aspect ratio and padding (letterbox), or
# resized to the input on each axis alone, as MediaPipe and the Task Library do (stretch).
RESIZE_MODES = ("letterbox", "stretch")
# Off, the detection policies v0-v3, RandAugment.
AUTOAUGMENT_POLICIES = (None, "v0", "v1", "v2", "v3", "randaug")

# iou_loss_type and nms_configs.method also take null and "": the loss is then off (the
# trainer tests truthiness) and post-processing runs hard NMS.
IOU_LOSS_TYPES = ("iou", "giou", "diou", "ciou")
NMS_METHODS = ("hard", "gaussian", "combined", "global")

OPTIMIZERS = ("sgd", "adam", "rmsprop")
LR_DECAY_METHODS = ("cosine", "stepwise", "polynomial", "constant")

MIXED_PRECISION_VALUES = (False, True, "float16", "bfloat16", "float32", None)
STRATEGIES = ("", "gpus", "multi-worker", "tpu")
# Fields of TensorFlow's RewriterConfig; "second_iteration" is Grappler's second round over
# all the passes.
GRAPPLER_PASSES = ("memory_optimization", "arithmetic_optimization", "dependency_optimization",
                   "constant_folding", "layout_optimizer", "remapping", "loop_optimization",
                   "shape_optimization", "function_optimization", "second_iteration")
