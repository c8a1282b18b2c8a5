"""Config keys of training: optimizer, learning-rate schedule, clipping, length, backups,
weight averaging, starting weights and model optimizations."""

from efficientdet_keras.config.keys.checks import (ANY_VALUE, BOOLEAN, NON_NEGATIVE_NUMBER,
                                                   POSITIVE_NUMBER, integer_at_least, number_in,
                                                   one_of, optional)
from efficientdet_keras.config.keys.choices import LR_DECAY_METHODS, OPTIMIZERS
from efficientdet_keras.config.keys.row import FREE_MAPPING, ConfigKey

TITLE = "Optimisation"

KEYS = (
    ConfigKey(
        "optimizer", "sgd", "str", one_of(*OPTIMIZERS),
        "sgd (with momentum), adam (beta_1 = momentum) or rmsprop (momentum, rmsprop_rho, "
        "rmsprop_epsilon)."),
    ConfigKey(
        "momentum", 0.9, "float", number_in(0.0, 1.0),
        "Momentum of sgd and rmsprop; beta_1 of adam."),
    ConfigKey(
        "rmsprop_rho", 0.9, "float", number_in(0.0, 1.0),
        "rmsprop: decay of the average of squared gradients (EfficientNet's 0.9)."),
    ConfigKey(
        "rmsprop_epsilon", 1e-3, "float", POSITIVE_NUMBER,
        "rmsprop: added to the average of squared gradients inside the square root "
        "(EfficientNet's 0.001)."),
    ConfigKey(
        "learning_rate", 0.08, "float", POSITIVE_NUMBER,
        "Peak learning rate per global batch of 64; a run uses learning_rate x batch_size / "
        "64."),
    ConfigKey(
        "lr_warmup_init", 0.008, "float", NON_NEGATIVE_NUMBER,
        "Learning rate at step 0, rising linearly to the peak over the warm-up; not scaled "
        "with the batch."),
    ConfigKey(
        "lr_warmup_epoch", 1.0, "float", NON_NEGATIVE_NUMBER,
        "Length of the linear warm-up in epochs (fractions allowed); 0: none."),
    ConfigKey(
        "lr_decay_method", "cosine", "str", one_of(*LR_DECAY_METHODS),
        "Schedule after the warm-up: cosine (to 0 at the last step), stepwise (x0.1 and x0.01 "
        "at the drop epochs), polynomial or constant."),
    ConfigKey(
        "first_lr_drop_epoch", 200.0, "float", NON_NEGATIVE_NUMBER,
        "stepwise: the epoch from which the rate is a tenth of the peak."),
    ConfigKey(
        "second_lr_drop_epoch", 250.0, "float", NON_NEGATIVE_NUMBER,
        "stepwise: the epoch from which the rate is a hundredth of the peak."),
    ConfigKey(
        "poly_lr_power", 0.9, "float", ANY_VALUE,
        "polynomial: the rate is peak x (1 - progress)^poly_lr_power, progress going from 0 "
        "at the warm-up's end to 1 at the last step."),
    ConfigKey(
        "clip_gradients_norm", 10.0, "float", NON_NEGATIVE_NUMBER,
        "Gradients are scaled down so that their global L2 norm is at most this; 0: no "
        "clipping."),
    ConfigKey(
        "clip_gradients_per_tensor", False, "bool", BOOLEAN,
        "Before the global clipping, clip each gradient tensor to clip_gradients_norm on its "
        "own, as the released trainer did."),
    ConfigKey(
        "nan_recovery_attempts", 0, "int", integer_at_least(0),
        "After a step with a NaN or inf loss or gradient, roll back to the last backup and go "
        "on with the learning rate x nan_recovery_lr_factor, at most this many times; 0: stop "
        "with an error."),
    ConfigKey(
        "nan_recovery_lr_factor", 0.5, "float", number_in(0.0, 1.0, low_open=True),
        "Each NaN recovery multiplies the learning rate by this factor."),
    ConfigKey(
        "num_epochs", 300, "int", integer_at_least(1),
        "Training epochs; the schedule ends at num_epochs x steps_per_epoch steps."),
    ConfigKey(
        "patience", 0, "int", integer_at_least(0, note="0: off"),
        "COCO evaluations in a row without a better validation AP after which training "
        "stops, the best checkpoint archived (with map_freq 1, epochs); a resumed run keeps "
        "the count; 0: train all num_epochs."),
    ConfigKey(
        "time_budget", None, "float or null",
        optional(POSITIVE_NUMBER, allowed="none or a positive number"),
        "Hours of wall time the run may use, over all its restarts: it stops, backed up, at "
        "the step after which the next would pass them, the learning-rate decay fitted into "
        "the steps they leave; null: no limit."),
    ConfigKey(
        "batch_size", 64, "int", integer_at_least(1),
        "Global batch: images per step over all replicas together, divided evenly among "
        "them."),
    ConfigKey(
        "steps_per_epoch", None, "int or null",
        optional(integer_at_least(1), allowed="none or a positive integer"),
        "Training steps per epoch; null: a training run counts the full batches of its "
        "training images (or --num_examples_per_epoch) and stores them here."),
    # A backup is quick next to the steps between two, so a kill loses little training.
    ConfigKey(
        "backup_steps", 200, "int", integer_at_least(0, note="0: epoch ends"),
        "Steps between the backups in model_dir/backup (weights, optimizer state, averages) a "
        "killed run resumes from, besides one at every epoch end; 0: epoch ends only."),
    ConfigKey(
        "moving_average_decay", 0.9998, "float", number_in(0.0, 1.0),
        "Per-step decay of the exponential moving average of the weights that evaluation "
        "uses; 0: no average."),
    ConfigKey(
        "var_freeze_expr", None, "str (regex) or null", ANY_VALUE,
        "Regex (matched at the start of variable names) of the variables that stay fixed in "
        "training, their BatchNorms in inference mode; null: train all."),
    ConfigKey(
        "class_rows_by_name", True, "bool", BOOLEAN,
        "Fine-tuning a checkpoint that names its classes (a released one, a run of this "
        "package) on data that names its own: each class the checkpoint knows by name (or "
        "alias) starts from its rows of the class-prediction layer, the others from the "
        "focal-loss prior; false: the class head loads whole when the class counts match and "
        "is skipped when they do not."),
    ConfigKey(
        "var_exclude_expr", None, "str (regex) or null", ANY_VALUE,
        "Regex of the variables that loading a pretrained checkpoint leaves at their initial "
        "values; null: load all that fit."),
    ConfigKey(
        "backbone_ckpt", None, "str or null", ANY_VALUE,
        "An ImageNet EfficientNet checkpoint that a new run's backbone starts from (a path, or "
        "a released name such as efficientnet-b0 or efficientnet-lite0); the BiFPN and heads "
        "start from scratch. Not used with a pretrained checkpoint or when resuming."),
    ConfigKey(
        "hub_module_url", None, "str or null", ANY_VALUE,
        "A TF-Hub EfficientDet feature module (a path, file:// or http(s) URL, or a Kaggle "
        "Models handle) to fine-tune with new prediction layers; null: the package's own "
        "network."),
    # Its settings are checked by optimization_settings.py, from rules.validate_config.
    ConfigKey(
        "model_optimizations", {}, "dict", ANY_VALUE,
        "Pruning or quantization-aware training: {} (none), {prune: {...}} or "
        "{quantize: {...}}, with the settings of the pruning and quantization table below.",
        form=FREE_MAPPING),
)
