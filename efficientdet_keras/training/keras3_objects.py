"""Keras 3 objects handed to a trainer that runs on Keras 2 (tf_keras).

On TensorFlow >= 2.16 `import keras` is Keras 3, and so is `tf.keras` when TensorFlow was
imported before this package. tf_keras' fit fails deep inside on a Keras 3 callback, and a
Keras 3 optimizer, loss or metric does not fit the trainer at all. So, at the door of
compile, fit, evaluate and predict:

- a Keras 3 callback runs inside tf_keras' loop through `Keras3Callback`, which gives it the
  hooks tf_keras calls and logs as numbers, as Keras 3's own loop does;
- the few Keras 3 callbacks that would do something else here (`UNFIT_CALLBACKS`), a Keras 3
  optimizer, and Keras losses and compiled metrics of either Keras (the detection steps compute
  their own losses and ignore compiled metrics) stop with one line saying what to pass instead,
  and so does a callback of either Keras that sets the learning rate while the config's
  schedule computes it;
- a callback of either Keras that keeps the best value of a metric in "auto" mode is told
  which way the trainer's metrics improve: the losses fall and COCO AP and AR rise. (Keras 3
  refuses to guess for anything but "loss"; tf_keras' guess takes the lowest AP as the best.)
"""

import sys
from typing import Any, Optional, Sequence

import numpy as np
import tf_keras as keras
from absl import logging

from efficientdet_keras.evaluation.coco_evaluator import METRIC_NAMES

# Keras 3 callbacks whose work this trainer cannot host, and what to use instead.
UNFIT_CALLBACKS = {
    "BackupAndRestore": "it puts back the weights but neither the epoch (tf_keras' fit does "
                        "not read it), the optimizer nor the moving average, so a resumed run "
                        "would start again at epoch 1; pass tf_keras.callbacks.BackupAndRestore, "
                        "or use get_callbacks(), whose backup resumes at the step",
    "SwapEMAWeights": "it swaps the averages of a Keras 3 optimizer; this trainer keeps its own "
                      "(config moving_average_decay), which its COCO evaluation and checkpoints "
                      "use; see training.ema.ema_weights",
    "OrbaxCheckpoint": "it saves through Keras 3's own model API; pass "
                       "tf_keras.callbacks.ModelCheckpoint, or use get_callbacks(), whose "
                       "checkpoints keep the released variable names",
}

_HOOKS = ("on_train_begin", "on_train_end", "on_epoch_begin", "on_epoch_end",
          "on_test_begin", "on_test_end", "on_predict_begin", "on_predict_end",
          "on_train_batch_begin", "on_train_batch_end", "on_test_batch_begin",
          "on_test_batch_end", "on_predict_batch_begin", "on_predict_batch_end")


def is_keras3(value: Any) -> bool:
    """Whether `value` is an object of Keras 3 (the `keras` package), not of tf_keras."""
    return any(klass.__module__.split(".")[0] == "keras" for klass in type(value).__mro__)


def keras3_name(value: Any) -> str:
    """How a user writes the object's class: keras.callbacks.EarlyStopping,
    tf_keras.losses.Huber, or the module and name of its own class."""
    klass = type(value)
    for package_name in ("keras", "tf_keras"):
        package = sys.modules.get(package_name)
        for folder in ("callbacks", "optimizers", "losses", "metrics", "layers"):
            if getattr(getattr(package, folder, None), klass.__name__, None) is klass:
                return "%s.%s.%s" % (package_name, folder, klass.__name__)
    return "%s.%s" % (klass.__module__, klass.__qualname__)


def _keras3_base(value: Any) -> Optional[type]:
    """The Keras 3 class among the object's bases that `keras.callbacks` names."""
    callbacks = getattr(sys.modules.get("keras"), "callbacks", None)
    for klass in type(value).__mro__:
        if klass.__module__.split(".")[0] == "keras" and \
                getattr(callbacks, klass.__name__, None) is klass:
            return klass
    return None


def metric_rises(name: str) -> Optional[bool]:
    """Whether a logged value improves by rising (COCO AP and AR), falling (the losses), or
    None when the trainer does not know."""
    base = name[len("val_"):] if name.startswith("val_") else name
    if base in METRIC_NAMES or base.startswith("AP_/"):
        return True
    if base.endswith("loss"):
        return False
    return None


class Keras3Callback(keras.callbacks.Callback):
    """Runs a Keras 3 callback in tf_keras' fit, evaluate and predict.

    Every hook is passed on with the same arguments; logs arrive as Python numbers (this
    callback does not take TensorFlow logs), which is what Keras 3 callbacks read. The batch
    hooks are called only when the wrapped callback has its own, so a callback that works per
    epoch adds no per-step host sync.
    """

    def __init__(self, callback):
        super().__init__()
        self.callback = callback
        base = sys.modules["keras"].callbacks.Callback
        # A hook of its class, or of the object itself (LambdaCallback sets them so).
        self._overridden = {hook for hook in _HOOKS
                            if hook in vars(callback)
                            or getattr(type(callback), hook, None) is not getattr(base, hook)}

    def set_model(self, model):
        super().set_model(model)
        self.callback.set_model(model)

    def set_params(self, params):
        super().set_params(params)
        self.callback.set_params(params)

    def _implements_train_batch_hooks(self):
        return bool(self._overridden & {"on_train_batch_begin", "on_train_batch_end"})

    def _implements_test_batch_hooks(self):
        return bool(self._overridden & {"on_test_batch_begin", "on_test_batch_end"})

    def _implements_predict_batch_hooks(self):
        return bool(self._overridden & {"on_predict_batch_begin", "on_predict_batch_end"})

    def __repr__(self):
        return "Keras3Callback(%s)" % keras3_name(self.callback)


def _pass_on(hook):
    def call(self, *args, **kwargs):
        if hook in self._overridden:
            getattr(self.callback, hook)(*args, **kwargs)
    call.__name__ = hook
    return call


for _hook in _HOOKS:
    setattr(Keras3Callback, _hook, _pass_on(_hook))


def _point_keras3_monitor(callback) -> None:
    """A Keras 3 monitoring callback in auto mode gets the direction of the trainer's metric."""
    if getattr(callback, "mode", None) != "auto" or getattr(callback, "monitor_op", 1) is not None:
        return
    rises = metric_rises(str(getattr(callback, "monitor", "")))
    if rises is not None:
        callback.mode = "max" if rises else "min"


def _point_tf_keras_monitor(callback) -> None:
    """tf_keras' auto mode takes any metric without "acc" in its name as falling, so a
    callback monitoring val_AP would keep the worst epoch: it is turned to keep the highest."""
    monitor = str(getattr(callback, "monitor", ""))
    if not metric_rises(monitor):
        return
    if isinstance(callback, keras.callbacks.ReduceLROnPlateau):
        if callback.mode == "auto":
            callback.mode = "max"
            callback._reset()
            _say_turned(callback, monitor)
        return
    if not isinstance(callback, (keras.callbacks.EarlyStopping,
                                 keras.callbacks.ModelCheckpoint)):
        return
    if callback.monitor_op is not np.less:
        return
    callback.monitor_op = np.greater
    if isinstance(callback, keras.callbacks.EarlyStopping):
        callback.min_delta = abs(callback.min_delta)
    elif callback.best == np.inf:
        callback.best = -np.inf
    _say_turned(callback, monitor)


def _say_turned(callback, monitor: str) -> None:
    logging.warning("%s monitors %s, which rises as the model improves: it keeps the highest "
                    "value (pass mode='max' to say so)", type(callback).__name__, monitor)


# Callbacks of either Keras that set the optimizer's learning rate.
_RATE_SETTERS = ("ReduceLROnPlateau", "LearningRateScheduler")


def _check_rate_setter(callback, optimizer, where: str) -> None:
    """A callback that sets the learning rate needs a rate it can set: the config's schedule
    computes the rate at every step, and Keras would refuse only epochs later."""
    optimizer = getattr(optimizer, "inner_optimizer", optimizer)  # Under loss scaling.
    rate = getattr(optimizer, "_learning_rate", None)
    names = {klass.__name__ for klass in type(callback).__mro__}
    if not names & set(_RATE_SETTERS) or not callable(rate):
        return
    raise TypeError("%s(callbacks=[%s]): it sets the learning rate, which the config's schedule "
                    "(lr_decay_method) computes at every step; to let it, compile with a number: "
                    "compile(optimizer=tf_keras.optimizers.SGD(learning_rate=0.01, "
                    "momentum=0.9))" % (where, keras3_name(callback)))


def door_callbacks(callbacks: Optional[Sequence[Any]], where: str, optimizer=None):
    """The callbacks a user handed to fit, evaluate or predict (`where`), made fit for
    tf_keras: Keras 3 ones wrapped, monitors pointed the right way; a Keras 3 callback that
    cannot work here, or a learning-rate setter facing the config's schedule (`optimizer`),
    stops with one line."""
    if callbacks is None or isinstance(callbacks, keras.callbacks.CallbackList):
        return callbacks
    fitted = []
    for callback in callbacks:
        _check_rate_setter(callback, optimizer, where)
        if is_keras3(callback):
            base = _keras3_base(callback)
            if base is not None and base.__name__ in UNFIT_CALLBACKS:
                raise TypeError("%s(callbacks=[%s]): a Keras 3 callback this trainer cannot run: "
                                "%s" % (where, keras3_name(callback),
                                        UNFIT_CALLBACKS[base.__name__]))
            _point_keras3_monitor(callback)
            callback = Keras3Callback(callback)
        else:
            _point_tf_keras_monitor(callback)
        fitted.append(callback)
    return fitted


def check_compile_arguments(optimizer=None, loss=None, metrics=None,
                            weighted_metrics=None) -> None:
    """One line for what compile() cannot take: Keras 3 optimizers, and Keras
    losses and metrics of either Keras (the detection steps compute their own losses)."""
    if optimizer is not None and is_keras3(optimizer):
        raise TypeError("compile(optimizer=%s): a Keras 3 optimizer; this trainer runs on Keras 2: "
                        "pass tf_keras.optimizers.%s with the same arguments, or leave optimizer "
                        "out to build the config's" % (keras3_name(optimizer),
                                                       type(optimizer).__name__))
    if loss is not None and (is_keras3(loss) or isinstance(loss, keras.losses.Loss)):
        raise TypeError("compile(loss=%s): a Keras loss takes (y_true, y_pred); the trainer's "
                        "loss is called as loss(labels, class_outputs, box_outputs) and returns "
                        "a dict with det_loss (see detection.losses.DetectionLoss)"
                        % keras3_name(loss))
    for name, value in (("metrics", metrics), ("weighted_metrics", weighted_metrics)):
        if value:
            raise TypeError("compile(%s=...): this trainer's steps log the detection losses, "
                            "not compiled metrics; COCO AP comes from get_callbacks() "
                            "(COCOCallback)" % name)
