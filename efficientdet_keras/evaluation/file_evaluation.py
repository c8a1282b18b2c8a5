"""COCO evaluation of an exported .tflite, .onnx or OpenVINO file, as of a Keras checkpoint.

The images come from the evaluation InputPipeline (decode, aspect-preserving
resize, padding), as for a checkpoint; its normalisation is undone and the
result rounded to uint8, which is exactly what the runners' letterboxing gives
for the original image (padding = the mean colour). A file's runner turns them into
detections in original pixels, which go to the same COCOEvaluator through
`evaluate_dataset`. The .onnx and OpenVINO files run the pipeline's batches (their own
letterboxing leaves an image of the input size as it is); tflite_evaluation.py runs a
.tflite image by image.
"""

from typing import Optional

import numpy as np

from efficientdet_keras.config.label_maps import label_names
from efficientdet_keras.data.pipeline import InputPipeline
from efficientdet_keras.data.pixels import pipeline_images_to_uint8
from efficientdet_keras.evaluation.coco_evaluator import COCOEvaluator
from efficientdet_keras.evaluation.id_check import check_source_ids_match
from efficientdet_keras.evaluation.runner import (evaluate_dataset, flip_tta_fns,
                                                   stack_detections)
from efficientdet_keras.inference.graph_file_runner import GraphFileRunner, split_outputs


def file_detect_fns(runner, run_batch):
    """(forward, postprocess) for `evaluate_dataset`, backed by an exported file.

    run_batch(letterboxed uint8 [B, H, W, 3]) -> B per-image output dicts, which
    runner.detections_from_outputs(outputs, scale) turns into detections.
    forward(normalised images [B, H, W, 3]) -> (B per-image output dicts, None): the file's
    run, timed as "network". postprocess(outputs, None, image_scales [B] or [B, 2]) ->
    BatchedDetections in original pixels (decoding and NMS of raw .tflite files happen
    here).
    """
    config = runner.config

    def forward(images):
        return run_batch(pipeline_images_to_uint8(images, config)), None

    def postprocess(outputs, _, image_scales):
        scales = np.asarray(image_scales, np.float32)  # [B], or [B, 2] with stretch.
        return stack_detections([runner.detections_from_outputs(out, scale)
                                 for out, scale in zip(outputs, scales)])

    return forward, postprocess


def graph_file_detect_fns(runner: GraphFileRunner):
    """`file_detect_fns` of an .onnx or OpenVINO file: the runtime runs the whole batch."""
    return file_detect_fns(runner, lambda images: split_outputs(runner.run(images)))


class FileEvaluation:
    """An exported file's runner, an evaluation pipeline and an evaluator (as
    CheckpointEvaluation); TFLiteEvaluation and GraphFileEvaluation say how the file runs.

    Args:
      runner: a TFLiteRunner or GraphFileRunner; its config (from the sidecar) sets the
        input size, anchors, classes and the normalisation that is undone.
      source, annotation_file, batch_size, max_images, backend, progress, on_detections:
        as CheckpointEvaluation (for a .tflite, batch_size only batches the input pipeline).
    """

    def __init__(self, runner, source, annotation_file: Optional[str] = None,
                 batch_size: int = 8, max_images: Optional[int] = None, backend: str = "auto",
                 progress: bool = True, on_detections=None):
        if annotation_file:
            check_source_ids_match(source, annotation_file)
        self.runner = runner
        # float32 images, so that undoing the normalisation is exact.
        self.config = runner.config.copy().override({"mixed_precision": False})
        self.pipeline = InputPipeline(self.config, source, is_training=False,
                                      batch_size=batch_size)
        label_map = label_names(self.config.label_map)
        self.evaluator = COCOEvaluator(annotation_file, label_map=label_map, backend=backend)
        self.max_images, self.progress = max_images, progress
        self.on_detections = on_detections

    def detect_fns(self):
        """(forward, postprocess) of the file, for `evaluate_dataset`."""
        raise NotImplementedError

    def run(self, unused_checkpoint=None):
        """Returns (the file's path, metrics, EvaluationTiming), as CheckpointEvaluation.run;
        with config key tta: flip, each image and its mirror image, fused."""
        detect_fns = self.detect_fns()
        if self.config.tta:
            detect_fns = flip_tta_fns(detect_fns, self.config)
        metrics, timing = evaluate_dataset(None, self.pipeline(), self.config, self.evaluator,
                                           max_images=self.max_images, progress=self.progress,
                                           detect_fns=detect_fns,
                                           on_detections=self.on_detections)
        return self.runner.path, metrics, timing


class GraphFileEvaluation(FileEvaluation):
    """The evaluation of an .onnx or OpenVINO file (a GraphFileRunner); see FileEvaluation."""

    def detect_fns(self):
        return graph_file_detect_fns(self.runner)
