"""Process-wide TensorFlow settings for a run, set in one place and undoable.

The model itself sets no global state (precision is passed to each layer and
XLA to compile()); what is truly global — random seeds, op determinism, eager
debugging and the distribution strategy — is chosen here from flags and the config.
"""

import contextlib
import json
import os
from typing import Optional

import numpy as np
import tensorflow as tf
import tf_keras as keras
from absl import logging
# enable_op_determinism's counterpart, not exported by tf.config.
from tensorflow.python.framework import config as tf_framework_config

from efficientdet_keras.config.precision import policy_name
from efficientdet_keras.utils.service_address import check_reachable

STRATEGIES = ("", "gpus", "multi-worker", "tpu")


def get_strategy(name: str, tpu: str = "", tpu_zone: Optional[str] = None,
                 gcp_project: Optional[str] = None) -> tf.distribute.Strategy:
    """'' (the default device), 'gpus' (MirroredStrategy over local GPUs, or the CPU),
    'multi-worker' (MultiWorkerMirroredStrategy from TF_CONFIG) or 'tpu' (TPUStrategy on
    `tpu`, with `tpu_zone` and `gcp_project`; see tpu_strategy)."""
    if name not in STRATEGIES:
        raise ValueError("Unknown strategy %r; choose one of %s"
                         % (name, ", ".join(repr(s) for s in STRATEGIES)))
    if not name:
        return tf.distribute.get_strategy()
    if name == "gpus":
        return tf.distribute.MirroredStrategy()
    if name == "multi-worker":
        return multi_worker_strategy()
    return tpu_strategy(tpu, tpu_zone, gcp_project)


class TPUUnreachableError(ValueError):
    """--strategy=tpu found no TPU at the given name or address (a one-line user error)."""


# Seconds to wait for a TCP connection to a remote TPU: TensorFlow's own gRPC connection
# would retry for minutes before failing on an address where no TPU listens.
TPU_CONNECT_TIMEOUT_S = 10.0


def tpu_strategy(tpu: str = "", zone: Optional[str] = None,
                 project: Optional[str] = None) -> tf.distribute.TPUStrategy:
    """TPUStrategy on a Cloud TPU: `tpu` is its name (looked up in `zone` of `project`; both
    default to this GCE VM's), a grpc://host:port address, 'local' (the TPU of this TPU VM)
    or '' ($TPU_NAME). Connects to it and initialises the TPU system.

    Raises:
      TPUUnreachableError "no TPU reachable at <tpu>: <reason>" when the name cannot be
      resolved or its address does not answer within TPU_CONNECT_TIMEOUT_S.
    """
    where = tpu or "the default TPU ($TPU_NAME or this TPU VM)"
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
            tpu=tpu or None, zone=zone, project=project)
        master = resolver.master()  # grpc://host:port of a remote TPU; '' on a TPU VM.
        if master.startswith("grpc://"):
            check_reachable(master, TPU_CONNECT_TIMEOUT_S)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (OSError, ValueError, RuntimeError, tf.errors.OpError) as e:
        reason = " ".join(str(e).split()) or type(e).__name__
        raise TPUUnreachableError("no TPU reachable at %s: %s" % (where, reason)) from None
    return tf.distribute.TPUStrategy(resolver)


def default_precision(strategy_name: str, mixed_precision):
    """The config's mixed_precision, or "bfloat16" under --strategy=tpu when the config and
    the flags leave it unset (None): TPUs compute in bfloat16 at full speed and need no
    loss scaling."""
    if mixed_precision is None:
        return "bfloat16" if strategy_name == "tpu" else False
    return mixed_precision


def multi_worker_strategy(cluster_resolver=None) -> tf.distribute.MultiWorkerMirroredStrategy:
    """MultiWorkerMirroredStrategy over the cluster that TF_CONFIG describes, or over
    `cluster_resolver` (any tf.distribute.cluster_resolver: SlurmClusterResolver, ...).

    Call it when the program starts, before any other TensorFlow op: the strategy sets up
    collective ops and this worker's gRPC server. Without TF_CONFIG it would quietly train
    a one-worker cluster, so that is an error here.

    Raises:
      ValueError naming TF_CONFIG when it is missing or does not describe this worker.
    """
    if cluster_resolver is None:
        check_tf_config(os.environ.get("TF_CONFIG"))
        cluster_resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    return tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=cluster_resolver)


def check_tf_config(text: Optional[str]) -> None:
    """Checks a TF_CONFIG value: JSON with "cluster" ({job: ["host:port", ...]}) and "task"
    ({"type": job, "index": i}) naming one of the cluster's addresses.

    Raises:
      ValueError naming TF_CONFIG and what is wrong with it.
    """
    example = ('e.g. TF_CONFIG=\'{"cluster": {"worker": ["host1:12345", "host2:12345"]}, '
               '"task": {"type": "worker", "index": 0}}\'')
    if not text:
        raise ValueError("--strategy=multi-worker needs the TF_CONFIG environment variable "
                         "(the cluster and this worker's task), %s" % example)
    try:
        spec = json.loads(text)
    except ValueError as e:
        raise ValueError("TF_CONFIG is not valid JSON (%s), %s" % (e, example)) from None
    cluster = spec.get("cluster") if isinstance(spec, dict) else None
    if not isinstance(cluster, dict) or not cluster or not all(
            isinstance(addresses, list) and addresses for addresses in cluster.values()):
        raise ValueError("TF_CONFIG needs \"cluster\": {job name: [\"host:port\", ...]}, %s"
                         % example)
    task = spec.get("task")
    if not isinstance(task, dict) or task.get("type") not in cluster:
        raise ValueError("TF_CONFIG \"task\" must name a job of its cluster (%s) as \"type\", "
                         "got %r" % (", ".join(sorted(cluster)), task))
    index = task.get("index")
    if not isinstance(index, int) or not 0 <= index < len(cluster[task["type"]]):
        raise ValueError("TF_CONFIG task index %r is not one of the %d %r addresses"
                         % (index, len(cluster[task["type"]]), task["type"]))


def check_batch_divisible(batch_size: int, replicas: int) -> None:
    """Each replica gets batch_size / replicas images; anything else is a ValueError."""
    if batch_size % replicas:
        raise ValueError("--batch_size %d is not divisible by the %d replicas"
                         % (batch_size, replicas))


# The seed of a deterministic run that was given none.
DETERMINISTIC_DEFAULT_SEED = 0


def run_seed(seed: Optional[int], deterministic: bool) -> Optional[int]:
    """The seed a run uses: the given one, else DETERMINISTIC_DEFAULT_SEED when it must be
    repeatable, else None (unseeded)."""
    if seed is None and deterministic:
        logging.info("deterministic: seeding with %d", DETERMINISTIC_DEFAULT_SEED)
        return DETERMINISTIC_DEFAULT_SEED
    return seed


@contextlib.contextmanager
def op_determinism(enabled: bool):
    """TensorFlow's deterministic op implementations inside the block when `enabled`, as
    before it afterwards. TensorFlow then also runs tf.data in order and refuses ops that
    have no deterministic version (an error naming the op)."""
    if not enabled or tf_framework_config.is_op_determinism_enabled():
        yield
        return
    tf.config.experimental.enable_op_determinism()
    try:
        yield
    finally:  # No public switch back; the framework's own one is what enable_ sets.
        tf_framework_config.disable_op_determinism()


def eager_checks_read_bfloat16() -> bool:
    """Whether TensorFlow's eager NaN and inf check works under bfloat16.

    The check writes its error message for every op's output before it knows of any NaN,
    counting the infs with NumPy, and NumPy 2 takes no bfloat16 scalar from TensorFlow (the
    scalar TensorFlow hands over is not an array): the first op with a scalar bfloat16
    output, a swish's cast of its beta, fails the run.
    """
    try:
        np.isinf(tf.zeros([], tf.bfloat16))
    except (TypeError, ValueError):
        return False
    return True


def _check_debug_precision(policy: str) -> None:
    """Raises a one-line ValueError when --debug cannot check the policy's ops."""
    if policy == "mixed_float16":
        raise ValueError("--debug checks every op for NaN and inf, which float16 loss scaling "
                         "makes on purpose (overflowing steps it skips); debug with "
                         "--hparams=mixed_precision=false%s"
                         % (" or mixed_precision=bfloat16" if eager_checks_read_bfloat16()
                            else ""))
    if policy == "mixed_bfloat16" and not eager_checks_read_bfloat16():
        raise ValueError("--debug checks every op for NaN and inf eagerly, which TensorFlow %s "
                         "cannot do under bfloat16 with NumPy %s (its check hands bfloat16 "
                         "scalars to NumPy, which refuses them); debug with "
                         "--hparams=mixed_precision=false"
                         % (tf.__version__, np.__version__))


@contextlib.contextmanager
def run_settings(seed: Optional[int] = None, debug: bool = False, mixed_precision=False):
    """Seeds Python, NumPy and TensorFlow; with debug, runs tf.functions eagerly and
    checks tensors for NaN/inf. Restores eager execution mode on exit.

    Raises:
      ValueError, before any setting changes: debug under float16 (`mixed_precision`, the
        config's value), whose loss scaling makes infs on purpose: the check would stop every
        run at its first step; debug under bfloat16 where TensorFlow's eager check cannot
        read bfloat16 (eager_checks_read_bfloat16).
    """
    if debug:
        _check_debug_precision(policy_name(mixed_precision))
    eager_before = tf.config.functions_run_eagerly()
    if seed is not None:
        keras.utils.set_random_seed(seed)
    if debug:
        tf.config.run_functions_eagerly(True)
        tf.debugging.enable_check_numerics()
    try:
        yield
    finally:
        if debug:
            tf.debugging.disable_check_numerics()
        tf.config.run_functions_eagerly(eager_before)
