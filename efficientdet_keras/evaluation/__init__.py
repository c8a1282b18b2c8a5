"""COCO evaluation: the evaluator and what the eval tool and callbacks share."""

from efficientdet_keras.evaluation.coco_evaluator import (METRIC_NAMES, COCOEvaluator,
                                                          faster_coco_eval_available,
                                                          gather_across_replicas)
from efficientdet_keras.evaluation.id_check import check_source_ids_match

__all__ = ["COCOEvaluator", "METRIC_NAMES", "check_source_ids_match",
           "faster_coco_eval_available", "gather_across_replicas"]
