"""What each config key means, one line per dotted key, as plain data.

The generated page reference/config.md (docs/hooks/config_reference.py) shows these next to
each key's type and default (defaults.py) and its allowed values (rules.py); the docs build
and tests/test_config_reference.py fail when a key has no description here.
"""

from typing import Dict, Tuple

# The page's sections: (title, first key); a section runs up to the next one's first key,
# in the order of defaults.py.
SECTIONS: Tuple[Tuple[str, str], ...] = (
    ("Model", "name"),
    ("Input pipeline and augmentation", "mean_rgb"),
    ("Loss", "alpha"),
    ("Optimisation", "optimizer"),
    ("Precision, compilation, distribution", "mixed_precision"),
    ("Evaluation and post-processing", "map_freq"),
    ("Experiment tracking", "mlflow_tracking_uri"),
)

# Types of the keys whose default does not show what else they take (null defaults,
# keys with several forms).
VALUE_TYPES: Dict[str, str] = {
    "image_size": 'int, "WxH" or [height, width]',
    "label_map": "dict, str or null",
    "survival_prob": "float or null",
    "backbone_survival_prob": "float or null",
    "backbone_blocks_per_stage": "int or null",
    "sync_batch_norm": "bool or null",
    "autoaugment_policy": "str or null",
    "tta": "str or null",
    "iou_loss_type": "str or null",
    "steps_per_epoch": "int or null",
    "var_freeze_expr": "str (regex) or null",
    "var_exclude_expr": "str (regex) or null",
    "backbone_ckpt": "str or null",
    "hub_module_url": "str or null",
    "model_optimizations": "dict",
    "mixed_precision": "bool, str or null",
    "loss_scale": "str, float or null",
    "grappler_off": "str, list of str or null",
    "mlflow_tracking_uri": "str or null",
}

KEY_DESCRIPTIONS: Dict[str, str] = {
    # Model.
    "name": "The model's name, one of the presets below; get_efficientdet_config sets it and "
            "the Keras model is named after it.",
    "backbone_name": "The EfficientNet backbone: efficientnet-b0 ... b7, or efficientnet-lite0 "
                     "... lite4 (no squeeze-and-excitation; the Lite presets' mobile backbones).",
    "image_size": "Network input in pixels: N for N x N, WxH for width x height, or "
                  "[height, width]; stored as (height, width).",
    "num_classes": "Outputs of the class head: class ids in the data run from 1 to num_classes, "
                   "0 is background (COCO and the released checkpoints: 90).",
    "label_map": "Class names {class id: name} for per-class AP, drawn detections, results "
                 "and the exported label files; or a built-in map by name: coco (the 90 ids "
                 "of the released checkpoints), voc, waymo; null names none.",
    "min_level": "Finest feature level of the BiFPN and heads; level L has a stride of 2^L "
                 "pixels (3: 8 pixels).",
    "max_level": "Coarsest feature level; levels above 5, the backbone's last, are made by "
                 "pooling.",
    "num_scales": "Anchor sizes per octave at each location: anchor_scale x 2^(i / num_scales) "
                  "strides for i = 0 .. num_scales - 1.",
    "aspect_ratios": "Anchor shapes as width / height; each location has "
                     "num_scales x len(aspect_ratios) anchors.",
    "anchor_scale": "Base anchor size in strides: at level L the first anchor is "
                    "anchor_scale x 2^L pixels on a side.",
    "fpn_num_filters": "Channels of the BiFPN feature maps and of the box and class heads.",
    "fpn_cell_repeats": "Number of BiFPN cells stacked on the backbone's features.",
    "box_class_repeats": "Convolution layers in each of the box and class heads before its "
                         "prediction layer (0: the prediction layer alone).",
    "fpn_name": "The feature network's graph: bifpn (the EfficientDet paper's; bifpn_dyn is the "
                "older name) or qufpn (the reference's quad extension: a second bottom-up then "
                "top-down pass, added to the first per level; about twice the nodes).",
    "fpn_weight_method": "How a BiFPN node fuses its inputs: fastattn (learned weights after "
                         "ReLU, divided by their sum), attn (softmax of learned weights), "
                         "channel_fastattn and channel_attn (the same with one weight per "
                         "channel), sum (unweighted).",
    "separable_conv": "Depthwise-separable instead of plain 3x3 convolutions in the BiFPN and "
                      "the heads.",
    "apply_bn_for_resampling": "BatchNorm after the 1x1 convolution that gives a resampled "
                               "feature map the BiFPN's channel count.",
    "conv_after_downsample": "When a feature map is pooled to a coarser level, change its "
                             "channel count after the pooling instead of before.",
    "conv_bn_act_pattern": "BiFPN nodes run conv, BatchNorm, activation; false: activation, "
                           "conv (with bias), BatchNorm, as the released models.",
    "pooling_type": "Pooling that takes a feature map to a coarser level.",
    "act_type": "Activation of the backbone, BiFPN and heads; swish and silu are the same "
                "function, swish_native computes it from plain ops (x * sigmoid(x)), mish is "
                "x * tanh(softplus(x)); the Lite presets use relu6. The variable names do not "
                "depend on it, so a checkpoint loads under any of them.",
    "survival_prob": "Heads: with a value, each layer after the first gets a residual "
                     "connection, dropped per image with probability 1 - survival_prob in "
                     "training; null: no residuals, as released.",
    "backbone_blocks_per_stage": "At most this many MBConv blocks in each of the backbone's 7 "
                                 "stages; null: the backbone's own depth (16 blocks for "
                                 "efficientnet-b0). 1 builds a 7-block backbone with every "
                                 "stage's kind of block, quick to build and trace, for smoke "
                                 "runs and tests; released and ImageNet checkpoints need null.",
    "backbone_survival_prob": "Backbone drop-connect: survival probability of the last block, "
                              "rising linearly to 1 at the first; null: no drop-connect for "
                              "efficientnet-b0 (as released), 0.8 for the others.",
    "batch_norm_momentum": "Momentum of the BatchNorm moving statistics; 0.99 averages over "
                           "about 100 batches, 0.97 over about 33.",
    "batch_norm_epsilon": "Added to the variance in every BatchNorm.",
    "batch_norm_renorm": "Batch Renormalization: training-mode BatchNorm corrected towards the "
                         "moving statistics, for short runs on small images; adds variables, "
                         "so off to load the released checkpoints.",
    "sync_batch_norm": "BatchNorm statistics of the global batch, all-reduced across replicas "
                       "in training; null: on when built under a strategy with more than one "
                       "replica.",
    "fold_batch_norm": "Inference only: every BatchNorm is folded into the convolution before "
                       "it (export and evaluation set it); such a model cannot be trained.",
    "is_training_bn": "false: BatchNorm stays in inference mode, using and keeping its moving "
                      "statistics, even in training.",
    "grad_checkpoint": "Recompute each backbone block's activations in the backward pass "
                       "instead of keeping them: less memory for about one more backbone "
                       "forward pass per step.",
    # Input pipeline and augmentation.
    "mean_rgb": "Subtracted from the input pixels (0-255 scale) before dividing by "
                "stddev_rgb: one value for all channels or three (R, G, B).",
    "stddev_rgb": "Divides the input pixels (0-255 scale) after subtracting mean_rgb: one "
                  "value or three (R, G, B).",
    "resize_mode": "How an image is fitted to image_size, in training, evaluation and every "
                   "export: letterbox (resized keeping its aspect ratio, padded at the bottom "
                   "and right) or stretch (each axis resized on its own, as MediaPipe and the "
                   "TFLite Task Library resize camera frames; train with it for those clients).",
    "tta": "Test-time augmentation of efficientdet-eval and the Detector: flip runs each "
           "image and its mirror image and fuses the two sets of detections by weighted box "
           "fusion; null: none. The trainer's own evaluation after each epoch stays plain.",
    "input_rand_hflip": "Flip training images left to right with probability 0.5.",
    "jitter_min": "Scale jitter: smallest random scale of a training image, relative to "
                  "image_size, before the random crop.",
    "jitter_max": "Scale jitter: largest random scale of a training image; evaluation always "
                  "uses 1.",
    "max_instances_per_image": "Objects kept per image: the first ones; the rest are dropped, "
                               "counted in the data report and efficientdet-check-data (the "
                               "first few such records named in a warning). The labels are "
                               "padded to this count.",
    "autoaugment_policy": "AutoAugment: a learned detection policy v0 ... v3, randaug "
                          "(RandAugment with the two keys after this one), or null (off).",
    "randaugment_num_layers": "randaug: operations applied to each training image.",
    "randaugment_magnitude": "randaug: strength of each operation on the policies' level "
                             "scale, where 10 is their largest level.",
    "grid_mask": "GridMask: cut a randomly placed, rotated grid of square holes from each "
                 "training image.",
    "mosaic": "Probability that a training image is a mosaic of four images; 0: off.",
    "mosaic_close_epochs": "The last this many epochs train without mosaic (needs "
                           "steps_per_epoch); 0: mosaic to the end.",
    "mixup": "Probability that a training image is blended with the one before it; 0: off.",
    "skip_crowd_during_training": "true: the loss ignores anchors on crowd boxes; false: "
                                  "crowd boxes train as ordinary objects.",
    "strict_data": "Class ids outside 1 .. num_classes: false drops those boxes with a "
                   "warning, true stops at the first with an error naming the record.",
    # Loss.
    "alpha": "Focal loss: weight of the positive terms; negative terms get 1 - alpha.",
    "gamma": "Focal loss focusing exponent: (1 - p_t)^gamma down-weights well-classified "
             "anchors.",
    "label_smoothing": "Class targets move towards 0.5 by this fraction: 1 becomes "
                       "1 - s / 2, 0 becomes s / 2.",
    "delta": "Huber threshold of the box loss, in encoded box-offset units: quadratic below, "
             "linear above.",
    "box_loss_weight": "det_loss = cls_loss + box_loss_weight x box_loss "
                       "(+ iou_loss_weight x iou_loss).",
    "iou_loss_type": "An extra loss on the decoded boxes of positive anchors, 1 - IoU (or "
                     "GIoU, DIoU, CIoU); null or an empty string: off.",
    "iou_loss_weight": "Weight of the IoU loss in det_loss when iou_loss_type is set.",
    "weight_decay": "L2 penalty weight_decay x sum(w^2) / 2 over the trained convolution "
                    "kernels, added to the loss; 0: none.",
    # Optimisation.
    "optimizer": "sgd (with momentum), adam (beta_1 = momentum) or rmsprop (momentum, "
                 "rmsprop_rho, rmsprop_epsilon).",
    "momentum": "Momentum of sgd and rmsprop; beta_1 of adam.",
    "rmsprop_rho": "rmsprop: decay of the average of squared gradients (EfficientNet's 0.9).",
    "rmsprop_epsilon": "rmsprop: added to the average of squared gradients inside the square "
                       "root (EfficientNet's 0.001).",
    "learning_rate": "Peak learning rate per global batch of 64; a run uses "
                     "learning_rate x batch_size / 64.",
    "lr_warmup_init": "Learning rate at step 0, rising linearly to the peak over the warm-up; "
                      "not scaled with the batch.",
    "lr_warmup_epoch": "Length of the linear warm-up in epochs (fractions allowed); 0: none.",
    "lr_decay_method": "Schedule after the warm-up: cosine (to 0 at the last step), stepwise "
                       "(x0.1 and x0.01 at the drop epochs), polynomial or constant.",
    "first_lr_drop_epoch": "stepwise: the epoch from which the rate is a tenth of the peak.",
    "second_lr_drop_epoch": "stepwise: the epoch from which the rate is a hundredth of the "
                            "peak.",
    "poly_lr_power": "polynomial: the rate is peak x (1 - progress)^poly_lr_power, progress "
                     "going from 0 at the warm-up's end to 1 at the last step.",
    "clip_gradients_norm": "Gradients are scaled down so that their global L2 norm is at most "
                           "this; 0: no clipping.",
    "clip_gradients_per_tensor": "Before the global clipping, clip each gradient tensor to "
                                 "clip_gradients_norm on its own, as the released trainer "
                                 "did.",
    "nan_recovery_attempts": "After a step with a NaN or inf loss or gradient, roll back to the "
                             "last backup and go on with the learning rate x "
                             "nan_recovery_lr_factor, at most this many times; 0: stop with an "
                             "error.",
    "nan_recovery_lr_factor": "Each NaN recovery multiplies the learning rate by this factor.",
    "num_epochs": "Training epochs; the schedule ends at num_epochs x steps_per_epoch steps.",
    "batch_size": "Global batch: images per step over all replicas together, divided evenly "
                  "among them.",
    "steps_per_epoch": "Training steps per epoch; null: a training run counts the full batches "
                       "of its training images (or --num_examples_per_epoch) and stores them "
                       "here.",
    "backup_steps": "Steps between the backups in model_dir/backup (weights, optimizer state, "
                    "averages) a killed run resumes from, besides one at every epoch end; 0: "
                    "epoch ends only.",
    "moving_average_decay": "Per-step decay of the exponential moving average of the weights "
                            "that evaluation uses; 0: no average.",
    "var_freeze_expr": "Regex (matched at the start of variable names) of the variables that "
                       "stay fixed in training, their BatchNorms in inference mode; null: "
                       "train all.",
    "var_exclude_expr": "Regex of the variables that loading a pretrained checkpoint leaves at "
                        "their initial values; null: load all that fit.",
    "backbone_ckpt": "An ImageNet EfficientNet checkpoint that a new run's backbone starts "
                     "from (a path, or a released name such as efficientnet-b0 or "
                     "efficientnet-lite0); the BiFPN and heads start from scratch. Not used "
                     "with a pretrained checkpoint or when resuming.",
    "hub_module_url": "A TF-Hub EfficientDet feature module (a path, file:// or hub URL) to "
                      "fine-tune with new prediction layers; null: the package's own network.",
    "model_optimizations": "Pruning or quantization-aware training: {} (none), {prune: {...}} "
                           "or {quantize: {...}}, with the settings of the pruning and "
                           "quantization table below.",
    # Precision, compilation, distribution.
    "mixed_precision": "float16 or bfloat16: compute in that type, variables in float32 "
                       "(float16 adds loss scaling); true: float16 on GPU, bfloat16 on TPU; "
                       "false or float32: float32; null: false, bfloat16 with --strategy=tpu.",
    "loss_scale": "float16's loss scale: null or dynamic, the loss-scale optimizer's own (from "
                  "2 ** 15, halved at each overflow, doubled after 2000 steps without); a number: "
                  "that scale, fixed (every non-finite gradient then stops training). No effect "
                  "in float32 or bfloat16.",
    "jit_compile": "Compile the training step with XLA (the train command's --use_xla "
                   "overrides it).",
    "grappler_off": "Grappler graph passes turned off in fit and evaluate: auto (the memory "
                    "optimizer on a machine without GPU or TPU, for a faster first step), "
                    "null (none) or pass names.",
    "steps_per_execution": "Training steps per tf.function call; more cut per-step overhead, "
                           "and callbacks then run once per call.",
    "strategy": "The train command's --strategy, recorded with the run: empty (the default "
                "device), gpus, multi-worker or tpu.",
    "deterministic": "Repeatable training: TensorFlow's deterministic op implementations "
                     "during fit, and a fixed seed (the train command's --tf_random_seed, 0 "
                     "when not given), so two runs give the same weights; steps may be "
                     "slower.",
    # Evaluation and post-processing.
    "map_freq": "COCO evaluation during training every this many epochs; the last epoch is "
                "always evaluated.",
    "nms_configs.method": "Non-max suppression per class: gaussian (soft-NMS: overlapping "
                          "scores decay by exp(-IoU^2 / sigma)), hard, or combined (hard, by "
                          "TensorFlow's combined_non_max_suppression); or global: hard NMS "
                          "across classes, one box per place whatever its class; null: hard.",
    "nms_configs.iou_thresh": "hard, combined and global NMS drop a box whose IoU with a "
                              "higher-scoring box (of its class, but for global) is above "
                              "this; 0: 0.5.",
    "nms_configs.score_thresh": "Detections scoring below this are dropped.",
    "nms_configs.sigma": "gaussian NMS: width of the score decay exp(-IoU^2 / sigma); 0 or "
                         "null: 0.5.",
    "nms_configs.max_nms_inputs": "Top-scoring (anchor, class) candidates per image that enter "
                                  "NMS; 0 keeps all.",
    "nms_configs.max_output_size": "Detections per image after NMS.",
    "tflite_max_detections": "Detections per image of a .tflite exported with "
                             "outputs=detections (TFLite_Detection_PostProcess).",
    "tflite_max_classes_per_detection": "TFLite detection op, fast NMS: classes kept per box "
                                        "(1: its best class only).",
    "tflite_detections_per_class": "TFLite detection op, regular NMS: detections kept per "
                                   "class before the best tflite_max_detections are taken.",
    "tflite_use_regular_nms": "TFLite detection op: false, fast class-agnostic NMS (what "
                              "on-device runtimes use; nms_configs.method=global in the "
                              "package); true, NMS per class (method=hard).",
    # Experiment tracking.
    "mlflow_tracking_uri": "Log the training run to MLflow at this tracking URI "
                           "(http://host:5000, sqlite:///mlflow.db, databricks): the config as "
                           "parameters, each epoch's logs as metrics, results.csv, plots and the "
                           "best checkpoint as artifacts, one MLflow run per model_dir (kept in "
                           "model_dir/mlflow_run.json); needs the trackers extra; null: off.",
    "mlflow_experiment": "The MLflow experiment the runs go to, created when missing.",
}
