"""COCO evaluation: the evaluator and what the eval tool and callbacks share."""

from efficientdet_keras.evaluation.coco_evaluator import (METRIC_NAMES, COCOEvaluator,
                                                          faster_coco_eval_available,
                                                          gather_across_replicas)

__all__ = ["COCOEvaluator", "METRIC_NAMES", "faster_coco_eval_available", "gather_across_replicas"]
