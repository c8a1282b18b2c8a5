"""The training input made on tf.data service workers (config data_service), for a trainer
whose own CPUs cannot keep its accelerators busy.

    batches = distribute_through_service(batches, "grpc://dispatcher:5050", shared_job_name(
        config.as_dict(), describe_source(source), seed, start_step, per_replica_batch))

The dispatcher (`tf.data.experimental.service.DispatchServer`) deals the records out to its
workers (`WorkerServer`, on any machines that can read the data at the same paths); each
worker runs the whole pipeline on its share, from decoding to batching, and the trainer
reads the batches over gRPC.
"""

import hashlib
import json

import tensorflow as tf

from efficientdet_keras.utils.service_address import check_reachable

# Seconds to wait for a TCP connection to the dispatcher: TensorFlow's client retries an
# address where nothing listens for as long as the run would last, without a word.
DISPATCHER_CONNECT_TIMEOUT_S = 10.0


class DataServiceUnreachableError(ValueError):
    """No tf.data service dispatcher answers at the configured address (a one-line user error)."""


def distribute_through_service(dataset: tf.data.Dataset, address: str,
                               job_name: str) -> tf.data.Dataset:
    """`dataset`'s elements, made by the workers of the tf.data service dispatcher at
    `address` ([grpc://]host:port) in the job `job_name`; the same element_spec.

    Dynamic sharding (the "distributed_epoch" mode): the dispatcher hands the source's
    records (files of a TFRecord source, images of a COCO or records source) to the workers
    as they ask for more, so a record is read once per epoch however many workers there
    are, and a worker that joins later takes its share. Each worker shuffles, augments and
    batches what it gets. The other mode, "parallel_epochs", runs the whole dataset on every
    worker: the pipeline's seeded shuffle and stateless augmentation would then make the
    same batches on each, and the trainer would see every batch once per worker.

    Trainers that name the same job share it, each batch going to one of them: so the
    trainers of a multi-worker run each build the whole dataset, and the dispatcher shards it.

    Raises:
      DataServiceUnreachableError "no tf.data service dispatcher reachable at <address>:
      <reason>" when no connection opens within DISPATCHER_CONNECT_TIMEOUT_S.
    """
    try:
        check_reachable(address, DISPATCHER_CONNECT_TIMEOUT_S)
    except (OSError, ValueError) as e:
        reason = " ".join(str(e).split()) or type(e).__name__
        raise DataServiceUnreachableError("no tf.data service dispatcher reachable at %s: %s"
                                          % (address, reason)) from None
    return dataset.apply(tf.data.experimental.service.distribute(
        tf.data.experimental.service.ShardingPolicy.DYNAMIC, address, job_name=job_name))


def shared_job_name(*definition) -> str:
    """"efficientdet-<digest>": the job of the dataset that `definition` (JSON-able values:
    the config, the data, seeds, the start step, the batch) describes.

    A job serves the dataset registered first under its name, so the name must change with
    anything that changes the dataset: trainers building the same dataset (the workers of a
    multi-worker run) then share one job, while a resumed run (another start step) or a
    run with other data or settings gets its own.
    """
    text = json.dumps(definition, default=repr)
    return "efficientdet-" + hashlib.sha256(text.encode()).hexdigest()[:20]
