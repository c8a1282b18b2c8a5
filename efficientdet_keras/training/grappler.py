"""Grappler passes that training turns off, for the calling thread's function calls only.

TensorFlow optimises a tf.function's graph with Grappler when the function first runs.
For a training step (a graph of tens of thousands of nodes) that is most of the time to the
first step on a CPU, and some passes buy nothing there: the memory optimizer's heuristics
(swapping to host memory, recomputation hints) are for accelerators. Which passes run is
part of the config a function call carries, taken from this thread's function-call options;
`grappler_passes_off` swaps those for a copy with the passes off and puts them back after.
A function must run under the same options every time: under others it is optimised again.
"""

import contextlib
from typing import Sequence, Tuple, Union

import tensorflow as tf
from tensorflow.core.protobuf import rewriter_config_pb2
from tensorflow.python.eager import context

from efficientdet_keras.config import GRAPPLER_PASSES as PASSES

# What grappler_off="auto" turns off on a machine without GPUs or TPUs. The memory optimizer
# off shortens the first step on a CPU without slowing later steps and lowers peak memory.
# Other passes stay on: turning them off gains nothing reliable, and constant folding off
# raises peak memory. "second_iteration" stays on too: skipping Grappler's second round
# shortens the first step, but its remapper fuses more nodes, so every later step is faster.
CPU_PASSES_OFF = ("memory_optimization",)


def resolve_passes(setting: Union[str, Sequence[str], None]) -> Tuple[str, ...]:
    """The passes of a `grappler_off` config value: "auto" (CPU_PASSES_OFF when this process
    sees no GPU or TPU, else none), none/empty, one name or a list of names."""
    if setting == "auto":
        accelerators = tf.config.list_logical_devices("GPU") + \
            tf.config.list_logical_devices("TPU")
        return () if accelerators else CPU_PASSES_OFF
    if not setting:
        return ()
    names = (setting,) if isinstance(setting, str) else tuple(setting)
    unknown = [name for name in names if name not in PASSES]
    if unknown:
        raise ValueError("grappler_off: unknown pass(es) %s; choose from auto, %s"
                         % (", ".join(map(repr, unknown)), ", ".join(PASSES)))
    return names


@contextlib.contextmanager
def grappler_passes_off(passes: Sequence[str]):
    """Runs the body with `passes` (names from PASSES) off for tf.functions this thread calls.

    "second_iteration" is not a pass but Grappler's second round over them
    (meta_optimizer_iterations ONE instead of the default TWO)."""
    if not passes:
        yield
        return
    ctx = context.context()
    previous = ctx.function_call_options
    config = tf.compat.v1.ConfigProto.FromString(previous.config_proto_serialized)
    rewrite = config.graph_options.rewrite_options
    for name in passes:
        if name == "memory_optimization":  # An enum of its own, not an on/off toggle.
            rewrite.memory_optimization = rewriter_config_pb2.RewriterConfig.NO_MEM_OPT
        elif name == "second_iteration":
            rewrite.meta_optimizer_iterations = rewriter_config_pb2.RewriterConfig.ONE
        else:
            setattr(rewrite, name, rewriter_config_pb2.RewriterConfig.OFF)
    ctx.function_call_options = context.FunctionCallOptions(
        executor_type=previous.executor_type, config_proto=config)
    try:
        yield
    finally:
        ctx.function_call_options = previous
