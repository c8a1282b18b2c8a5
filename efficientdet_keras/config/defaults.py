"""The values every EfficientDet model starts from (the COCO training recipe), as plain data.

`family.default_config()` wraps them in a Config; `Config.from_yaml` fills in from them
the keys a saved config lacks.
"""

from typing import Any, Dict


def default_values() -> Dict[str, Any]:
    """A fresh nested dict of the defaults shared by every model (no Config, no sharing)."""
    return dict(
        name="efficientdet-d1",
        # Model.
        backbone_name="efficientnet-b1",
        image_size=640,
        num_classes=90,
        label_map=None,  # None, a dict {id: name}, or a dataset name such as "coco" or "voc".
        min_level=3,
        max_level=7,
        num_scales=3,
        aspect_ratios=[1.0, 2.0, 0.5],
        anchor_scale=4.0,
        fpn_num_filters=88,
        fpn_cell_repeats=4,
        box_class_repeats=3,
        fpn_weight_method="fastattn",  # fastattn, attn, channel_attn, channel_fastattn or sum.
        separable_conv=True,
        apply_bn_for_resampling=True,
        conv_after_downsample=False,
        conv_bn_act_pattern=False,
        pooling_type="max",
        act_type="swish",
        survival_prob=None,  # None: the backbone's own default; heads then skip drop-connect.
        # Backbone drop-connect; None: none for efficientnet-b0 (as released), 0.8 otherwise.
        backbone_survival_prob=None,
        batch_norm_momentum=0.99,
        batch_norm_epsilon=1e-3,
        # Batch Renormalization (model/layers.py): for short runs on small images, where a
        # batch gives the coarse levels too few values for training and inference to agree.
        # Adds renorm variables, so released checkpoints need it off (the COCO recipe's).
        batch_norm_renorm=False,
        # BatchNorm statistics of the global batch, all-reduced across replicas in training:
        # null = on when built under a strategy with more than one replica; true/false force it.
        sync_batch_norm=None,
        # Inference only (model/folding.py sets it): every BatchNorm is folded into the conv
        # before it, so the network has no BatchNorm layers and cannot be trained.
        fold_batch_norm=False,
        is_training_bn=True,
        # Gradient checkpointing (model/recompute.py): each backbone block's activations are
        # recomputed in the backward pass instead of kept; less memory, about one more
        # backbone forward of time per step. The released trainer's flag of the same name.
        grad_checkpoint=False,
        # Input pipeline and augmentation.
        mean_rgb=[0.485 * 255, 0.456 * 255, 0.406 * 255],
        stddev_rgb=[0.229 * 255, 0.224 * 255, 0.225 * 255],
        input_rand_hflip=True,
        jitter_min=0.1,
        jitter_max=2.0,
        max_instances_per_image=100,
        # Stronger augmentation, all off in the COCO recipe (README "Augmentation").
        # autoaugment_policy: none, v0-v3 (the learned detection policies) or randaug
        # (RandAugment with the two keys after it); data/autoaugment.py.
        autoaugment_policy=None,
        randaugment_num_layers=1,
        randaugment_magnitude=15.0,
        grid_mask=False,  # GridMask: a grid of square holes cut from each image.
        mosaic=0.0,  # Probability that a training image is a mosaic of four images.
        mosaic_close_epochs=0,  # The last this many epochs train without mosaic.
        mixup=0.0,  # Probability that a training image is blended with a second one.
        skip_crowd_during_training=True,
        # Class ids outside 1..num_classes: false drops those boxes with a warning; true
        # stops at the first one with an error naming the record.
        strict_data=False,
        # Loss.
        alpha=0.25,
        gamma=1.5,
        label_smoothing=0.0,
        delta=0.1,
        box_loss_weight=50.0,
        iou_loss_type=None,  # None, iou, giou, diou or ciou.
        iou_loss_weight=1.0,
        weight_decay=4e-5,
        # Optimisation.
        optimizer="sgd",
        momentum=0.9,  # SGD and RMSprop momentum; Adam's beta_1.
        rmsprop_rho=0.9,  # RMSprop decay of the squared-gradient average (EfficientNet's 0.9).
        rmsprop_epsilon=1e-3,  # RMSprop epsilon, inside the square root (EfficientNet's 0.001).
        learning_rate=0.08,  # For a global batch of 64; scaled linearly with the batch.
        lr_warmup_init=0.008,
        lr_warmup_epoch=1.0,
        lr_decay_method="cosine",  # cosine, stepwise, polynomial or constant.
        first_lr_drop_epoch=200.0,
        second_lr_drop_epoch=250.0,
        poly_lr_power=0.9,
        clip_gradients_norm=10.0,
        clip_gradients_per_tensor=False,  # Also clip each gradient to clip_gradients_norm first.
        # After a NaN or inf step: roll back to the last backup this many times, each time
        # with the learning rate x nan_recovery_lr_factor (0: stop with an error).
        nan_recovery_attempts=0,
        nan_recovery_lr_factor=0.5,
        num_epochs=300,
        batch_size=64,  # Global batch.
        steps_per_epoch=None,  # Set by the train CLI from num_examples_per_epoch / batch_size.
        # Steps between the backups (model_dir/backup) a killed run resumes from, besides the
        # one at each epoch end; 0: epoch ends only. A backup (weights, optimizer slots, EMA)
        # is quick next to the steps between two, so a kill loses little training.
        backup_steps=200,
        moving_average_decay=0.9998,
        var_freeze_expr=None,
        var_exclude_expr=None,  # Regex of variables load_pretrained leaves at their initial values.
        hub_module_url=None,  # A TF-Hub feature module to fine-tune (EfficientDetNetTrainHub).
        # tensorflow-model-optimization: {} (none), {"prune": {...}} or {"quantize": {...}};
        # config/optimization_settings.py checks them, efficientdet_keras/optimization applies them.
        model_optimizations={},
        # Precision, compilation, distribution.
        mixed_precision=False,  # False, "float16", "bfloat16", or True (float16 on GPU, bfloat16 on TPU).
        jit_compile=False,
        # Grappler passes fit and evaluate turn off: "auto" (the memory optimizer, on a
        # machine without GPUs or TPUs: a faster first step), none, or names
        # (training/grappler.py).
        grappler_off="auto",
        steps_per_execution=1,
        strategy="",
        # Evaluation and post-processing.
        map_freq=5,
        nms_configs=dict(
            method="gaussian",  # gaussian (soft-NMS), hard, or combined (class-aware).
            iou_thresh=0.5,
            score_thresh=0.001,
            sigma=0.5,
            max_nms_inputs=5000,  # Candidates kept before NMS; 0 keeps all.
            max_output_size=100,
        ),
        # Detections a .tflite with outputs=detections returns (TFLite_Detection_PostProcess).
        tflite_max_detections=25,
    )
