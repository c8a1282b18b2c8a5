"""patience: a run stops once its validation AP stops improving, the best checkpoint kept,
and the count survives a restart of the run."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

import dataset_layouts
from helpers import SMALL_NETWORK_HPARAMS
from efficientdet_keras.training.callbacks.plateau import (StopOnPlateau, plateau_reached,
                                                            plateau_state)


@pytest.mark.quick
def test_plateau_state_counts_evaluations_since_the_best():
    assert plateau_state({}) == (None, None, 0)
    # A tie is no better; a later best starts the count again.
    assert plateau_state({1: 0.1, 2: 0.3, 3: 0.3, 4: 0.2}) == (0.3, 2, 2)
    assert plateau_state({2: 0.1, 4: 0.05, 6: 0.4}) == (0.4, 6, 0)
    assert plateau_state({3: 0.2, 1: 0.5, 2: 0.1}) == (0.5, 1, 2)  # In epoch order.


@pytest.mark.quick
def test_stop_on_plateau_counts_the_evaluations_of_an_earlier_process(tmp_path):
    # An earlier process evaluated epochs 1 and 2: best 0.3 after epoch 1, one since.
    with open(tmp_path / "coco_metrics.json", "w") as f:
        json.dump({"1": {"AP": 0.3}, "2": {"AP": 0.25}}, f)
    scripted = {2: 0.28, 4: 0.35, 5: 0.3, 6: 0.31, 7: 0.2}  # By epoch index; 3 evaluates not.

    def evaluation(epoch, logs):
        if epoch in scripted:
            logs["val_AP"] = scripted[epoch]
    model = keras.Sequential([keras.layers.Dense(1, input_shape=(2,))])
    model.compile("sgd", "mse")
    stop = StopOnPlateau(2, str(tmp_path))
    history = model.fit(np.zeros([4, 2]), np.zeros([4, 1]), epochs=10, initial_epoch=2,
                        verbose=0, callbacks=[keras.callbacks.LambdaCallback(
                            on_epoch_end=evaluation), stop])
    # Epoch 3 (index 2): 0.28, the second without a better AP -> stop right there.
    assert stop.stopped_epoch == 3 and len(history.history["loss"]) == 1
    assert (stop.best, stop.best_epoch, stop.since) == (0.3, 1, 2)

    fresh = StopOnPlateau(2, str(tmp_path / "new_run"))
    history = model.fit(np.zeros([4, 2]), np.zeros([4, 1]), epochs=10, initial_epoch=2,
                        verbose=0, callbacks=[keras.callbacks.LambdaCallback(
                            on_epoch_end=evaluation), fresh])
    # 0.28 (best), 3: none, 0.35 (best), 0.3, 0.31 -> two without a better: stops after 7.
    assert fresh.stopped_epoch == 7 and (fresh.best, fresh.best_epoch) == (0.35, 5)
    assert len(history.history["loss"]) == 5


def test_a_run_stops_on_a_flat_ap_keeps_the_best_and_stays_stopped(tmp_path):
    from efficientdet_keras import train
    data = str(tmp_path / "shapes")
    dataset_layouts.write_yolo(data)
    # Every variable frozen but one bias (so the optimizer has work), BatchNorms in inference
    # mode, a learning rate of 1e-12: every evaluation scores the same weights, the same AP.
    frozen = "(?!class_net/class-predict/bias)"
    hparams = SMALL_NETWORK_HPARAMS + (",image_size=64,jitter_min=1.0,jitter_max=1.0,"
                                       "batch_size=4,num_epochs=5,learning_rate=1e-12,"
                                       "lr_warmup_init=1e-12,map_freq=1,"
                                       "nms_configs.method=hard")
    lines = []
    run = str(tmp_path / "run")
    result = train(run, data=data, hparams=hparams, eval_images=0, report=lines.append,
                   config_overrides={"patience": 2, "var_freeze_expr": frozen})
    with open(os.path.join(run, "coco_metrics.json")) as f:
        evaluations = json.load(f)
    assert sorted(evaluations, key=int) == ["1", "2", "3"]  # Epochs 4 and 5 not trained.
    assert len({m["AP"] for m in evaluations.values()}) == 1
    assert result.last_epoch == 3
    assert os.path.exists(result.best_checkpoint + ".index")  # The archive's best is kept.

    # Started again, it does not train on; with more patience, it does.
    again = train(run, data=data, hparams=hparams, eval_images=0, report=lines.append,
                  config_overrides={"patience": 2, "var_freeze_expr": frozen})
    assert again.history is None
    assert plateau_reached(2, run).endswith(
        "stopped after 2 evaluations without a better AP than %.4f (epoch 1, patience 2); "
        "raise patience or num_epochs to train on" % evaluations["1"]["AP"])
    more = train(run, data=data, hparams=hparams, eval_images=0, report=lines.append,
                 config_overrides={"patience": 3, "var_freeze_expr": frozen})
    assert more.last_epoch == 4  # Three evaluations without a better AP: stopped again.
    with open(os.path.join(run, "coco_metrics.json")) as f:
        assert sorted(json.load(f), key=int) == ["1", "2", "3", "4"]


@pytest.mark.quick
def test_patience_without_evaluation_is_refused(tmp_path):
    from efficientdet_keras import get_efficientdet_config
    from efficientdet_keras.training.callbacks import get_callbacks
    config = get_efficientdet_config("efficientdet-d0")
    config.patience = 3
    with pytest.raises(ValueError, match="patience=3 .* needs evaluation"):
        get_callbacks(config, str(tmp_path))
    assert tf.executing_eagerly()
