"""Every graph training and serving run has a GPU kernel for each of its ops, proven on a CPU.

For every device setting (training/device_settings.py: float32, mixed_float16 and
mixed_bfloat16, XLA off and on, one device and MirroredStrategy, gradient checkpointing, the
TF-Hub fine-tuning trainer; the EMA is on in all of them) a tiny model with a trainable
backbone is built and the train, test and predict functions Model.fit and evaluate run are
traced, not run, in a child process per test class (tests/gpu_kernel_traces.py: a test
worker keeps none of the traces' memory). So is the serving graph of the detection SavedModel. Each graph, with every
function of its library (cond branches, while bodies, gradients, XLA clusters), is walked
(tests/gpu_kernels.py) and each op is looked up in TensorFlow's kernel registry, which a CUDA
build fills with its GPU kernels whether or not a GPU is present:
- outside XLA an op needs a GPU (or device-independent DEFAULT) kernel for its dtypes. The
  few that legitimately run on the host under soft placement are in ALLOWED_ON_HOST, with the
  reason, and none of them may take a resource (variable) input: such an op has to run on
  the variable's device.
- inside an XLA-compiled function (and all it calls) an op needs an XLA_GPU_JIT kernel.
Under MirroredStrategy the two logical CPUs are made to take MirroredStrategy's GPU code path
(each replica's step compiled on its own device, no merge_call in replica steps), which is
what runs on GPUs and differs from the CPU path.

What this proves: no op of these graphs silently falls back to the CPU on a GPU machine (a
copy to the host and back each step), no resource op fails to place, and XLA can lower every
op it is asked to compile. What only a real GPU can confirm: that the kernels are fast, that
cuDNN has algorithms for these shapes and dtypes, that the step fits in GPU memory, that XLA's
GPU compilation (not just its op lowering) succeeds, NCCL all-reduce, and the numbers.
"""

import pytest
import tensorflow as tf
import tf_keras as keras
from tensorflow.python.distribute import mirrored_run, mirrored_strategy

from gpu_kernel_traces import FUNCTIONS, TINY, trace_in_child
from gpu_kernels import XLA_GPU, KernelReport, check_kernels, register_xla_kernels
from helpers import built_once_per_run, tiny_config
from efficientdet_keras import EfficientDetNet
from efficientdet_keras.data.synthetic import write_synthetic_dataset
from efficientdet_keras.inference.serving_graph import DetectionModule, inference_network
from efficientdet_keras.training.device_settings import MIRRORED, ONE_DEVICE, SETTINGS

# Op types (or "Op[dtype]": the op with that dtype only) that may lack a GPU kernel outside
# XLA: TensorFlow places them on the host. None takes a resource input (checked).
ALLOWED_ON_HOST = {
    "NonMaxSuppressionV5": "NMS (hard and soft) has CPU kernels only; serving runs it on the "
                           "host per image on the top-k candidates",
    "DecodeImage": "JPEG/PNG decoding of the image_bytes and tf_example signatures: CPU only",
    "ParseExampleV2": "parsing the tf_example signature's serialized protos: CPU only",
    "Const[string]": "string constants (assert messages, parse keys) live in host memory",
    "StridedSlice[string]": "picking one encoded image of the batch: strings stay on the host",
}

ONE_DEVICE_SETTINGS = [s for s in SETTINGS if s.replicas == ONE_DEVICE and not s.hub]
MIRRORED_SETTINGS = [s for s in SETTINGS if s.replicas == MIRRORED and not s.hub]
HUB_SETTINGS = [s for s in SETTINGS if s.hub]

COMPUTE_DTYPES = {"float32": "float32", "mixed_float16": "float16",
                  "mixed_bfloat16": "bfloat16"}


def failure_message(setting: str, function: str, report: KernelReport) -> str:
    lines = ["%s, %s function: %d op(s) without the kernel the GPU would run:"
             % (setting, function, len(report.missing))]
    lines += ["  - " + missing.describe() for missing in report.missing]
    lines += ["  - %s is allowed on the host but takes a resource input" % node
              for node in report.allowed_with_resource]
    return "\n".join(lines)


def assert_compiled_as_set(setting, function: str, report: KernelReport) -> list:
    """What makes the graph other than the setting asks for (a list of problems): the
    convolutions must run at its compute dtype, inside XLA exactly when it uses XLA, and the
    train function must hold the backbone's backward convolutions too."""
    conv_ops = {"Conv2D", "DepthwiseConv2dNative"}
    if function == "train":
        conv_ops |= {"Conv2DBackpropFilter", "DepthwiseConv2dNativeBackpropFilter"}
    where = "XLA" if setting.uses_xla else "TensorFlow ops"
    ops, other = ((report.xla_op_types, report.op_types) if setting.uses_xla
                  else (report.op_types, report.xla_op_types))
    problems = ["%s, %s function: no %s among the %s" % (setting.name, function, op, where)
                for op in sorted(conv_ops - ops)]
    problems += ["%s, %s function: %s outside %s" % (setting.name, function, op, where)
                 for op in sorted(conv_ops & other)]
    wanted = COMPUTE_DTYPES[setting.precision]
    problems += ["%s, %s function: %s at %s, not %s" % (setting.name, function, op,
                                                       sorted(report.dtypes_of(op)), wanted)
                 for op in sorted(conv_ops) if wanted not in report.dtypes_of(op)]
    return problems


@pytest.fixture(scope="module", autouse=True)
def xla_kernels():
    register_xla_kernels()  # Until XLA is first used the registry lists none of its kernels.


@pytest.fixture(scope="module")
def tfrecord(tmp_path_factory) -> str:
    """Synthetic training records: the pipeline over them gives each setting its batch spec."""
    return write_synthetic_dataset(str(tmp_path_factory.mktemp("gpu_kernel_data")),
                                   num_train=2, num_val=1, image_size=64,
                                   seed=3).train_tfrecord


def traced(settings, tfrecord, **kwargs) -> dict:
    """{setting name: {function: KernelReport or (error type, message)}}, traced in a child
    process (gpu_kernel_traces: the traces' memory is not kept by the test worker)."""
    return trace_in_child(settings, tfrecord, ALLOWED_ON_HOST, **kwargs)


def checked(reports: dict, function: str) -> KernelReport:
    report = reports[function]
    assert isinstance(report, KernelReport), "%s tracing failed: %s: %s" % ((function,) + report)
    return report


def assert_setting_has_gpu_kernels(setting, reports: dict) -> None:
    """Every function of the setting traced, with a GPU kernel for each op, as configured;
    the message names each function's problems."""
    problems = []
    for function in FUNCTIONS:
        report = reports[function]
        if not isinstance(report, KernelReport):
            problems.append("%s, %s function: tracing failed: %s: %s" % (
                (setting.name, function) + report))
            continue
        if report.missing or report.allowed_with_resource:
            problems.append(failure_message(setting.name, function, report))
        problems += assert_compiled_as_set(setting, function, report)
    assert not problems, "\n".join(problems)


# One child process per class (xdist's loadscope gives a class to one worker); a mirrored
# trace is the costliest (the step is traced once per replica), hence two mirrored classes.
class TestOneDevice:
    @pytest.fixture(scope="class")
    def reports(self, tfrecord):
        return traced(ONE_DEVICE_SETTINGS, tfrecord)

    @pytest.mark.parametrize("setting", ONE_DEVICE_SETTINGS, ids=lambda s: s.name)
    def test_every_op_has_a_gpu_kernel(self, setting, reports):
        assert_setting_has_gpu_kernels(setting, reports[setting.name])


def check_mirrored(setting, reports) -> None:
    assert_setting_has_gpu_kernels(setting, reports)
    # On the GPU path each replica's step is its own XLA function (on the CPU path one
    # function would hold both replicas): the graphs checked are the GPU path's.
    for function in FUNCTIONS:
        roots = checked(reports, function).xla_roots
        assert len(roots) == (2 if setting.uses_xla else 0), (setting.name, function, roots)


MIRRORED_PLAIN = [s for s in MIRRORED_SETTINGS if not s.uses_xla]
MIRRORED_XLA = [s for s in MIRRORED_SETTINGS if s.uses_xla]


@pytest.mark.slow  # TestOneDevice and test_distribute keep the mirrored GPU path in make test.
class TestMirrored:
    @pytest.fixture(scope="class")
    def reports(self, tfrecord):
        return traced(MIRRORED_PLAIN, tfrecord)

    @pytest.mark.parametrize("setting", MIRRORED_PLAIN, ids=lambda s: s.name)
    def test_every_op_has_a_gpu_kernel(self, setting, reports):
        check_mirrored(setting, reports[setting.name])


@pytest.mark.slow
class TestMirroredXLA:
    @pytest.fixture(scope="class")
    def reports(self, tfrecord):
        return traced(MIRRORED_XLA, tfrecord)

    @pytest.mark.parametrize("setting", MIRRORED_XLA, ids=lambda s: s.name)
    def test_every_op_has_a_gpu_kernel(self, setting, reports):
        check_mirrored(setting, reports[setting.name])


@pytest.fixture(scope="module")
def hub_module(tmp_path_factory):
    """A feature module exported from a float32 model of the tiny architecture (built once
    per test run, shared by the xdist workers)."""
    def build(folder):
        from efficientdet_keras.exporters.hub_module import export_feature_module
        source = EfficientDetNet(config=tiny_config(**TINY))
        source.build_variables()
        export_feature_module(source, folder)
        keras.backend.clear_session()
    return built_once_per_run(tmp_path_factory, "gpu_kernels_hub_module", build)


@pytest.mark.slow  # TestOneDevice keeps the GPU path, test_export the hub fine-tune.
class TestHubTrainer:
    @pytest.fixture(scope="class")
    def reports(self, tfrecord, hub_module):
        return traced(HUB_SETTINGS, tfrecord, hub_module=hub_module)

    @pytest.mark.parametrize("setting", HUB_SETTINGS, ids=lambda s: s.name)
    def test_every_op_has_a_gpu_kernel(self, setting, reports):
        assert_setting_has_gpu_kernels(setting, reports[setting.name])


def test_every_setting_is_checked():
    checked_settings = ONE_DEVICE_SETTINGS + MIRRORED_SETTINGS + HUB_SETTINGS
    assert sorted(s.name for s in checked_settings) == sorted(s.name for s in SETTINGS)


class TestServing:
    """The detection SavedModel's graph (exporters/saved_model.py): pre-processing, the folded
    network and NMS. detect_examples calls detect_encoded, so two traces cover all three
    signatures."""

    @pytest.fixture(scope="class")
    def model(self):
        model = EfficientDetNet(config=tiny_config(**TINY))
        model.build_variables()
        yield model
        keras.backend.clear_session()

    @pytest.mark.parametrize("precision", ["float32", "float16", "bfloat16"])
    def test_every_op_has_a_gpu_kernel(self, model, precision):
        network = inference_network(model, fold_batch_norm=True,
                                    mixed_precision=None if precision == "float32" else precision)
        module = DetectionModule(network, network.config)
        problems, allowed = [], set()
        for signature in (module.detect_images, module.detect_examples):
            report = check_kernels(signature.get_concrete_function().graph.as_graph_def(),
                                   ALLOWED_ON_HOST)
            if report.missing or report.allowed_with_resource:
                problems.append(failure_message("serving " + precision,
                                                "serving " + signature.__name__, report))
            if precision not in report.dtypes_of("Conv2D"):
                problems.append("serving %s, %s: Conv2D ran at %s" % (
                    precision, signature.__name__, sorted(report.dtypes_of("Conv2D"))))
            allowed.update(report.allowed)
        assert not problems, "\n".join(problems)
        # The allowlist is as short as the graphs allow: the serving graphs need every entry
        # (the training graphs need none), so an entry no graph needs any more fails here.
        assert allowed == set(ALLOWED_ON_HOST), sorted(set(ALLOWED_ON_HOST) - allowed)


# --- the check has teeth ------------------------------------------------------------------

def test_an_op_without_a_gpu_kernel_is_reported(tfrecord):
    """The train function with the EMA update written with ResourceApplyProximalGradientDescent
    (gpu_kernel_traces.proximal_ema_update) fails the check, naming the op and its kernels'
    devices."""
    setting = ONE_DEVICE_SETTINGS[0]
    assert setting.precision == "float32" and not setting.uses_xla
    reports = traced([setting], tfrecord, functions=["train"], old_ema=True)
    report = checked(reports[setting.name], "train")
    assert [m.op_type for m in report.missing] == ["ResourceApplyProximalGradientDescent"]
    assert "GPU" not in report.missing[0].devices
    message = failure_message(setting.name, "train", report)
    assert message.startswith("float32, train function: 1 op(s)")
    assert "ResourceApplyProximalGradientDescent needs a GPU kernel; it has kernels for [CPU, " \
        in message


def test_the_walk_reaches_nested_xla_functions_dtypes_and_resources():
    """Found: ops without an XLA kernel in a cond branch of an XLA-compiled function, a node
    whose dtype the op's GPU kernels lack, and an allowlisted op that takes a resource (the
    allowlist cannot excuse an op that must run where its variable is)."""
    variable = tf.Variable(1.0)

    @tf.function(jit_compile=True)
    def compiled(x):
        return tf.cond(x > 0, lambda: tf.strings.length(tf.strings.as_string(x)),
                       lambda: tf.constant(0))

    @tf.function
    def host(x):
        tf.print(x)  # StringFormat and PrintV2: host only, no resource input.
        tf.raw_ops.ResourceApplyProximalGradientDescent(
            var=variable.handle, alpha=0.1, l1=0.0, l2=0.0, delta=x)
        ints = tf.cast(tf.fill([2, 2], x), tf.int32)
        return compiled(x), tf.linalg.matmul(ints, ints)

    graph = host.get_concrete_function(tf.TensorSpec([], tf.float32)).graph.as_graph_def()
    report = check_kernels(graph, {"PrintV2": "", "StringFormat": ""})
    missing = {(m.op_type, m.needed) for m in report.missing}
    assert missing == {("AsString", XLA_GPU), ("StringLength", XLA_GPU), ("MatMul", "GPU"),
                       ("ResourceApplyProximalGradientDescent", "GPU")}
    assert report.allowed.keys() == {"PrintV2", "StringFormat"}
    assert not report.allowed_with_resource
    excused = check_kernels(graph, {"ResourceApplyProximalGradientDescent": ""})
    assert [n.split()[0] for n in excused.allowed_with_resource] == [
        "ResourceApplyProximalGradientDescent"]
    assert "int32" in report.dtypes_of("MatMul") and report.xla_roots


def force_gpu_code_path(monkeypatch) -> None:
    """MirroredStrategy on the logical CPUs takes its GPU path: each replica's step compiled
    on its own device under XLA, replica steps without merge_call (gpu_kernel_traces does the
    same in its child process)."""
    for module in (mirrored_run, mirrored_strategy):
        monkeypatch.setattr(module, "_is_gpu_device", lambda device: True)


def test_merge_call_in_an_xla_replica_step_fails_to_trace(two_cpu_strategy, monkeypatch):
    """Why the train step writes no ONLY_FIRST_REPLICA (on-write) variable in replica
    context: with a tensor value such a write broadcasts the first replica's value through
    merge_call, which a replica step XLA compiles on the GPU path cannot make (each replica's
    step is its own graph). A replica-local (ON_READ) variable takes the same write."""
    force_gpu_code_path(monkeypatch)
    with two_cpu_strategy.scope():
        on_write = tf.Variable(tf.constant(0, tf.int64), trainable=False,
                               aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        replica_local = tf.Variable(tf.constant(0, tf.int64), trainable=False,
                                    synchronization=tf.VariableSynchronization.ON_READ,
                                    aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)

    def train_step_writing(variable):
        @tf.function(jit_compile=True)
        def replica_step():
            variable.assign_add(tf.ones([], tf.int64))

        @tf.function
        def train_step():
            two_cpu_strategy.run(replica_step)
        return train_step

    with pytest.raises(RuntimeError, match="merge_call. called while defining a new graph"):
        train_step_writing(on_write).get_concrete_function()
    train_step_writing(replica_local).get_concrete_function()
