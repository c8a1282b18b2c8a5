"""What an evaluation writes beside its metrics: pictures of ground truth and detections, the
confusion matrix, and the detections as a COCO results file.
"""

import dataclasses
import os
from typing import List, Optional

from efficientdet_keras.reports.confusion_matrix import (CONFUSION_MATRIX_DIR, IOU_THRESHOLD,
                                                        SCORE_THRESHOLD, confusion_matrix,
                                                        write_confusion_matrix)

# A matrix of at most this many classes is also given as text.
PRINTED_CLASSES = 12


@dataclasses.dataclass
class EvaluationOutputs:
    """Where each evaluation's files go (None or 0: not written).

    write_images: the first `write_images` evaluation images, ground truth beside the
      detections, into
      <images_dir>/<evaluated name>/ as PNG files and a TensorBoard image summary.
    image_score_threshold: the lowest score of a drawn detection.
    confusion_matrix_dir: <evaluated name>.csv and .png of each evaluation's confusion matrix.
    confusion_score_thresh, confusion_iou_thresh: what the matrix counts.
    results_json: the detections as a COCO results file (image ids as the ground truth spells
      them).
    """
    write_images: int = 0
    images_dir: Optional[str] = None
    image_score_threshold: float = 0.3
    confusion_matrix_dir: Optional[str] = None
    confusion_score_thresh: float = SCORE_THRESHOLD
    confusion_iou_thresh: float = IOU_THRESHOLD
    results_json: Optional[str] = None

    def check(self) -> None:
        """ValueError (one line) for settings that cannot work."""
        if self.write_images < 0:
            raise ValueError("write_images must be >= 0 (0: no images)")
        if self.write_images and not self.images_dir:
            raise ValueError("write_images needs images_dir (or model_dir, for "
                             "<model_dir>/eval_images)")
        if not 0.0 <= self.confusion_score_thresh <= 1.0:
            raise ValueError("confusion_score_thresh must be in [0, 1]")
        if not 0.0 < self.confusion_iou_thresh <= 1.0:
            raise ValueError("confusion_iou_thresh must be in (0, 1]")


def default_outputs_dirs(model_dir: str, images_dir: Optional[str],
                         matrix_dir: Optional[str]):
    """(images folder, confusion matrix folder): the given ones, else a run's
    <model_dir>/eval_images and <model_dir>/confusion_matrix; matrix_dir "" means none."""
    from efficientdet_keras.reports.eval_images import IMAGES_DIR
    images = images_dir or (os.path.join(model_dir, IMAGES_DIR) if model_dir else None)
    if matrix_dir is None:
        matrix_dir = os.path.join(model_dir, CONFUSION_MATRIX_DIR) if model_dir else None
    return images, matrix_dir or None


def evaluated_name(evaluated_path: str) -> str:
    """The checkpoint prefix's last part, or the exported file's name without its suffix:
    what an evaluation's pictures and confusion matrix are named after."""
    name = os.path.basename(evaluated_path.rstrip("/"))
    for suffix in (".tflite", ".onnx", ".xml"):
        if name.endswith(suffix):
            name = name[:-len(suffix)]
    return name


def images_hook(config, outputs: EvaluationOutputs):
    """The evaluation's per-batch hook that draws the images (an EvaluationImages), or None."""
    if not outputs.write_images:
        return None
    from efficientdet_keras.reports.eval_images import EvaluationImages
    return EvaluationImages(config, outputs.write_images, outputs.image_score_threshold)


def write_outputs(evaluation, evaluated_path: str, outputs: EvaluationOutputs) -> List[str]:
    """Writes one evaluation's pictures, confusion matrix and results file; returns the lines
    that say what was written."""
    lines = []
    if evaluation.on_detections is not None:
        lines.append(_write_images(evaluation.on_detections, evaluated_path, outputs.images_dir))
    if outputs.confusion_matrix_dir:
        lines += _write_matrix(evaluation.evaluator, evaluated_path, outputs)
    if outputs.results_json:
        from efficientdet_keras.utils.fileio import write_json_atomically
        write_json_atomically(outputs.results_json,
                              evaluation.evaluator.detection_results(original_ids=True))
        lines.append("Detections written to %s" % outputs.results_json)
    return lines


def _write_images(images, evaluated_path: str, images_dir: str) -> str:
    """The pictures into <images_dir>/<evaluated_name>/, with a TensorBoard summary at the
    checkpoint's epoch (0 when its name has none)."""
    from efficientdet_keras.evaluation.continuous import checkpoint_epoch
    directory = os.path.join(images_dir, evaluated_name(evaluated_path))
    paths = images.write(directory, summary_dir=directory,
                         step=checkpoint_epoch(evaluated_path) or 0)
    images.reset()  # The next checkpoint (continuous evaluation) starts afresh.
    return "%d evaluation image%s written to %s" % (len(paths), "s"[:len(paths) != 1], directory)


def _write_matrix(evaluator, evaluated_path: str, outputs: EvaluationOutputs) -> List[str]:
    matrix = confusion_matrix(evaluator.groundtruth_dataset(), evaluator.detection_results(),
                              outputs.confusion_score_thresh, outputs.confusion_iou_thresh)
    name = evaluated_name(evaluated_path)
    paths = [p for p in write_confusion_matrix(matrix, outputs.confusion_matrix_dir, name, name)
             if p]
    summary = ", ".join("%d %s" % (n, key.replace("_", " "))
                        for key, n in matrix.summary().items())
    lines = ["Confusion matrix (score >= %.2f, IoU >= %.2f; %s) written to %s"
             % (matrix.score_threshold, matrix.iou_threshold, summary, " and ".join(paths))]
    if len(matrix.category_ids) <= PRINTED_CLASSES:
        lines.append(matrix.to_text())
    return lines
