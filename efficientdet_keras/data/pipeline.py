"""Training and evaluation input pipelines (tf.data), from any data source.

    source = TFRecordSource("data/train-*.tfrecord")      # or CocoSource, RecordsSource (data.sources)
    pipeline = InputPipeline(config, source, is_training=True, seed=1)
    dataset = pipeline()                                   # or strategy.distribute_datasets_from_function(pipeline)

Each element is `(images, labels)`:
  images: [B, H, W, 3] normalised, in the compute dtype of the config's precision policy.
  labels: class_targets_<l> int32 [B, H_l, W_l, A], box_targets_<l> float32
    [B, H_l, W_l, A*4] for l = min_level..max_level; num_positives float32 [B];
    source_ids int64 [B]; image_scales float32 [B] (original pixels per input pixel; [B, 2], y and x, with
    resize_mode stretch);
    groundtruth_boxes float32 [B, max_instances, 4] in input pixels [ymin, xmin, ymax, xmax];
    groundtruth_classes int32 [B, max_instances] (-1 pads); groundtruth_is_crowd bool;
    groundtruth_area float32 (original pixels^2).
"""

from typing import Optional

import tensorflow as tf

from efficientdet_keras.data.augmentation import mixing
from efficientdet_keras.data.data_service import distribute_through_service, shared_job_name
from efficientdet_keras.data.decode import decode_and_clean
from efficientdet_keras.data.decoded_cache import (cache_decoded, cache_mode, plan_cache,
                                                   source_pixels)
from efficientdet_keras.data.example_transforms import ExampleTransforms, op_seed
from efficientdet_keras.data.health import DataHealth
from efficientdet_keras.data.sources import describe_source

# Records read ahead and mixed by the training shuffle.
SHUFFLE_BUFFER = 1024
# Decoded images mixed again each epoch after a disk cache (a RAM cache's shuffle shares the
# cached pixels; from disk each buffered image is a copy in memory).
DISK_CACHE_SHUFFLE_BUFFER = 128
# A resumed pipeline's order seed is seed + this x start_step (+ pipeline id): more than any
# number of input pipelines, so no two (start step, pipeline) pairs share a seed.
_START_STEP_SEED_STRIDE = 1_000_003
# An image count no pipeline reaches: mosaic never closes.
_NEVER = 2 ** 62


def _mosaic_seeds(seed: Optional[int], index: tf.Tensor) -> tf.Tensor:
    """[2, 2]: the seeds of the mosaic draw and of the centre for a group whose first image
    is numbered `index`."""
    return tf.random.experimental.stateless_split(op_seed(seed, index, "mosaic"), 2)


def _mosaic_fields(example):
    """What a mosaic needs of a decoded example, with the sizes that padded_batch hides."""
    fields = {key: example[key] for key in mixing.INSTANCE_KEYS + ("image", "image_id")}
    fields["size"] = tf.shape(example["image"])[:2]
    fields["num_boxes"] = tf.shape(example["classes"])[0]
    return fields


def _unpad_mosaic_fields(example):
    """(index, example) from an unbatched group element: the image and instances the
    example had before padded_batch padded them."""
    example = mixing.unpad_instances(example)
    index, size = example.pop("index"), example.pop("size")
    example["image"] = example["image"][:size[0], :size[1]]
    return index, example


def _pipeline_position(input_context: Optional[tf.distribute.InputContext]):
    """(number of input pipelines, this pipeline's id): (1, 0) without a context."""
    if input_context is None:
        return 1, 0
    return input_context.num_input_pipelines, input_context.input_pipeline_id


class InputPipeline:
    """Builds the training or evaluation tf.data pipeline for one config and source.

    Args:
      config: the model config (image_size, levels, anchors, augmentation, normalisation,
        num_classes, max_instances_per_image, mixed_precision, batch_size).
      source: a `data.sources` source (TFRecordSource, CocoSource, RecordsSource) or any
        object with `raw_dataset`.
      is_training: shuffle, repeat, augment and drop the last partial batch; otherwise
        one pass, aspect-preserving resize and pad. Training order: [mosaic of four
        (`mosaic`)] -> flip (`input_rand_hflip`) -> AutoAugment / RandAugment
        (`autoaugment_policy`) -> scale jitter, crop, pad, normalise -> GridMask
        (`grid_mask`) -> [mixup with the image before (`mixup`)] -> drop emptied boxes ->
        anchor labels -> batch. Options left at their defaults add no step.
      batch_size: global batch size (default config.batch_size); under tf.distribute
        each replica gets its share.
      seed: makes order and augmentation repeatable. The augmentation draws are stateless
        and follow this seed alone; the order comes from tf.data's seeded shuffles, which
        also mix in TensorFlow's global seed (`tf.random.set_seed`) when one is set.
      health: DataHealth that counts skipped and repaired data (one is made if omitted).
      cache_dir: where the config's `cache: disk` keeps its files (a training run passes
        <model_dir>/cache); see data.decoded_cache.
      start_step: the training step the pipeline feeds first (a resumed run's step).
        The order is reseeded from it, and augmentation continues from the element
        numbers the first start_step steps used, so a resumed run does not replay the
        batches it trained on before (and decodes nothing to skip them).

    With the config's data_service, tf.data service workers run the training pipeline up to
    the batch (data.data_service): the trainers of a multi-worker run share one job, which
    deals the records out, instead of reading a shard each. Every worker shuffles and numbers
    the images it is dealt on its own, so the order depends on which worker takes which
    records when: seeds and start_step still set each worker's draws, but a run's batches
    are no longer repeatable.
    """

    def __init__(self, config, source, is_training: bool, batch_size: Optional[int] = None,
                 seed: Optional[int] = None, health: Optional[DataHealth] = None,
                 start_step: int = 0, cache_dir: Optional[str] = None):
        self.config = config
        self.source = source
        self.is_training = is_training
        self.batch_size = int(batch_size or config.batch_size)
        self.seed = seed
        self.start_step = int(start_step)
        if is_training and config.mosaic > 0 and config.mosaic_close_epochs and \
                not config.get("steps_per_epoch"):
            raise ValueError(
                "mosaic_close_epochs=%s needs steps_per_epoch (the number of training steps in "
                "an epoch) to know when the last epochs begin; set steps_per_epoch or "
                "mosaic_close_epochs=0" % config.mosaic_close_epochs)
        self.health = health or DataHealth()
        self.health.source_problems.update(getattr(source, "skipped", {}))
        self.image_size = tuple(config.image_size)
        self.transforms = ExampleTransforms(config, is_training, seed)
        self.cache_dir = cache_dir
        # Measured once, before any pipeline is built: a cache that cannot fit is refused now.
        self._source_size = None
        if is_training and cache_mode(config):
            self._source_size = source_pixels(source)
            plan_cache(config, source, self._source_size, cache_dir)

    def __call__(self, input_context: Optional[tf.distribute.InputContext] = None) -> tf.data.Dataset:
        return self.dataset(input_context)

    def dataset(self, input_context: Optional[tf.distribute.InputContext] = None) -> tf.data.Dataset:
        batch_size = self.batch_size
        if input_context is not None:
            batch_size = input_context.get_per_replica_batch_size(self.batch_size)
        service = self.config.get("data_service") if self.is_training else ""
        # Under the service every trainer describes the whole dataset: the job they share
        # deals the records out (data_service.py), in place of one shard per input pipeline.
        data_context = None if service else input_context
        num_pipelines, pipeline_id = _pipeline_position(data_context)
        order_seed = None if self.seed is None else \
            self.seed + _START_STEP_SEED_STRIDE * self.start_step
        dataset = self.source.raw_dataset(data_context, self.is_training, order_seed)
        if self.is_training:
            # Each pipeline shuffles its own way (pipeline 0 as a lone pipeline would).
            shuffle_seed = None if order_seed is None else order_seed + pipeline_id
            dataset = dataset.shuffle(SHUFFLE_BUFFER, seed=shuffle_seed,
                                      reshuffle_each_iteration=True)
        config = self.config
        decoded = dataset.map(
            lambda raw: decode_and_clean(raw, config.num_classes, config.max_instances_per_image,
                                         self.health, strict=bool(config.get("strict_data"))),
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        # Filtering before repeat() lets a stream without good records end instead of
        # spinning forever; the tail then turns that end into an error naming the source.
        dataset = decoded.filter(lambda example: example["ok"])
        if self._source_size is not None:
            dataset = self._cached(dataset, shuffle_seed, num_pipelines, pipeline_id)
        if self.is_training:
            dataset = dataset.repeat()
        dataset = dataset.concatenate(self._fail_when_nothing_was_good(decoded))
        # The element index seeds each example's augmentation (stateless, repeatable).
        # Numbering elements across pipelines (index * num_pipelines + pipeline_id)
        # gives every replica and worker its own draws; one pipeline counts 0, 1, 2, ...
        # A resumed pipeline counts on from what the steps before start_step used.
        first_index = self._images_before_step(self.start_step, num_pipelines)
        number = lambda index: index * num_pipelines + pipeline_id  # noqa: E731
        if self.is_training and config.mosaic > 0:
            dataset = self._with_mosaics(dataset, first_index, num_pipelines, number)
        else:
            dataset = dataset.enumerate(start=first_index)
        if self.is_training and config.mixup > 0:
            dataset = self._augment_and_mixup(dataset, number)
        else:
            prepare = self.transforms.prepare
            dataset = dataset.map(lambda index, example: prepare(number(index), example),
                                  num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        dataset = dataset.batch(batch_size, drop_remainder=self.is_training)
        options = tf.data.Options()
        options.deterministic = self.seed is not None or not self.is_training
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        dataset = dataset.with_options(options)
        if service:  # Everything above runs on the service's workers.
            dataset = distribute_through_service(dataset, service, shared_job_name(
                self.config.as_dict(), describe_source(self.source), self.seed,
                self.start_step, batch_size))
        return dataset.prefetch(tf.data.AUTOTUNE)

    def _cached(self, dataset: tf.data.Dataset, shuffle_seed: Optional[int], num_pipelines: int,
                pipeline_id: int) -> tf.data.Dataset:
        """The decoded examples from the config's cache after the first epoch, mixed anew each
        epoch (the cache replays the first epoch's order)."""
        plan = plan_cache(self.config, self.source, self._source_size, self.cache_dir,
                          pipeline_id, num_pipelines)
        buffer = SHUFFLE_BUFFER if plan.mode == "ram" else DISK_CACHE_SHUFFLE_BUFFER
        return cache_decoded(dataset, plan).shuffle(buffer, seed=shuffle_seed,
                                                    reshuffle_each_iteration=True)

    def _fail_when_nothing_was_good(self, decoded: tf.data.Dataset) -> tf.data.Dataset:
        """A tail for the filtered stream: empty when some record was good, else an
        InvalidArgumentError "no usable records in <source>" (not a silent end or a hang)."""
        message = ("no usable records in %s: every record was skipped as bad data (see the "
                   "'Data:' warnings above)" % describe_source(self.source))

        def fail(_):
            with tf.control_dependencies([tf.debugging.Assert(tf.constant(False), [message])]):
                return tf.nest.map_structure(
                    lambda spec: tf.zeros([d or 0 for d in spec.shape], spec.dtype),
                    decoded.element_spec)

        # Read only when the filtered stream has ended, so the count is final then.
        nothing_good = tf.data.Dataset.from_tensors(0).filter(
            lambda _: tf.equal(self.health.good_records(), 0))
        return nothing_good.map(fail)

    def _images_before_step(self, step: int, num_pipelines: int) -> int:
        """Images one input pipeline emits for the training steps before `step`."""
        return step * self.batch_size // num_pipelines

    def _mosaic_images_allowed(self, num_pipelines: int) -> int:
        """The number of images one pipeline emits before mosaic closes (mosaic_close_epochs)."""
        config = self.config
        if not config.mosaic_close_epochs:
            return _NEVER
        open_epochs = max(config.num_epochs - config.mosaic_close_epochs, 0)
        return self._images_before_step(open_epochs * config.steps_per_epoch, num_pipelines)

    def _with_mosaics(self, dataset: tf.data.Dataset, first_index: int, num_pipelines: int,
                      number) -> tf.data.Dataset:
        """(index, example) pairs where, with probability `mosaic`, four consecutive examples
        became one mosaic (until mosaic closes), else pass through one by one.

        The examples are grouped by four (images padded to the group's largest, sizes
        kept); a scan counts the images emitted so far (from first_index), which decides
        whether mosaic is still open and numbers the emitted images like enumerate().
        """
        allowed = self._mosaic_images_allowed(num_pipelines)

        def decide(count, group):
            draw_seed = _mosaic_seeds(self.seed, number(count))[0]
            use = tf.logical_and(count < allowed,
                                 tf.random.stateless_uniform([], draw_seed) < self.config.mosaic)
            emitted = tf.where(use, tf.constant(1, tf.int64),
                               tf.cast(tf.shape(group["image_id"])[0], tf.int64))
            return count + emitted, (count, use, group)

        fields = dataset.map(_mosaic_fields, num_parallel_calls=tf.data.AUTOTUNE,
                             deterministic=True)
        groups = fields.padded_batch(4)
        decided = groups.scan(tf.constant(first_index, tf.int64), decide)
        outputs = decided.map(lambda count, use, group: self._mosaic_or_singles(
            count, use, group, number), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        return outputs.unbatch().map(_unpad_mosaic_fields, num_parallel_calls=tf.data.AUTOTUNE,
                                     deterministic=True)

    def _mosaic_or_singles(self, count, use, group, number):
        """The group's mosaic as a group of one, or the group itself; "index" numbers them."""
        def one_mosaic():
            centre = mixing.mosaic_centre(self.image_size,
                                          _mosaic_seeds(self.seed, number(count))[1])
            fill = tf.clip_by_value(tf.round(tf.constant(self.config.mean_rgb, tf.float32)),
                                    0.0, 255.0)
            made = mixing.mosaic(group, self.image_size, centre, fill,
                                 self.config.max_instances_per_image)
            made = mixing.pad_instances(made, self.config.max_instances_per_image)
            made["size"] = tf.constant(self.image_size, tf.int32)
            made["index"] = count
            return {key: value[None] for key, value in made.items()}

        def singles():
            group_size = tf.shape(group["image_id"], out_type=tf.int64)[0]
            return dict(group, index=count + tf.range(group_size))

        return tf.cond(use, one_mosaic, singles)

    def _augment_and_mixup(self, dataset: tf.data.Dataset, number) -> tf.data.Dataset:
        """Augmented, labelled examples where, with probability `mixup`, each is blended with
        the augmented example before it (its own output stays as it is)."""
        max_instances = self.config.max_instances_per_image
        augmented = dataset.map(
            lambda index, example: (number(index), mixing.pad_instances(
                self.transforms.augment(number(index), example), max_instances)),
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        nothing_before = tf.nest.map_structure(lambda spec: tf.zeros(spec.shape, spec.dtype),
                                               augmented.element_spec[1])

        def pair_with_previous(state, element):
            previous, has_previous = state
            index, example = element
            return (example, tf.constant(True)), (index, example, previous, has_previous)

        pairs = augmented.scan((nothing_before, tf.constant(False)), pair_with_previous)
        return pairs.map(self._maybe_mixup_and_label, num_parallel_calls=tf.data.AUTOTUNE,
                         deterministic=True)

    def _maybe_mixup_and_label(self, index, example, previous, has_previous):
        seed = op_seed(self.seed, index, "mixup")
        draw_seed, weight_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
        use = tf.logical_and(has_previous,
                             tf.random.stateless_uniform([], draw_seed) < self.config.mixup)
        weight = mixing.beta_sample(weight_seed, mixing.MIXUP_BETA, mixing.MIXUP_BETA)
        example = tf.cond(use, lambda: mixing.mixup(example, previous, weight,
                                                    self.config.max_instances_per_image),
                          lambda: example)
        return self.transforms.label(mixing.unpad_instances(example))
