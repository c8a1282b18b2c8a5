"""`bench.py --what=formats` and `--what=openvino_int8`: a trained demo run in every serving
format, and the int8 choices of its OpenVINO export, recorded for the docs.

The table is `efficientdet-bench --formats=all`'s (workflows/compare_formats.py): each format
exported by the package, scored with COCO AP on the run's 100 validation images (the int8 files
calibrated on them), timed end to end at batch 1 and at a throughput batch, and sized. This
benchmark runs it on a `--demo` run folder and records the rows in the results file under
--results_entry, from which the README's and the benchmarks page's format tables are written.
`bench_int8_choices` scores the run's OpenVINO IR quantized with each NNCF preset, with the
prediction convolutions quantized or kept in float32 (exporters/openvino_int8.py).
"""

import os
from typing import List

from benchmarks.common import TFLITE_THREADS, demo_validation_data, scratch_dir
from benchmarks.results import record
from benchmarks.speed import machine_line

# The NMS column as the docs word it.
NMS_LABELS = {"gaussian": "soft (gaussian)", "hard": "hard, per class", "global": "hard, global",
              "op global": "the op's fast NMS", "op hard": "the op's regular NMS"}


def result_rows(rows) -> List[dict]:
    """FormatRows as results-file rows (the figures the docs show, rounded as shown)."""
    return [{"format": row.format, "ap": round(row.AP, 4), "ap50": round(row.AP50, 4),
             "latency_ms": round(row.latency_ms, 1),
             "images_per_second": round(row.images_per_second, 1),
             "size_mb": round(row.size_mb, 1), "threads": row.threads,
             "nms": NMS_LABELS.get(row.nms, row.nms)} for row in rows]


def bench_formats(model_dir: str, results_path: str, entry: str, throughput_batch: int = 8,
                  runs: int = 10) -> None:
    from efficientdet_keras.data.sources import make_source
    from efficientdet_keras.inference.loading import load_model_and_config
    from efficientdet_keras.workflows.compare_formats import FORMATS, compare_formats, table_text

    data = demo_validation_data(model_dir)
    model, config = load_model_and_config(model_dir, "", "", "")
    rows = compare_formats(model, config, model_dir, FORMATS, scratch_dir("formats_"),
                           make_source(data.val_tfrecord), None, data.val_tfrecord,
                           throughput_batch=throughput_batch, runs=runs,
                           num_threads=TFLITE_THREADS, progress=lambda line: None)
    print("%s at %dx%d (%s), %d-core CPU" % (config.name, config.image_size[0],
                                             config.image_size[1], model_dir, os.cpu_count()))
    print(table_text(rows, throughput_batch))
    written = record(entry, result_rows(rows), machine_line(), results_path)
    print("Recorded as %r in %s (commit %s)" % (entry, results_path, written["commit"]))


# (NNCF preset, whether the class and box prediction convolutions stay in float32): the
# export's choice last.
INT8_CHOICES = (("performance", False), ("performance", True), ("mixed", False), ("mixed", True))


def bench_int8_choices(model_dir: str, results_path: str,
                       entry: str = "openvino_int8_choices") -> None:
    """AP of the demo run's OpenVINO IR in float32 and quantized with each of INT8_CHOICES,
    all calibrated on the same 100 validation images."""
    import openvino

    from efficientdet_keras.data.sources import make_source
    from efficientdet_keras.exporters.openvino import export_openvino, sidecar_info
    from efficientdet_keras.exporters.openvino_int8 import quantize
    from efficientdet_keras.inference.loading import load_model_and_config
    from efficientdet_keras.inference.sidecar import sidecar_path
    from efficientdet_keras.workflows.compare_formats import evaluate_file
    from efficientdet_keras.utils.fileio import write_json_atomically

    data = demo_validation_data(model_dir)
    model, config = load_model_and_config(model_dir, "", "", "")
    folder = scratch_dir("int8_choices_")
    float32 = export_openvino(model, os.path.join(folder, "float32", "model.xml"))

    def scored(path, preset, float_predictions):
        metrics = evaluate_file(path, "openvino", make_source(data.val_tfrecord), None, 8,
                                TFLITE_THREADS)
        row = {"preset": preset, "float_predictions": float_predictions,
               "ap": round(float(metrics["AP"]), 4), "ap50": round(float(metrics["AP50"]), 4)}
        print("%-12s %-18s %7.4f %7.4f" % (preset, float_predictions, row["ap"], row["ap50"]),
              flush=True)
        return row

    print("%-12s %-18s %7s %7s" % ("preset", "float predictions", "AP", "AP50"))
    rows = [scored(float32, "float32", None)]
    for preset, float_predictions in INT8_CHOICES:
        ir = quantize(openvino.Core().read_model(float32), config, data.val_tfrecord, 100,
                      preset, float_predictions)
        path = os.path.join(folder, "%s-%s" % (preset, float_predictions), "model.xml")
        os.makedirs(os.path.dirname(path))
        openvino.save_model(ir, path, compress_to_fp16=False)
        write_json_atomically(sidecar_path(path), sidecar_info(config, "int8"))
        rows.append(scored(path, preset, float_predictions))
    written = record(entry, rows, machine_line(), results_path)
    print("Recorded as %r in %s (commit %s)" % (entry, results_path, written["commit"]))
