"""The training input made on tf.data service workers (config data_service, --data_service):
the addresses the key takes, a dispatcher that is not there as one line naming it, the
batches a worker makes, the one job the trainers of a multi-worker run share, and two
training steps through it. The service is a dispatcher and a worker in this process, on
loopback ports of their own."""

import functools
import gc
import math
import socket
import time

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from helpers import make_records, tiny_config
from efficientdet_keras.cli.common import run_or_exit
from efficientdet_keras.data.data_service import (DataServiceUnreachableError,
                                                  distribute_through_service)
from efficientdet_keras.data.pipeline import InputPipeline
from efficientdet_keras.data.sources import RecordsSource


class LoopbackService:
    """A tf.data service dispatcher and one worker on free loopback ports."""

    def __init__(self):
        service = tf.data.experimental.service
        self.dispatcher = service.DispatchServer(service.DispatcherConfig(port=0))
        self.address = self.dispatcher.target  # grpc://localhost:<port>
        self.worker = service.WorkerServer(service.WorkerConfig(
            dispatcher_address=self.address.split("://")[1], port=0))

    def jobs_served(self) -> int:
        """The jobs the worker has made elements for (its tasks, one per job)."""
        return self.worker._num_tasks()

    def stop(self):
        gc.collect()  # Readers first: a live iterator would call a stopped dispatcher.
        self.worker.stop()
        self.dispatcher.stop()


@pytest.fixture
def service():
    """A service of the test's own: it counts only the test's jobs, and a worker with few
    jobs stops at once."""
    served = LoopbackService()
    yield served
    served.stop()


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    return make_records(str(tmp_path_factory.mktemp("service-data")), count=4, height=64,
                        width=64)


def closed_loopback_port() -> int:
    """A loopback port where nothing listens (the system's free pick, released again)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def small_config(**overrides):
    return tiny_config(image_size=64, batch_size=2, jitter_min=0.5, jitter_max=1.5,
                       **overrides)


@pytest.mark.quick
@pytest.mark.parametrize("address", ["grpc://dispatcher:5050", "dispatcher:5050",
                                     "grpc://10.0.0.2:5050", "grpc://[::1]:5050", ""])
def test_the_key_takes_a_dispatcher_address_or_nothing(address):
    assert small_config(data_service=address).data_service == address


@pytest.mark.quick
@pytest.mark.parametrize("address", ["dispatcher", "http://dispatcher:5050",
                                     "grpc://dispatcher:70000", "grpc://dispatcher:port",
                                     "grpc://dispatcher:5050/", "dispatcher 5050"])
def test_an_address_of_another_form_is_one_line_naming_the_key(address):
    with pytest.raises(ValueError) as error:
        small_config(data_service=address)
    assert str(error.value) == (
        "Invalid config: data_service must be empty (off) or a tf.data service dispatcher's "
        "address, grpc://host:port or host:port, got %r" % address)


@pytest.mark.quick
def test_mosaic_closing_needs_a_count_that_no_service_worker_has():
    from efficientdet_keras.config import validate_config
    config = small_config(data_service="grpc://dispatcher:5050", mosaic=0.5,
                          mosaic_close_epochs=1)
    with pytest.raises(ValueError, match="^Invalid config: mosaic_close_epochs cannot be "
                                         "combined with data_service"):
        validate_config(config)
    config.mosaic_close_epochs = 0
    validate_config(config)


@pytest.mark.quick
def test_a_cache_of_decoded_images_is_refused_under_the_service():
    from efficientdet_keras.config import validate_config
    config = small_config(data_service="grpc://dispatcher:5050", cache="ram")
    with pytest.raises(ValueError, match="^Invalid config: cache cannot be combined with "
                                         "data_service"):
        validate_config(config)
    config.data_service = ""
    validate_config(config)


@pytest.mark.quick
def test_a_dispatcher_that_is_not_there_is_one_line_naming_it_at_once():
    address = "grpc://127.0.0.1:%d" % closed_loopback_port()
    reach = functools.partial(distribute_through_service, tf.data.Dataset.range(3), address,
                              "a-job")
    started = time.monotonic()
    with pytest.raises(DataServiceUnreachableError,
                       match="^no tf.data service dispatcher reachable at %s: " % address):
        reach()
    assert time.monotonic() - started < 5  # TensorFlow's own client would retry for ever.
    # The train command's wrapper prints it as its one line.
    with pytest.raises(SystemExit) as stop:
        run_or_exit("efficientdet-train", reach)
    assert str(stop.value).startswith("efficientdet-train: no tf.data service dispatcher "
                                      "reachable at %s: " % address)
    assert "\n" not in str(stop.value)


def test_evaluation_stays_in_the_trainer(records):
    # No dispatcher listens there: only a training pipeline would try to reach it.
    address = "grpc://127.0.0.1:%d" % closed_loopback_port()
    pipeline = InputPipeline(small_config(data_service=address), RecordsSource(records),
                             is_training=False)
    assert pipeline().element_spec[0].shape.as_list() == [None, 64, 64, 3]


def test_the_worker_makes_the_batches_the_trainer_would(service, records):
    source = RecordsSource(records)
    local = InputPipeline(small_config(), source, is_training=True, seed=3)
    served = InputPipeline(small_config(data_service=service.address), source,
                           is_training=True, seed=3)
    dataset, local_dataset = served(), local()
    assert dataset.element_spec == local_dataset.element_spec
    # One worker is dealt the records in order: the same order and augmentation draws.
    for (images, labels), (local_images, local_labels) in zip(dataset.take(3),
                                                              local_dataset.take(3)):
        np.testing.assert_array_equal(labels["source_ids"], local_labels["source_ids"])
        np.testing.assert_array_equal(images, local_images)
        assert service.jobs_served() == 1
    # The worker decoded them: the trainer's own data report counted nothing.
    assert int(served.health.good_records()) == 0


def test_the_input_pipelines_of_a_multi_worker_run_share_one_job(service, records):
    pipeline = InputPipeline(small_config(data_service=service.address),
                             RecordsSource(records), is_training=True, seed=4)
    readers = [iter(pipeline(tf.distribute.InputContext(2, index, 2))) for index in range(2)]
    for reader in readers:  # Each reads a batch of its replica's size from the shared job.
        _, labels = next(reader)
        assert labels["source_ids"].shape == (1,)
    assert service.jobs_served() == 1
    # A resumed run (another start step) gets a job of its own, not the old job's batches.
    resumed = InputPipeline(pipeline.config, RecordsSource(records), is_training=True, seed=4,
                            start_step=5)
    readers.append(iter(resumed(tf.distribute.InputContext(2, 0, 2))))
    next(readers[-1])
    assert service.jobs_served() == 2


@pytest.mark.quick
def test_training_steps_read_their_batches_from_the_service(service, records, tmp_path):
    from efficientdet_keras.training.backup import latest_backup_step
    from efficientdet_keras.training.run import TrainingRun
    config = small_config(fpn_num_filters=8, fpn_cell_repeats=1, box_class_repeats=1,
                          backbone_blocks_per_stage=1, num_epochs=1,
                          data_service=service.address)
    jobs_at_steps = []
    count_jobs = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: jobs_at_steps.append(service.jobs_served()))
    run = TrainingRun(config, str(tmp_path / "run"), RecordsSource(records), steps_per_epoch=2,
                      seed=1, callbacks=[count_jobs])
    history = run.fit(verbose=0)
    assert jobs_at_steps == [1, 1]  # Each step's batch came from the worker's one job.
    assert len(history.history["loss"]) == 1 and math.isfinite(history.history["loss"][0])
    assert latest_backup_step(str(tmp_path / "run")) == 2
    assert "data_service: grpc://localhost:" in (tmp_path / "run" / "config.yaml").read_text()
