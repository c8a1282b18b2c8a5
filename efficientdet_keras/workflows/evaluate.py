"""evaluate: COCO metrics of a trained or exported model on validation data, once or for each
checkpoint of a training run as it appears.

    from efficientdet_keras import evaluate
    result = evaluate("runs/pets", data="datasets/pets")           # the latest checkpoint
    result = evaluate("exported/pets/model.onnx", data="datasets/pets")
    print(result.summary())            # the metrics table; result.metrics["AP"]

The model is a training directory, a checkpoint, a released model's name, or a file of a
format in `workflows.formats.FORMATS` that a runner loads (.tflite, .onnx, OpenVINO .xml).
"""

import dataclasses
import os
from typing import Any, Callable, Dict, List, Optional

from efficientdet_keras.workflows.evaluation_outputs import (EvaluationOutputs, images_hook,
                                                             write_outputs)
from efficientdet_keras.workflows.formats import format_of_file
from efficientdet_keras.workflows.train_data import (DataSpec, find_training_data,
                                                     write_demo_data)
from efficientdet_keras.workflows.validation_data import ValidationData, open_validation_data

# How old a run's newest checkpoint may get, with no trainer running there, before a
# continuous evaluator stops by default: time for a scheduler to restart a preempted trainer.
EVAL_TIMEOUT_WITHOUT_TRAINER_S = 600


@dataclasses.dataclass
class EvalResult:
    """One evaluation: what was evaluated (a checkpoint prefix or a file), its COCO metrics,
    its EvaluationTiming, and a line for each file it wrote."""
    evaluated: str
    metrics: Dict[str, float]
    timing: Any = None
    written: List[str] = dataclasses.field(default_factory=list)

    def summary(self) -> str:
        """The metrics table with what was evaluated and how long each part took."""
        from efficientdet_keras.evaluation.runner import format_metrics
        timing = self.timing
        head = ("%s: %d images (network %.1fs, post-processing %.1fs, scoring %.1fs)"
                % (self.evaluated, timing.images, timing.network, timing.postprocess,
                   timing.scoring) if timing is not None else "%s:" % self.evaluated)
        return "\n".join([head, format_metrics(self.metrics)] + self.written)


@dataclasses.dataclass
class ContinuousResult:
    """A continuous evaluation's end: the best archived checkpoint (a dict with its path and
    metrics, or None), whether the final epoch was evaluated, and the run's final epoch."""
    best: Optional[dict]
    finished: bool
    num_epochs: int


def validation_data(config, *, data: Optional[str] = None, split: Optional[str] = None,
                    val_file_pattern: Optional[str] = None, val_json_file: Optional[str] = None,
                    image_dir: Optional[str] = None,
                    report: Optional[Callable[[str], None]] = None,
                    voc_origin: Optional[int] = None,
                    data_layout: Optional[str] = None) -> ValidationData:
    """The data to score: a dataset folder's split (the model's classes compared with the
    data's; `report` gets its description), or TFRecords / COCO JSON with its image folder
    (ground truth: val_json_file, or the records)."""
    if data:
        return open_validation_data(data, config, split=split, report=report,
                                    voc_origin=voc_origin, data_layout=data_layout)
    if not (val_file_pattern or (val_json_file and image_dir)):
        raise ValueError("give data, val_file_pattern, or val_json_file with image_dir")
    from efficientdet_keras.data.sources import make_source
    return ValidationData(make_source(val_file_pattern or None,
                                      None if val_file_pattern else val_json_file,
                                      image_dir or None), val_json_file or None)


def checkpoint_config(model: str, model_dir: Optional[str], model_name: str, hparams):
    """The config a checkpoint, run directory or released name is evaluated with: the run's
    config.yaml (see workflows.export.model_location), else the released model's, else
    model_name's."""
    from efficientdet_keras.inference.loading import load_run_config
    from efficientdet_keras.workflows.export import model_location
    model_dir, ckpt = model_location(model, model_dir)
    return load_run_config(model_dir, model_name, hparams, ckpt)


def build_evaluation(model: str, *, data: Optional[str] = None, split: Optional[str] = None,
                     val_file_pattern: Optional[str] = None,
                     val_json_file: Optional[str] = None, image_dir: Optional[str] = None,
                     model_dir: Optional[str] = None, model_name: str = "", hparams="",
                     overrides: Optional[dict] = None, batch_size: int = 8,
                     max_images: Optional[int] = None, backend: str = "auto",
                     use_ema: bool = True, num_threads: Optional[int] = None,
                     progress: bool = True, outputs: Optional[EvaluationOutputs] = None,
                     report: Optional[Callable[[str], None]] = print,
                     voc_origin: Optional[int] = None, data_layout: Optional[str] = None):
    """(evaluation, ValidationData): a CheckpointEvaluation or an exported file's evaluation,
    its `run(checkpoint)` giving (path, metrics, timing). See `evaluate` for the arguments."""
    outputs = outputs or EvaluationOutputs()
    outputs.check()
    data_named = dict(data=data, split=split, val_file_pattern=val_file_pattern,
                      val_json_file=val_json_file, image_dir=image_dir, report=report,
                      voc_origin=voc_origin, data_layout=data_layout)
    from efficientdet_keras.inference.loading import SAVED_MODEL_FILE
    if os.path.exists(os.path.join(model, SAVED_MODEL_FILE)):
        raise ValueError("%s is a detection SavedModel: evaluate the checkpoint it was exported "
                         "from, or an exported .tflite, .onnx or OpenVINO file" % model)
    fmt = format_of_file(model) if os.path.isfile(model) else None
    if fmt is not None:
        runner = fmt.runner(model, num_threads, hparams)
        config = _with_overrides(runner.config, overrides, fmt)
        data_found = validation_data(config, **data_named)
        return fmt.evaluation(
            runner, data_found.source, data_found.ground_truth, batch_size=batch_size,
            max_images=max_images, backend=backend, progress=progress,
            on_detections=images_hook(config, outputs)), data_found
    if num_threads:
        raise ValueError("num_threads applies to a .tflite, .onnx or OpenVINO file, not to %s"
                         % model)
    from efficientdet_keras.evaluation.continuous import CheckpointEvaluation
    config = _with_overrides(checkpoint_config(model, model_dir, model_name, hparams), overrides)
    data_found = validation_data(config, **data_named)
    return CheckpointEvaluation(config, data_found.source, data_found.ground_truth,
                                batch_size=batch_size, max_images=max_images, backend=backend,
                                use_ema=use_ema, progress=progress,
                                on_detections=images_hook(config, outputs)), data_found


def _with_overrides(config, overrides: Optional[dict], fmt=None):
    """The config with evaluation overrides (NMS, resize_mode, tta) on top; an exported graph
    whose NMS was fixed at export refuses NMS overrides."""
    overrides = dict(overrides or {})
    if overrides.get("nms_configs") and fmt is not None and fmt.name in ("onnx", "openvino"):
        raise ValueError("%s: the file's NMS was fixed at export; leave out the NMS settings "
                         "(%s)" % (fmt.name, ", ".join(sorted(overrides["nms_configs"]))))
    return config.override(overrides) if overrides else config


def file_evaluation(path: str, source, annotation_file: Optional[str] = None, *,
                    num_threads: Optional[int] = None, **settings):
    """The evaluation of an exported file (settings: batch_size, max_images, backend,
    progress, on_detections)."""
    fmt = format_of_file(path)
    runner = fmt.runner(path, num_threads, None)
    return fmt.evaluation(runner, source, annotation_file, **settings)


def evaluate(model: str, *, data: Optional[str] = None, split: Optional[str] = None,
             checkpoint: Optional[str] = None,
             outputs: Optional[EvaluationOutputs] = None, **settings) -> EvalResult:
    """COCO metrics of `model` on validation data.

    Args:
      model: a training directory (its latest checkpoint, or `checkpoint`), a checkpoint, a
        released model's name, or an exported .tflite, .onnx or OpenVINO .xml file.
      data, split: a dataset folder or file in any layout `open_dataset` reads, and the split
        to score (default: val, else test). Or, in `settings`: val_file_pattern (TFRecords),
        val_json_file (COCO ground truth; with image_dir, also the image list), image_dir.
      checkpoint: with a training directory as `model`, the checkpoint to score (a prefix,
        or an archive folder such as runs/x/archive/best).
      outputs: pictures, confusion matrix and results file to write (EvaluationOutputs).
      settings: model_dir (the run whose config.yaml a checkpoint is read with), model_name,
        hparams (config overrides), overrides (evaluation settings on top: nms_configs,
        resize_mode, tta), batch_size, max_images, backend ("auto", "pycocotools",
        "faster_coco_eval"), use_ema, num_threads (an exported file's runtime), progress,
        report (called with the dataset's description; None: quiet), voc_origin (the pixel
        VOC boxes of `data` start from, 0 or 1; None: found as `open_dataset` says),
        data_layout (the layout to read `data` as; None: the one its files show).

    Returns:
      EvalResult.
    """
    outputs = outputs or EvaluationOutputs()
    evaluation, _ = build_evaluation(model, data=data, split=split, outputs=outputs, **settings)
    path, metrics, timing = evaluation.run(checkpoint or model)
    return EvalResult(path, metrics, timing, write_outputs(evaluation, path, outputs))


def evaluate_continuously(evaluation, model_dir: str, *, archive_keep: int = 3,
                          timeout: Optional[float] = None,
                          outputs: Optional[EvaluationOutputs] = None,
                          on_result: Optional[Callable[[EvalResult], None]] = None
                          ) -> ContinuousResult:
    """Evaluates each new checkpoint of the run in `model_dir` once, archiving the best.

    evaluation: from `build_evaluation` (its config's num_epochs says when the run ends).
    timeout: seconds without a new checkpoint before it stops; 0: wait for the final epoch;
      None: stop once no trainer runs in model_dir and its newest checkpoint is older than
      EVAL_TIMEOUT_WITHOUT_TRAINER_S. Checkpoints deleted before they are read are skipped.
    on_result: called with each checkpoint's EvalResult.
    """
    from efficientdet_keras.evaluation import continuous
    from efficientdet_keras.utils.fileio import remove_stale_temporary_files
    from efficientdet_keras.utils.run_lock import running_trainer
    outputs = outputs or EvaluationOutputs()
    remove_stale_temporary_files(model_dir)  # It writes model_dir/archive.

    def evaluated(path, metrics, timing):
        result = EvalResult(path, metrics, timing, write_outputs(evaluation, path, outputs))
        if on_result is not None:
            on_result(result)

    follow = timeout is None
    best, finished = continuous.evaluate_continuously(
        evaluation, model_dir, archive_keep=archive_keep,
        timeout=EVAL_TIMEOUT_WITHOUT_TRAINER_S if follow else (timeout or None),
        on_result=evaluated,
        running_trainer=(lambda: running_trainer(model_dir)) if follow else None)
    return ContinuousResult(best, finished, evaluation.config.num_epochs)


def follow_training_run(model_dir: str, spec: DataSpec, *, model: str = "efficientdet-d0",
                        hparams="", batch_size: Optional[int] = None,
                        max_images: Optional[int] = None, archive_keep: int = 3,
                        timeout: Optional[float] = None,
                        on_result: Optional[Callable[[EvalResult], None]] = None,
                        report: Callable[[str], None] = print) -> ContinuousResult:
    """Evaluates each checkpoint of a training run in `model_dir` as it appears, on the
    validation data `spec` names (as `train` finds it), until the run's final epoch.

    The run's own config.yaml (written by the trainer) wins over `model` and `hparams` when
    it exists, so the model and the final epoch are the run's.
    """
    from efficientdet_keras.evaluation.continuous import CheckpointEvaluation
    from efficientdet_keras.inference.loading import CONFIG_FILE, load_run_config
    from efficientdet_keras.utils.fileio import remove_stale_temporary_files
    from efficientdet_keras.workflows.train import build_config, user_config_keys
    os.makedirs(model_dir, exist_ok=True)
    remove_stale_temporary_files(model_dir)
    demo_data = write_demo_data(spec, model_dir) if spec.demo else None
    config = build_config(model, hparams, spec.demo)
    found = find_training_data(spec, config, model_dir, train=False,
                               fixed_keys=user_config_keys(hparams), demo_data=demo_data,
                               report=report)
    if os.path.exists(os.path.join(model_dir, CONFIG_FILE)):
        config = load_run_config(model_dir, model, hparams)
    evaluation = CheckpointEvaluation(config, found.val, found.val_json,
                                      batch_size=batch_size or config.batch_size,
                                      max_images=max_images)
    return evaluate_continuously(evaluation, model_dir, archive_keep=archive_keep,
                                 timeout=timeout, on_result=on_result)
