"""`bench.py --what=formats`: a trained demo run in every serving format, recorded for the docs.

The table is `efficientdet-bench --formats=all`'s (reports/format_table.py): each format
exported by the package, scored with COCO AP on the run's 100 validation images (the int8 files
calibrated on them), timed end to end at batch 1 and at a throughput batch, and sized. This
benchmark runs it on a `--demo` run folder and records the rows in the results file under
--results_entry, from which the README's and the benchmarks page's format tables are written.
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
    from efficientdet_keras.reports.format_table import FORMATS, format_table, table_text

    data = demo_validation_data(model_dir)
    model, config = load_model_and_config(model_dir, "", "", "")
    rows = format_table(model, config, model_dir, FORMATS, scratch_dir("formats_"),
                        make_source(data.val_tfrecord), None, data.val_tfrecord,
                        throughput_batch=throughput_batch, runs=runs,
                        num_threads=TFLITE_THREADS, progress=lambda line: None)
    print("%s at %dx%d (%s), %d-core CPU" % (config.name, config.image_size[0],
                                             config.image_size[1], model_dir, os.cpu_count()))
    print(table_text(rows, throughput_batch))
    written = record(entry, result_rows(rows), machine_line(), results_path)
    print("Recorded as %r in %s (commit %s)" % (entry, results_path, written["commit"]))
