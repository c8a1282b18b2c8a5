"""How long a run trains: patience stops it once its validation AP stops improving, the best
checkpoint kept; time_budget stops it, backed up, before the hours it may use are passed. Both
survive a restart of the run."""

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


# --- time_budget ------------------------------------------------------------------------------

class FakeClock:
    """time.monotonic for the budget's module: each training step takes one second."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now

    def step(self, *args):
        self.now += 1.0


def fit_with_budget(tmp_path, budget_seconds, clock, learning_rate=0.01, recorder=None):
    from efficientdet_keras.training.backup import StepBackup
    from efficientdet_keras.training.time_budget import StopAtTimeBudget
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.layers.Dense(1, input_shape=(2,))])
    model.compile(keras.optimizers.SGD(learning_rate), "mse")
    backup = StepBackup(str(tmp_path / "backup"), 0)
    budget = StopAtTimeBudget(budget_seconds / 3600.0, str(tmp_path), backup)
    steps = keras.callbacks.LambdaCallback(on_train_batch_end=clock.step)
    callbacks = [steps] + ([recorder] if recorder else []) + [backup, budget]
    model.fit(np.ones([40, 2]), np.ones([40, 1]), batch_size=4, epochs=3, verbose=0,
              callbacks=callbacks)
    return model


class RatesUsed(keras.callbacks.Callback):
    """The learning rate of each step, as the optimizer used it."""

    def __init__(self):
        super().__init__()
        self.rates = []

    def on_train_batch_end(self, batch, logs=None):
        self.rates.append(float(self.model.optimizer.learning_rate))


def cosine(pace=None):
    """The planned schedule of the budget tests: 30 steps, a warm-up of 2, peak 1."""
    from efficientdet_keras.training.optimizers import CosineDecaySchedule
    from efficientdet_keras.training.schedule_pace import PacedSchedule, SchedulePace
    return PacedSchedule(CosineDecaySchedule(1.0, 0.1, 2, 30), pace or SchedulePace())


@pytest.mark.quick
def test_a_paced_schedule_goes_on_from_where_it_stands_and_ends_where_told():
    from efficientdet_keras.training.schedule_pace import SchedulePace
    pace = SchedulePace()
    schedule = cosine(pace)
    planned = [float(schedule(step)) for step in range(31)]
    # In the warm-up: the warm-up keeps its 2 steps, the decay's 28 go into 10 - 2.
    assert pace.fit(1, steps_left=9, warmup_steps=2, total_steps=30) == pytest.approx(3.5)
    assert [float(schedule(s)) for s in range(3)] == pytest.approx(planned[:3])
    assert float(schedule(6)) == pytest.approx(planned[2 + 14])  # Halfway through the decay.
    assert float(schedule(10)) == pytest.approx(0.0, abs=1e-6)
    # Fitted again at step 6 with 8 steps left: from the same rate on, to its end at step 14.
    before = float(schedule(6))
    assert pace.fit(6, steps_left=8, warmup_steps=2, total_steps=30) == pytest.approx(14 / 8)
    assert float(schedule(6)) == pytest.approx(before)
    assert float(schedule(14)) == pytest.approx(0.0, abs=1e-6)
    # More room than the plan has: the plan's own end at step 30, never later.
    assert pace.fit(6, steps_left=100, warmup_steps=2, total_steps=30) == pytest.approx(14 / 24)
    assert float(schedule(6)) == pytest.approx(before)
    assert float(schedule(30)) == pytest.approx(0.0, abs=1e-6)
    # Serialised with its pace: a rebuilt optimizer goes on at the same rates.
    rebuilt = type(schedule).from_config(schedule.get_config())
    assert [float(rebuilt(s)) for s in (7, 20, 29)] == pytest.approx(
        [float(schedule(s)) for s in (7, 20, 29)])


@pytest.mark.quick
def test_a_time_budget_fits_the_decay_into_the_steps_it_leaves(tmp_path, monkeypatch):
    from efficientdet_keras.training import time_budget
    from efficientdet_keras.training.time_budget import TimeBudgetReached
    clock = FakeClock()
    monkeypatch.setattr(time_budget.time, "monotonic", clock)
    planned = cosine()
    recorder = RatesUsed()
    # 30 planned steps of one second, a budget of 15.5 s: fitted after step 3 (12.5 s left),
    # the decay ends at step 15.5; the run stops after step 15.
    with pytest.raises(TimeBudgetReached, match="after step 15,"):
        fit_with_budget(tmp_path, 15.5, clock, learning_rate=cosine(), recorder=recorder)
    rates = recorder.rates
    assert len(rates) == 15
    assert rates[:3] == pytest.approx([float(planned(s)) for s in range(3)])
    assert all(b <= a + 1e-6 for a, b in zip(rates[2:], rates[3:]))  # No jump up.
    assert rates[-1] < 0.05 < 0.5 < float(planned(14))  # Near the end, not halfway.
    pace = recorder.model.optimizer._learning_rate.pace.values()
    assert pace["rate"] == pytest.approx(27 / 12.5)


@pytest.mark.quick
def test_time_budget_stops_backed_up_within_one_step_and_counts_across_restarts(
        tmp_path, monkeypatch):
    from efficientdet_keras.training import time_budget
    from efficientdet_keras.training.time_budget import TimeBudgetReached, time_used
    clock = FakeClock()
    monkeypatch.setattr(time_budget.time, "monotonic", clock)

    # 10 steps an epoch of one second each, a budget of 15.5 s: step 16 would end at 16 s.
    with pytest.raises(TimeBudgetReached, match=r"^the time budget of 0.0043\d* h is used "
                       r"\(0.00 h\) after step 15, backed up in .*backup; raise time_budget"):
        fit_with_budget(tmp_path, 15.5, clock)
    assert time_used(str(tmp_path)) == pytest.approx(15.0)
    assert os.listdir(tmp_path / "backup")  # The step was backed up: a restart resumes there.

    # Started again with the same budget: nothing left, no step taken.
    with pytest.raises(TimeBudgetReached, match="after step 15,"):
        fit_with_budget(tmp_path, 15.5, clock)
    assert time_used(str(tmp_path)) == pytest.approx(15.0)

    # A larger budget resumes at step 16 and stops after step 20 (20 + 1 > 20.5), in the
    # second epoch's last step: after that epoch's end.
    with pytest.raises(TimeBudgetReached, match="after step 20,"):
        fit_with_budget(tmp_path, 20.5, clock)
    assert time_used(str(tmp_path)) == pytest.approx(20.0)


class BatchClock(keras.callbacks.Callback):
    """Moves a FakeClock one second at each step's start (after StopAtTimeBudget has read
    it: the package's callbacks come first), so that each step takes one second."""

    def __init__(self, clock):
        super().__init__()
        self.clock = clock

    def on_train_batch_begin(self, batch, logs=None):
        self.clock.step()


def test_a_run_out_of_time_ends_backed_up_on_a_fitted_schedule_and_resumes_on_it(
        tmp_path, monkeypatch):
    from efficientdet_keras import get_efficientdet_config, train
    from efficientdet_keras.training import time_budget
    from efficientdet_keras.training.optimizers import learning_rate_schedule
    from efficientdet_keras.training.schedule_pace import PacedSchedule, SchedulePace
    from efficientdet_keras.training.time_budget import TIME_USED_FILE
    clock = FakeClock()
    monkeypatch.setattr(time_budget.time, "monotonic", clock)
    data = str(tmp_path / "shapes")
    dataset_layouts.write_yolo(data)  # 8 training images: 4 steps an epoch of batch 2.
    hparams = SMALL_NETWORK_HPARAMS + (",image_size=64,batch_size=2,num_epochs=3,"
                                       "lr_warmup_epoch=0.25,nms_configs.method=hard")
    run = str(tmp_path / "run")
    lines, first = [], RatesUsed()
    # 12 planned steps of one second, 6.5 s: fitted after step 3 (the decay's 9 planned steps
    # into the 3.5 left); stopped after step 6, as step 7 would end at 7 s.
    result = train(run, data=data, hparams=hparams, eval_images=0, report=lines.append,
                   config_overrides={"time_budget": 6.5 / 3600},
                   callbacks=[first, BatchClock(clock)])
    assert result.history is None and result.last_epoch is None
    stop = [line for line in lines if line.startswith("Stopped: the time budget")]
    assert stop and "after step 6, backed up in" in stop[0], lines
    assert os.path.isfile(os.path.join(run, TIME_USED_FILE))
    backup = tf.train.load_checkpoint(tf.train.latest_checkpoint(
        os.path.join(run, "backup", "chief")))
    pace = {name: float(backup.get_tensor("model/schedule_pace/%s/.ATTRIBUTES/VARIABLE_VALUE"
                                          % name))
            for name in ("anchor_step", "anchor_position", "rate")}
    # Fitted after step 3 and again after step 5 (the first of epoch 2, whose end took no
    # time): the same rate, anchored where the run stood.
    assert pace == pytest.approx({"anchor_step": 5, "anchor_position": 3 + 2 * 9 / 3.5,
                                  "rate": 9 / 3.5}, rel=1e-5)
    config = get_efficientdet_config("efficientdet-d0")
    config.override(hparams)
    planned = learning_rate_schedule(config, 4)
    stopped = PacedSchedule(planned, SchedulePace(**pace))
    fitted = PacedSchedule(planned, SchedulePace(3, 3, 9 / 3.5))
    # Steps 1-5 (the stop raised before step 6's end reached the callbacks after it).
    assert first.rates == pytest.approx([float(fitted(s)) for s in range(5)], rel=1e-5)
    assert first.rates[-1] < 0.8 * float(planned(4))  # The planned decay would be higher.

    # Resumed with 6 s more: the rest of the decay spread over the 6 steps the run has left,
    # going on from the rate the stopped run would have taken next, down to its end.
    again = RatesUsed()
    result = train(run, data=data, hparams=hparams, eval_images=0, report=lines.append,
                   config_overrides={"time_budget": 12.5 / 3600},
                   callbacks=[again, BatchClock(clock)])
    assert result.last_epoch == 3 and len(again.rates) == 6
    assert again.rates[0] == pytest.approx(float(stopped(6)), rel=1e-5)
    assert all(b <= a for a, b in zip(again.rates, again.rates[1:]))
    assert again.rates[-1] < 0.01 * float(planned(1))

