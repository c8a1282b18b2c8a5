"""The traces test_gpu_kernels checks, made in a child process.

Tracing a setting's train, test and predict functions keeps a few hundred megabytes in the
process that did it, even after the model is dropped; the settings together would leave
gigabytes in a test worker that runs the rest of the suite after them. `trace_in_child` traces
a list of settings in a fresh process (spawned, so it shares no TensorFlow state with the
test process) and returns their KernelReports; its memory goes back when it exits.
"""

import multiprocessing
from typing import Dict, Optional, Sequence, Tuple, Union

FUNCTIONS = ("train", "test", "predict")

# Small BiFPN and heads at 64 px over 3 levels (levels 6 and 7 only repeat the ops of the
# others); the backbone (all of EfficientNet-b0) is trained, so its backward kernels are in
# the train graphs.
TINY = dict(image_size=64, fpn_num_filters=16, fpn_cell_repeats=1, box_class_repeats=1,
            backbone_blocks_per_stage=1,
            batch_size=2, max_level=5)

# What tracing one function gave: its KernelReport, or (error type, message) when it failed.
Traced = Union["KernelReport", Tuple[str, str]]  # noqa: F821


def setting_config(setting):
    from helpers import tiny_config
    return tiny_config(**dict(TINY, **setting.overrides))


def zero_batches(config, tfrecord: str):
    """A dataset of zero batches with the element spec of the training pipeline for `config`
    (InputPipeline over `tfrecord`). Zeros, not the pipeline itself: only the spec shapes a
    trace, and the pipeline's threads would compete with tracing for the CPU."""
    import tensorflow as tf

    from efficientdet_keras.data.pipeline import InputPipeline
    from efficientdet_keras.data.sources import TFRecordSource
    spec = InputPipeline(config, TFRecordSource(tfrecord), is_training=True,
                         batch_size=config.batch_size, seed=0)().element_spec
    zeros = tf.nest.map_structure(lambda s: tf.zeros(s.shape, s.dtype), spec)
    return tf.data.Dataset.from_tensors(zeros).repeat()


def proximal_ema_update(self, step, apply=True) -> None:
    """ExponentialMovingAverage.update written with one ResourceApplyProximalGradientDescent
    per variable (alpha = -rate / (1 - rate), l1 = 0, l2 = -1 make it
    shadow = (1 - rate) * shadow + rate * weight): an op GPUs have no kernel for."""
    import tensorflow as tf
    rate = (1.0 - self.decay_at(step)) * tf.cast(apply, tf.float32)
    alpha = -rate / (1.0 - rate)
    scalars = {}
    for shadow, source in zip(self.shadows, self._sources):
        if shadow.dtype not in scalars:
            scalars[shadow.dtype] = (tf.cast(alpha, shadow.dtype),
                                     tf.constant(0, shadow.dtype), tf.constant(-1, shadow.dtype))
        scaled_alpha, l1, l2 = scalars[shadow.dtype]
        tf.raw_ops.ResourceApplyProximalGradientDescent(
            var=shadow.handle, alpha=scaled_alpha, l1=l1, l2=l2,
            delta=tf.cast(source, shadow.dtype))


def _trace_settings(names: Sequence[str], tfrecord: str, allowed_on_host: Dict[str, str],
                    hub_module: Optional[str], functions: Sequence[str],
                    old_ema: bool) -> Dict[str, Dict[str, Traced]]:
    """In the child: {setting name: {function: Traced}}. Mirrored settings run on two
    logical CPUs made to take MirroredStrategy's GPU code path (each replica's step compiled
    on its own device under XLA, replica steps without merge_call)."""
    import tensorflow as tf
    import tf_keras as keras
    from tensorflow.python.distribute import mirrored_run, mirrored_strategy

    from gpu_kernels import check_kernels, register_xla_kernels
    from efficientdet_keras.training import ema
    from efficientdet_keras.training.device_settings import MIRRORED, setting_named
    from efficientdet_keras.training.trainer import EfficientDetNetTrain

    settings = [setting_named(name) for name in names]
    strategy = tf.distribute.get_strategy()
    if any(setting.replicas == MIRRORED for setting in settings):
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        for module in (mirrored_run, mirrored_strategy):
            module._is_gpu_device = lambda device: True  # noqa: SLF001 (this process only)
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    register_xla_kernels()
    if old_ema:
        ema.ExponentialMovingAverage.update = proximal_ema_update
    results = {}
    for setting in settings:
        config = setting_config(setting)
        setting_strategy = strategy if setting.replicas == MIRRORED else \
            tf.distribute.get_strategy()
        dataset = zero_batches(config, tfrecord)
        if setting.replicas == MIRRORED:
            dataset = setting_strategy.experimental_distribute_dataset(dataset)
        with setting_strategy.scope():
            if setting.hub:
                from efficientdet_keras.training.hub_trainer import EfficientDetNetTrainHub
                model = EfficientDetNetTrainHub(config, hub_module_url=hub_module)
            else:
                model = EfficientDetNetTrain(config)
            model.compile(steps_per_epoch=10)
        assert not model.config.var_freeze_expr and model.ema is not None
        reports = {}
        for function in functions:
            make = getattr(model, "make_%s_function" % function)
            try:
                graph = make().get_concrete_function(iter(dataset)).graph.as_graph_def()
            except Exception as error:  # noqa: BLE001 (the setting's test reports it)
                reports[function] = (type(error).__name__, str(error).strip())
                continue
            reports[function] = check_kernels(graph, allowed_on_host)
        results[setting.name] = reports
        del model
        keras.backend.clear_session()
    return results


def trace_in_child(settings, tfrecord: str, allowed_on_host: Dict[str, str],
                   hub_module: Optional[str] = None, functions: Sequence[str] = FUNCTIONS,
                   old_ema: bool = False) -> Dict[str, Dict[str, Traced]]:
    """{setting name: {function: KernelReport, or (error type, message)}} for `settings`,
    traced in one fresh process. old_ema: with the EMA update written as proximal_ema_update."""
    context = multiprocessing.get_context("spawn")  # No TensorFlow state from this process.
    with context.Pool(1) as pool:
        return pool.apply(_trace_settings, ([s.name for s in settings], tfrecord,
                                            dict(allowed_on_host), hub_module, list(functions),
                                            old_ema))
