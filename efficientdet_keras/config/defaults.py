"""The values every EfficientDet model starts from (the COCO training recipe), as plain data.

`family.default_config()` wraps them in a Config; `Config.from_yaml` fills in from them
the keys a saved config lacks. What each key means is in descriptions.py, what values it
takes in rules.py; the docs page reference/config.md shows all three.
"""

from typing import Any, Dict


def default_values() -> Dict[str, Any]:
    """A fresh nested dict of the defaults shared by every model (no Config, no sharing)."""
    return dict(
        name="efficientdet-d1",
        # Model.
        backbone_name="efficientnet-b1",
        backbone_blocks_per_stage=None,
        image_size=640,
        num_classes=90,
        label_map=None,
        min_level=3,
        max_level=7,
        num_scales=3,
        aspect_ratios=[1.0, 2.0, 0.5],
        anchor_scale=4.0,
        fpn_num_filters=88,
        fpn_cell_repeats=4,
        box_class_repeats=3,
        fpn_weight_method="fastattn",
        fpn_name="bifpn",
        separable_conv=True,
        apply_bn_for_resampling=True,
        conv_after_downsample=False,
        conv_bn_act_pattern=False,
        pooling_type="max",
        act_type="swish",
        survival_prob=None,
        backbone_survival_prob=None,
        batch_norm_momentum=0.99,
        batch_norm_epsilon=1e-3,
        batch_norm_renorm=False,
        sync_batch_norm=None,
        fold_batch_norm=False,
        is_training_bn=True,
        grad_checkpoint=False,
        # Input pipeline and augmentation.
        mean_rgb=[0.485 * 255, 0.456 * 255, 0.406 * 255],
        resize_mode="letterbox",
        # Test-time augmentation of efficientdet-eval and the Detector (detection/tta.py).
        tta=None,
        stddev_rgb=[0.229 * 255, 0.224 * 255, 0.225 * 255],
        input_rand_hflip=True,
        jitter_min=0.1,
        jitter_max=2.0,
        max_instances_per_image=100,
        # Stronger augmentation, all off in the COCO recipe (docs/guides/augmentation.md).
        autoaugment_policy=None,
        randaugment_num_layers=1,
        randaugment_magnitude=15.0,
        grid_mask=False,
        mosaic=0.0,
        mosaic_close_epochs=0,
        mixup=0.0,
        skip_crowd_during_training=True,
        strict_data=False,
        # Loss.
        alpha=0.25,
        gamma=1.5,
        label_smoothing=0.0,
        delta=0.1,
        box_loss_weight=50.0,
        iou_loss_type=None,
        iou_loss_weight=1.0,
        weight_decay=4e-5,
        # Optimisation.
        optimizer="sgd",
        momentum=0.9,
        rmsprop_rho=0.9,
        rmsprop_epsilon=1e-3,
        learning_rate=0.08,
        lr_warmup_init=0.008,
        lr_warmup_epoch=1.0,
        lr_decay_method="cosine",
        first_lr_drop_epoch=200.0,
        second_lr_drop_epoch=250.0,
        poly_lr_power=0.9,
        clip_gradients_norm=10.0,
        clip_gradients_per_tensor=False,
        nan_recovery_attempts=0,
        nan_recovery_lr_factor=0.5,
        num_epochs=300,
        batch_size=64,
        steps_per_epoch=None,
        # A backup is quick next to the steps between two, so a kill loses little training.
        backup_steps=200,
        moving_average_decay=0.9998,
        var_freeze_expr=None,
        var_exclude_expr=None,
        backbone_ckpt=None,
        hub_module_url=None,
        model_optimizations={},
        # Precision, compilation, distribution.
        mixed_precision=False,
        loss_scale=None,
        jit_compile=False,
        grappler_off="auto",
        steps_per_execution=1,
        strategy="",
        deterministic=False,
        # Evaluation and post-processing.
        map_freq=5,
        nms_configs=dict(
            method="gaussian",
            iou_thresh=0.5,
            score_thresh=0.001,
            sigma=0.5,
            max_nms_inputs=5000,
            max_output_size=100,
        ),
        tflite_max_detections=25,
        tflite_max_classes_per_detection=1,
        tflite_detections_per_class=100,
        tflite_use_regular_nms=False,
        # Experiment tracking (reports/mlflow_tracker.py).
        mlflow_tracking_uri=None,
        mlflow_experiment="efficientdet",
    )
