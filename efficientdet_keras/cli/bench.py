"""efficientdet-bench: the latency of your model, network alone and end to end; or the table of
every serving format of a trained model.

  efficientdet-bench --model=runs/demo
  efficientdet-bench --model=exported/demo --batch_size=8 --image=photo.jpg
  efficientdet-bench --model=exported/demo.tflite --num_threads=4
  # Each format exported, scored on validation data, timed and sized, in one table:
  efficientdet-bench --model=runs/demo --formats=all \
      --val_file_pattern='runs/demo/synthetic/tfrecords/val-*.tfrecord'

--model is anything efficientdet_keras.Detector loads: a training directory, a checkpoint, a
detection SavedModel, a .tflite, .onnx or OpenVINO file. Runs Detector.benchmark: --warmup
untimed runs, then --runs timed runs of one batch; prints the median and p90 milliseconds per
batch and the images/s, for the network alone (not separable in a SavedModel) and end to end
(pre-processing, network and NMS).

With --formats (a training directory or checkpoint as --model), the model is exported to each
format in --export_dir, scored with COCO AP on the validation data, timed end to end at batch 1
and at --throughput_batch, and the table is printed and written to --results_csv
(reports/format_table.py).
"""

from absl import flags

from efficientdet_keras.cli.common import HPARAMS_HELP, run_app, run_or_exit

TOOL = "efficientdet-bench"
FLAGS = flags.FLAGS
flags.DEFINE_string("model", "", "The model: a training directory, a checkpoint, a detection "
                    "SavedModel, or a .tflite, .onnx or OpenVINO .xml file (with its sidecar).")
flags.DEFINE_string("model_name", "", "The model of a checkpoint without config.yaml "
                    "(e.g. efficientdet-d0).")
flags.DEFINE_string("hparams", "", HPARAMS_HELP)
flags.DEFINE_integer("batch_size", 1, "Images per timed batch.", lower_bound=1)
flags.DEFINE_integer("runs", 10, "Timed runs of one batch; the median and p90 are "
                     "taken over them.", lower_bound=1)
flags.DEFINE_integer("warmup", 3, "Untimed runs first (tracing, caches).", lower_bound=0)
flags.DEFINE_string("image", "", "An image file, repeated --batch_size times (default: a "
                    "random 640x480 image).")
flags.DEFINE_integer("num_threads", 0, "Threads of the .tflite interpreter, ONNX Runtime or "
                     "OpenVINO (0: the runtime's default; TensorFlow uses its own).",
                     lower_bound=0)
flags.DEFINE_list("formats", [], "Export --model to these formats and print their table: "
                  "saved_model, onnx, openvino, openvino_fp16, openvino_int8, tflite, "
                  "tflite_fp16, tflite_int8, or all.")
flags.DEFINE_string("val_file_pattern", "", "--formats: validation TFRecords (also the int8 "
                    "calibration images).")
flags.DEFINE_string("val_json_file", "", "--formats: COCO JSON of the validation data (with "
                    "--image_dir, or the ground truth of --val_file_pattern).")
flags.DEFINE_string("image_dir", "", "--formats: the images of --val_json_file.")
flags.DEFINE_string("export_dir", "", "--formats: where the files go (default: "
                    "<model>/formats).")
flags.DEFINE_integer("throughput_batch", 8, "--formats: the batch of the images/s column.",
                     lower_bound=1)
flags.DEFINE_string("results_csv", "", "--formats: the table as CSV (default: "
                    "<export_dir>/formats.csv).")


def benchmark():
    """Loads --model and prints Detector.benchmark's figures, or the --formats table."""
    from efficientdet_keras.inference.detector import Detector
    from efficientdet_keras.inference.loading import (ONNX_SUFFIX, OPENVINO_SUFFIX,
                                                      TFLITE_SUFFIX)

    if FLAGS.formats:
        return format_benchmark()
    if not FLAGS.model:
        raise ValueError("give --model: a training directory, a checkpoint, a detection "
                         "SavedModel, a .tflite, .onnx or OpenVINO file")
    if FLAGS.num_threads and not FLAGS.model.endswith((TFLITE_SUFFIX, ONNX_SUFFIX,
                                                       OPENVINO_SUFFIX)):
        raise ValueError("--num_threads applies to a .tflite, .onnx or OpenVINO file, not to %s"
                         % FLAGS.model)
    detector = Detector(FLAGS.model, model_name=FLAGS.model_name or None, hparams=FLAGS.hparams,
                        num_threads=FLAGS.num_threads or None)
    print(detector.benchmark(image=FLAGS.image or None, batch_size=FLAGS.batch_size,
                             runs=FLAGS.runs, warmup=FLAGS.warmup, verbose=False))


def format_benchmark():
    """The --formats table of --model (a training directory or a checkpoint)."""
    import os
    from efficientdet_keras.data.sources import make_source
    from efficientdet_keras.inference.loading import CONFIG_FILE, load_model_and_config
    from efficientdet_keras.reports import format_table

    try:
        formats = format_table.check_formats(FLAGS.formats)
    except ValueError as e:
        raise ValueError("--formats: %s" % e) from None
    if not (FLAGS.val_file_pattern or (FLAGS.val_json_file and FLAGS.image_dir)):
        raise ValueError("--formats needs validation data: --val_file_pattern, or "
                         "--val_json_file with --image_dir")
    int8 = [name for name in formats if format_table.format_precision(name) == "int8"]
    if int8 and not FLAGS.val_file_pattern:  # Calibration reads TFRecords.
        if FLAGS.formats != ["all"]:
            raise ValueError("--formats: %s calibrate on TFRecords: give --val_file_pattern"
                             % ", ".join(int8))
        print("Skipping %s: int8 calibration reads TFRecords (--val_file_pattern)"
              % ", ".join(int8))
        formats = [name for name in formats if name not in int8]
    run_dir = os.path.isdir(FLAGS.model) and os.path.exists(os.path.join(FLAGS.model,
                                                                          CONFIG_FILE))
    model_dir, ckpt = (FLAGS.model, "") if run_dir else ("", FLAGS.model)
    model, config = load_model_and_config(model_dir, ckpt, FLAGS.model_name, FLAGS.hparams)
    export_dir = FLAGS.export_dir or os.path.join(model_dir or os.path.dirname(ckpt) or ".",
                                                  "formats")
    source = make_source(FLAGS.val_file_pattern or None,
                         None if FLAGS.val_file_pattern else FLAGS.val_json_file,
                         FLAGS.image_dir or None)
    rows = format_table.format_table(
        model, config, ckpt or model_dir, formats, export_dir, source,
        FLAGS.val_json_file or None, FLAGS.val_file_pattern or None,
        throughput_batch=FLAGS.throughput_batch, runs=FLAGS.runs, warmup=FLAGS.warmup,
        num_threads=FLAGS.num_threads or None, image=FLAGS.image or None)
    print("%s at %dx%d, %d-core CPU" % (config.name, config.image_size[0],
                                        config.image_size[1], os.cpu_count()))
    print(format_table.table_text(rows, FLAGS.throughput_batch))
    path = format_table.write_table_csv(
        rows, FLAGS.results_csv or os.path.join(export_dir, "formats.csv"))
    print("Table written to %s" % path)


def main(argv):
    del argv
    run_or_exit(TOOL, benchmark)


def run():
    run_app(main, __name__)


if __name__ == "__main__":
    run()
