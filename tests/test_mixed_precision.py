"""float16 and bfloat16 training follow float32's: the same small model, from the same
initial weights, on the same two batches in turn, trained STEPS steps in each precision.

Tolerances, from the formats: bfloat16 keeps 8 significant bits (a rounding error of up to
2 ** -9, 0.2%, per op), float16 11 bits (0.03%); the loss of the first step, before any
update, adds up many such roundings over the network's depth, partly cancelling: 2% for
bfloat16 and 0.5% for float16 leave room for that and no more. Once SGD has taken a few
steps the three runs follow slightly different paths, so single steps can differ by several
percent; what must agree is where training goes: the mean loss of the last steps within 10%
of float32's, after a drop that float32 makes too.
"""

import numpy as np
import pytest
import tensorflow as tf

from helpers import tiny_config
from efficientdet_keras.data.pipeline import InputPipeline
from efficientdet_keras.data.sources import TFRecordSource
from efficientdet_keras.data.synthetic import write_synthetic_dataset
from efficientdet_keras.training.runtime import eager_checks_read_bfloat16, run_settings
from efficientdet_keras.training.trainer import EfficientDetNetTrain

STEPS = 24
LAST = 8  # The steps whose mean loss is compared.
PRECISIONS = (False, "float16", "bfloat16")


def config(precision):
    return tiny_config(image_size=64, fpn_num_filters=16, fpn_cell_repeats=1,
                       box_class_repeats=1, backbone_blocks_per_stage=1, batch_size=4, mixed_precision=precision,
                       learning_rate=0.02, lr_warmup_init=0.02, jitter_min=1.0, jitter_max=1.0,
                       input_rand_hflip=False)


@pytest.fixture(scope="module")
def losses(tmp_path_factory):
    """{precision: the det_loss of each of STEPS steps}, all runs from the same weights."""
    data = write_synthetic_dataset(str(tmp_path_factory.mktemp("precision_data")), num_train=8,
                                   num_val=1, image_size=64, seed=1)
    batches = list(InputPipeline(config(False), TFRecordSource(data.train_tfrecord),
                                 is_training=True, batch_size=4, seed=0)().take(2))
    dataset = tf.data.Dataset.range(2).repeat().map(lambda i: tf.nest.map_structure(
        lambda first, second: tf.where(i == 0, first, second), batches[0], batches[1]))
    initial, curves, scales = None, {}, {}
    for precision in PRECISIONS:
        model = EfficientDetNetTrain(config(precision))
        if initial is None:
            initial = model.get_weights()
        else:
            model.set_weights(initial)
            model.ema.reset_to_model()
        model.compile(steps_per_epoch=STEPS)
        history = model.fit(dataset, epochs=STEPS, steps_per_epoch=1, verbose=0)
        curves[precision] = np.array(history.history["det_loss"])
        scales[precision] = history.history.get("loss_scale")
    curves["loss_scale"] = scales
    return curves


def test_float32_training_makes_progress(losses):
    reference = losses[False]
    assert len(reference) == STEPS and np.all(np.isfinite(reference))
    assert reference[-LAST:].mean() < 0.8 * reference[0]  # Something for the others to follow.


@pytest.mark.parametrize("precision,first_step_tolerance", [("float16", 0.005),
                                                            ("bfloat16", 0.02)])
def test_mixed_precision_follows_float32(losses, precision, first_step_tolerance):
    reference, actual = losses[False], losses[precision]
    assert np.all(np.isfinite(actual))
    assert actual[0] == pytest.approx(reference[0], rel=first_step_tolerance)
    assert actual[-LAST:].mean() == pytest.approx(reference[-LAST:].mean(), rel=0.10)
    assert actual[-LAST:].mean() < 0.8 * actual[0]


def test_only_float16_logs_its_loss_scale(losses):
    scales = losses["loss_scale"]
    assert scales[False] is None and scales["bfloat16"] is None
    assert len(scales["float16"]) == STEPS
    assert all(1.0 <= scale <= 2.0 ** 15 for scale in scales["float16"])


@pytest.mark.quick
def test_the_bfloat16_probe_tells_whether_the_eager_check_runs_a_swish():
    """--debug's eager NaN check stopped at the first swish under bfloat16: the probe says
    whether it would."""
    tf.debugging.enable_check_numerics()
    try:
        tf.nn.silu(tf.ones([2], tf.bfloat16))
        ran = True
    except ValueError:
        ran = False
    finally:
        tf.debugging.disable_check_numerics()
    assert ran == eager_checks_read_bfloat16()


@pytest.mark.quick
def test_debug_under_bfloat16_checks_its_ops_or_stops_in_one_line_before_any_setting():
    eager = tf.config.functions_run_eagerly()
    if eager_checks_read_bfloat16():
        with run_settings(debug=True, mixed_precision="bfloat16"):
            assert tf.config.functions_run_eagerly()
            tf.nn.silu(tf.ones([2], tf.bfloat16))
    else:
        with pytest.raises(ValueError, match=r"^--debug checks every op for NaN and inf eagerly, "
                                             r"which TensorFlow \S+ cannot do under bfloat16 .*; "
                                             r"debug with --hparams=mixed_precision=false$"):
            with run_settings(debug=True, mixed_precision="bfloat16"):
                pytest.fail("entered")
    assert tf.config.functions_run_eagerly() == eager
    tf.nn.silu(tf.ones([2], tf.bfloat16))  # No check left on.
