"""compare_formats: one trained model in every serving format, side by side: accuracy, speed
and size.

    rows = compare_formats(model, config, checkpoint, FORMATS, "exported/table",
                           source, annotation_file=None, calibration_pattern="data/val-*.tfrecord")
    print(table_text(rows, throughput_batch=8))
    write_table_csv(rows, "exported/table/formats.csv")

Each format is exported with the package's own exporter into `<folder>/<format>/`, scored with
COCO AP on the same validation data by the package's evaluation of that file, and timed end to
end (uint8 image in, detections out) with `Detector.benchmark` at batch 1 and at a throughput
batch. The SavedModel's AP is the checkpoint's: the SavedModel runs the same serving graph
(tests/test_export.py holds them equal), so it is not evaluated twice.
"""

import csv
import os
from typing import Dict, List, NamedTuple, Optional, Sequence

from efficientdet_keras.workflows.formats import (INT8, ExportOptions, compared_variants,
                                                  file_megabytes)

# The compared files, in table order: each format's file at each of its compared precisions.
FORMATS = tuple(name for name, _, _ in compared_variants())
TABLE_COLUMNS = ("format", "AP", "AP50", "latency_ms", "images_per_second", "size_mb",
                 "threads", "nms")


class FormatRow(NamedTuple):
    """One format's figures: AP and AP50 on the validation data, the median end-to-end
    latency at batch 1, images/s at the throughput batch, the size on disk and the threads
    the runtime was given (0: its default)."""
    format: str
    path: str
    AP: float
    AP50: float
    latency_ms: float
    images_per_second: float
    size_mb: float
    threads: int
    nms: str


def check_formats(formats: Sequence[str]) -> List[str]:
    """The formats asked for ("all" for every one), in FORMATS order; ValueError naming a
    bad one."""
    asked = list(FORMATS) if list(formats) == ["all"] else list(formats)
    unknown = [f for f in asked if f not in FORMATS]
    if unknown:
        raise ValueError("unknown format %s: choose from %s, or all"
                         % (", ".join(unknown), ", ".join(FORMATS)))
    return [f for f in FORMATS if f in asked]


def format_precision(name: str) -> str:
    """The precision of compared file `name`: float32, float16 or int8."""
    return _variants()[name][1]


def _variants():
    return {name: (fmt, precision) for name, fmt, precision in compared_variants()}


def export_format(model, name: str, folder: str, calibration_pattern: Optional[str]) -> str:
    """Writes `model` as compared file `name` under folder/name; returns the path a Detector
    loads."""
    fmt, precision = _variants()[name]
    if precision == INT8 and not calibration_pattern:
        raise ValueError("%s needs calibration images: give a TFRecord file pattern "
                         "(--val_file_pattern)" % name)
    return fmt.write(model, os.path.join(folder, name),
                     ExportOptions(precision=precision, calibration_data=calibration_pattern))


def evaluate_file(path: str, name: str, source, annotation_file, batch_size: int,
                  num_threads: Optional[int]) -> Dict[str, float]:
    """COCO metrics of an exported .onnx, OpenVINO or .tflite file."""
    from efficientdet_keras.workflows.evaluate import file_evaluation
    evaluation = file_evaluation(path, source, annotation_file, batch_size=batch_size,
                                 num_threads=num_threads, progress=False)
    return evaluation.run()[1]


def evaluate_checkpoint(config, checkpoint: str, source, annotation_file,
                        batch_size: int) -> Dict[str, float]:
    from efficientdet_keras.evaluation.continuous import CheckpointEvaluation
    evaluation = CheckpointEvaluation(config, source, annotation_file, batch_size=batch_size,
                                      progress=False)
    return evaluation.run(checkpoint)[1]


def file_nms(name: str, config) -> str:
    """The NMS compared file `name` runs, for the table."""
    return _variants()[name][0].nms(config)


def compare_formats(model, config, checkpoint: str, formats: Sequence[str], folder: str, source,
                 annotation_file: Optional[str] = None,
                 calibration_pattern: Optional[str] = None, batch_size: int = 8,
                 throughput_batch: int = 8, runs: int = 10, warmup: int = 3,
                 num_threads: Optional[int] = None, image=None,
                 progress=print) -> List[FormatRow]:
    """The FormatRow of each of `formats` (FORMATS names) for `model` (restored from
    `checkpoint`, with `config`), its files written under `folder`.

    source, annotation_file: the validation data (a data source; COCO JSON or None for ground
    truth from the data). calibration_pattern: TFRecords for the int8 files' calibration.
    batch_size: evaluation batches. throughput_batch, runs, warmup: the timing (see
    Detector.benchmark); image: what is timed (default a random 640x480 image).
    num_threads: the .tflite, ONNX Runtime and OpenVINO threads (None: each runtime's
    default; TensorFlow always uses its own). progress: called with a line per step.
    """
    from efficientdet_keras.inference.detector import Detector
    rows = []
    for name in check_formats(formats):
        progress("%s: exporting" % name)
        path = export_format(model, name, folder, calibration_pattern)
        progress("%s: evaluating" % name)
        if name == "saved_model":
            metrics = evaluate_checkpoint(config, checkpoint, source, annotation_file,
                                          batch_size)
        else:
            metrics = evaluate_file(path, name, source, annotation_file, batch_size,
                                    num_threads)
        progress("%s: timing" % name)
        threads = None if name == "saved_model" else num_threads
        detector = Detector(path, num_threads=threads)
        single, batched = (detector.benchmark(image=image, batch_size=size, runs=runs,
                                              warmup=warmup, verbose=False).end_to_end
                           for size in (1, throughput_batch))
        rows.append(FormatRow(name, path, float(metrics["AP"]), float(metrics["AP50"]),
                              single.median_ms, batched.images_per_second, file_megabytes(path),
                              int(threads or 0), file_nms(name, config)))
    return rows


def compare_model_formats(model: str, formats: Sequence[str], *,
                          val_file_pattern: Optional[str] = None,
                          val_json_file: Optional[str] = None, image_dir: Optional[str] = None,
                          export_dir: Optional[str] = None, model_name: str = "", hparams="",
                          progress=print, **timing):
    """compare_formats for a training directory or checkpoint `model`, on validation
    TFRecords (val_file_pattern, also the int8 calibration images) or COCO JSON with its
    image folder; the files go to export_dir (default: <model>/formats). Returns (the
    FormatRows, the model's config).

    formats: FORMATS names or ["all"]; int8 files need val_file_pattern: asked for by name
    without it they are refused, with "all" left out (a progress line says so).
    timing: compare_formats' throughput_batch, runs, warmup, num_threads and image.
    """
    from efficientdet_keras.data.sources import make_source
    from efficientdet_keras.workflows.export import load_trained_model, model_location
    asked_all = list(formats) == ["all"]
    try:
        formats = check_formats(formats)
    except ValueError as e:
        raise ValueError("formats: %s" % e) from None
    if not (val_file_pattern or (val_json_file and image_dir)):
        raise ValueError("comparing formats needs validation data: --val_file_pattern, or "
                         "--val_json_file with --image_dir (the same names in Python)")
    int8 = [name for name in formats if format_precision(name) == INT8]
    if int8 and not val_file_pattern:  # Calibration reads TFRecords.
        if not asked_all:
            raise ValueError("formats: %s calibrate on TFRecords: give --val_file_pattern "
                             "(val_file_pattern= in Python)" % ", ".join(int8))
        progress("Skipping %s: int8 calibration reads TFRecords (--val_file_pattern)"
                 % ", ".join(int8))
        formats = [name for name in formats if name not in int8]
    model_dir, ckpt = model_location(model)
    keras_model = load_trained_model(model, model_name, hparams)
    export_dir = export_dir or os.path.join(model_dir or os.path.dirname(ckpt) or ".",
                                            "formats")
    source = make_source(val_file_pattern or None, None if val_file_pattern else val_json_file,
                         image_dir or None)
    rows = compare_formats(keras_model, keras_model.config, ckpt or model_dir, formats,
                           export_dir, source, val_json_file or None, val_file_pattern or None,
                           progress=progress, **timing)
    return rows, keras_model.config


def table_text(rows: Sequence[FormatRow], throughput_batch: int) -> str:
    """The rows as a fixed-width table, with the ratios to the SavedModel and to ONNX."""
    reference = {row.format: row for row in rows}
    lines = ["%-14s %7s %7s %11s %9s %10s %9s %8s  %s" % (
        "format", "AP", "AP50", "latency ms", "x SM", "images/s", "size MB", "threads", "NMS")]
    saved = reference.get("saved_model")
    for row in rows:
        ratio = "%.2f" % (saved.latency_ms / row.latency_ms) if saved else "-"
        lines.append("%-14s %7.4f %7.4f %11.1f %9s %10.1f %9.1f %8s  %s" % (
            row.format, row.AP, row.AP50, row.latency_ms, ratio, row.images_per_second,
            row.size_mb, row.threads or "default", row.nms))
    lines.append("latency: batch 1, end to end (uint8 image in, detections out), median; "
                 "images/s at batch %d; x SM: speed-up over the SavedModel at batch 1"
                 % throughput_batch)
    return "\n".join(lines)


def write_table_csv(rows: Sequence[FormatRow], path: str) -> str:
    """Writes the rows (TABLE_COLUMNS) as CSV, atomically."""
    import io
    from efficientdet_keras.utils.fileio import write_bytes_atomically
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow(TABLE_COLUMNS)
    for row in rows:
        writer.writerow([row.format, "%.4f" % row.AP, "%.4f" % row.AP50, "%.2f" % row.latency_ms,
                         "%.2f" % row.images_per_second, "%.2f" % row.size_mb, row.threads,
                         row.nms])
    write_bytes_atomically(path, text.getvalue().encode("utf-8"))
    return path
