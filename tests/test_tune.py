"""efficientdet-tune: a 3-trial search on the demo data writes its table and a settings file
that trains; killed in its second trial, it continues with that trial's settings in that
trial's folder, not from the first."""

import csv
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from helpers import REPO_ROOT, SMALL_NETWORK_HPARAMS

optuna = pytest.importorskip("optuna", reason="the tune extra (optuna) is not installed")

from efficientdet_keras.workflows.tune import (FREEZE_CHOICES, SEARCH_SPACE,  # noqa: E402
                                               trial_config_values, tune)

TINY = dict(demo=True, demo_images=8,
            hparams="steps_per_epoch=1,image_size=128," + SMALL_NETWORK_HPARAMS,
            config_overrides={"num_epochs": 1}, eval_images=0)
SEARCH = ("from efficientdet_keras.workflows.tune import tune\n"
          "tune(%r, trials=3, demo=True, demo_images=8, hparams=%r, "
          "config_overrides={'num_epochs': 1}, eval_images=0)\n")


@pytest.mark.quick
def test_the_search_space_sets_config_keys():
    from efficientdet_keras import get_efficientdet_config
    config = get_efficientdet_config("efficientdet-d0")
    trial = optuna.trial.FixedTrial({"learning_rate": 0.02, "lr_warmup_epoch": 0.5,
                                     "jitter_min": 0.7, "jitter_max": 1.4,
                                     "var_freeze_expr": "backbone_bifpn"})
    values = trial_config_values(trial, SEARCH_SPACE, config)
    assert values == {"learning_rate": 0.02, "lr_warmup_epoch": 0.5, "jitter_min": 0.7,
                      "jitter_max": 1.4, "var_freeze_expr": FREEZE_CHOICES["backbone_bifpn"]}
    # The learning rate's range is relative to the config's own: 0.08 x 1/4 .. 4.
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    rates = [trial_config_values(study.ask(), SEARCH_SPACE[:1], config)["learning_rate"]
             for _ in range(50)]
    assert 0.02 <= min(rates) < 0.04 and 0.16 < max(rates) <= 0.32


def wait_for(path, process, timeout=600):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert process.poll() is None, "the search ended before %s appeared" % path
        assert time.monotonic() < deadline, "no %s after %d s" % (path, timeout)
        time.sleep(0.5)


def modification_times(folder):
    return {name: os.path.getmtime(os.path.join(folder, name)) for name in os.listdir(folder)
            if name.startswith("ckpt-")}


def test_a_killed_search_continues_its_second_trial_and_its_settings_train(tmp_path):
    search = str(tmp_path / "search")
    # A cold process: the kill must end the search itself at once (a warm launcher's command
    # would outlive it for a moment, still holding the folder's train.lock).
    process = subprocess.Popen([sys.executable, "-c", SEARCH % (search, TINY["hparams"])],
                               cwd=REPO_ROOT, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:  # Killed as its second trial starts training.
        wait_for(os.path.join(search, "trial-1", "config.yaml"), process)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    first_trial = modification_times(os.path.join(search, "trial-0"))
    assert first_trial, "the first trial kept no checkpoint"

    lines = []
    result = tune(search, trials=3, report=lines.append, **TINY)
    assert "Trial 1 was cut off; it runs again in trial-1" in lines
    assert "Search in %s: 1 of 3 trials done; running 2" % search in lines
    assert modification_times(os.path.join(search, "trial-0")) == first_trial  # Not rerun.
    assert {"best_hparams.yaml", "trial-0", "trial-1", "trial-2", "trials.csv",
            "tune.db"} <= set(os.listdir(search))
    assert not os.path.exists(os.path.join(search, "trial-3"))
    study = optuna.load_study(study_name="efficientdet-tune",
                              storage="sqlite:///%s" % os.path.join(search, "tune.db"))
    states = [t.state.name for t in study.trials]
    assert states.count("FAIL") == 1 and len(states) == 4
    killed = next(t for t in study.trials if t.state.name == "FAIL")
    repeated = next(t for t in study.trials if t.state.name != "FAIL" and
                    t.user_attrs["folder"] == 1)
    assert repeated.params == killed.params and repeated.number == 2
    params = [t.params for t in study.trials if t.state.name != "FAIL"]
    assert params[0] != params[2]  # The continued search draws new settings.

    with open(os.path.join(search, "trials.csv")) as f:
        rows = list(csv.DictReader(f))
    assert [int(r["trial"]) for r in rows] == [0, 1, 2]
    assert {r["state"] for r in rows} <= {"complete", "pruned"}
    assert [r["trial"] for r in rows] == [str(r["trial"]) for r in result.rows]
    assert result.table().splitlines()[0].split()[:4] == ["trial", "state", "AP", "best_epoch"]

    # Started again with all trials done, it only writes the results again.
    assert tune(search, trials=3, report=lines.append, **TINY).rows == result.rows
    best = yaml.safe_load(open(result.best_hparams))
    best_row = max((r for r in rows if r["state"] == "complete"), key=lambda r: float(r["AP"]))
    assert best["learning_rate"] == pytest.approx(float(best_row["learning_rate"]))
    assert best["var_freeze_expr"] == FREEZE_CHOICES[best_row["var_freeze_expr"]]

    from efficientdet_keras import train
    trained = train(str(tmp_path / "best"), demo=True, demo_images=8, evaluate=False,
                    hparams=result.best_hparams)
    with open(os.path.join(trained.model_dir, "config.yaml")) as f:
        used = yaml.safe_load(f)
    assert used["learning_rate"] == pytest.approx(best["learning_rate"])
    assert os.path.exists(os.path.join(trained.model_dir, "ckpt-1.index"))
