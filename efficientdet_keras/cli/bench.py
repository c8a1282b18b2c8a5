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
(workflows/compare_formats.py).
"""

from absl import flags

from efficientdet_keras.cli import flag_groups
from efficientdet_keras.cli.common import HPARAMS_HELP, run_app, run_or_exit
from efficientdet_keras.workflows.compare_formats import FORMATS

TOOL = "efficientdet-bench"
FLAGS = flags.FLAGS
flag_groups.define_model()
flag_groups.define_num_threads()
flags.DEFINE_string("model_name", "", "The model of a checkpoint without config.yaml "
                    "(e.g. efficientdet-d0).")
flags.DEFINE_string("hparams", "", HPARAMS_HELP)
flags.DEFINE_integer("batch_size", 1, "Images per timed batch.", lower_bound=1)
flags.DEFINE_integer("runs", 10, "Timed runs of one batch; the median and p90 are "
                     "taken over them.", lower_bound=1)
flags.DEFINE_integer("warmup", 3, "Untimed runs first (tracing, caches).", lower_bound=0)
flags.DEFINE_string("image", "", "An image file, repeated --batch_size times (default: a "
                    "random 640x480 image).")
flags.DEFINE_list("formats", [], "Export --model to these formats and print their table: "
                  "%s, or all." % ", ".join(FORMATS))
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


def benchmark(model: str, model_name: str, hparams: str, num_threads, **timing) -> None:
    """Prints Detector.benchmark's figures of `model`."""
    from efficientdet_keras.inference.detector import Detector
    from efficientdet_keras.workflows.formats import format_of_file
    if not model:
        raise ValueError("give --model: a training directory, a checkpoint, a detection "
                         "SavedModel, a .tflite, .onnx or OpenVINO file")
    if num_threads and format_of_file(model) is None:
        raise ValueError("--num_threads applies to a .tflite, .onnx or OpenVINO file, not to %s"
                         % model)
    detector = Detector(model, model_name=model_name or None, hparams=hparams,
                        num_threads=num_threads or None)
    print(detector.benchmark(verbose=False, **timing))


def format_benchmark(model: str, formats, export_dir: str, results_csv: str,
                     **settings) -> None:
    """Prints and writes the table of `formats` of `model` (a run directory or checkpoint)."""
    import os
    from efficientdet_keras.workflows import compare_formats
    from efficientdet_keras.workflows.export import model_location
    export_dir = export_dir or os.path.join(
        model_location(model)[0] or os.path.dirname(model_location(model)[1]) or ".", "formats")
    rows, config = compare_formats.compare_model_formats(model, formats, export_dir=export_dir,
                                                         **settings)
    print("%s at %dx%d, %d-core CPU" % (config.name, config.image_size[0], config.image_size[1],
                                        os.cpu_count()))
    print(compare_formats.table_text(rows, settings["throughput_batch"]))
    path = compare_formats.write_table_csv(
        rows, results_csv or os.path.join(export_dir, "formats.csv"))
    print("Table written to %s" % path)


def main(argv):
    del argv
    timing = dict(runs=FLAGS.runs, warmup=FLAGS.warmup, image=FLAGS.image or None)
    if not FLAGS.formats:
        run_or_exit(TOOL, benchmark, FLAGS.model, FLAGS.model_name, FLAGS.hparams,
                    FLAGS.num_threads, batch_size=FLAGS.batch_size, **timing)
        return
    run_or_exit(TOOL, format_benchmark, FLAGS.model, FLAGS.formats, FLAGS.export_dir,
                FLAGS.results_csv, val_file_pattern=FLAGS.val_file_pattern or None,
                val_json_file=FLAGS.val_json_file or None, image_dir=FLAGS.image_dir or None,
                model_name=FLAGS.model_name, hparams=FLAGS.hparams,
                throughput_batch=FLAGS.throughput_batch, num_threads=FLAGS.num_threads or None,
                **timing)


def run():
    run_app(main, __name__)


if __name__ == "__main__":
    run()
