"""efficientdet-bench: the latency of your model, network alone and end to end.

  efficientdet-bench --model=runs/demo
  efficientdet-bench --model=exported/demo --batch_size=8 --image=photo.jpg
  efficientdet-bench --model=exported/demo.tflite --num_threads=4

--model is anything efficientdet_keras.Detector loads: a training directory, a checkpoint, a
detection SavedModel or a .tflite file. Runs Detector.benchmark: --warmup untimed runs, then
--runs timed runs of one batch; prints the median and p90 milliseconds per batch and the
images/s, for the network alone (not separable in a SavedModel) and end to end
(pre-processing, network and NMS).
"""

from absl import flags

from efficientdet_keras.cli.common import HPARAMS_HELP, run_app, run_or_exit

TOOL = "efficientdet-bench"
FLAGS = flags.FLAGS
flags.DEFINE_string("model", "", "The model: a training directory, a checkpoint, a detection "
                    "SavedModel or a .tflite file (with its .tflite.json).")
flags.DEFINE_string("model_name", "", "The model of a checkpoint without config.yaml "
                    "(e.g. efficientdet-d0).")
flags.DEFINE_string("hparams", "", HPARAMS_HELP)
flags.DEFINE_integer("batch_size", 1, "Images per timed batch.", lower_bound=1)
flags.DEFINE_integer("runs", 10, "Timed runs of one batch; the median and p90 are "
                     "taken over them.", lower_bound=1)
flags.DEFINE_integer("warmup", 3, "Untimed runs first (tracing, caches).", lower_bound=0)
flags.DEFINE_string("image", "", "An image file, repeated --batch_size times (default: a "
                    "random 640x480 image).")
flags.DEFINE_integer("num_threads", 0, "A .tflite file's interpreter threads (0: the "
                     "runtime's default).", lower_bound=0)


def benchmark():
    """Loads --model and prints Detector.benchmark's figures."""
    from efficientdet_keras.inference.detector import Detector
    from efficientdet_keras.inference.loading import TFLITE_SUFFIX

    if not FLAGS.model:
        raise ValueError("give --model: a training directory, a checkpoint, a detection "
                         "SavedModel or a .tflite file")
    if FLAGS.num_threads and not FLAGS.model.endswith(TFLITE_SUFFIX):
        raise ValueError("--num_threads applies to a .tflite file, not to %s" % FLAGS.model)
    detector = Detector(FLAGS.model, model_name=FLAGS.model_name or None, hparams=FLAGS.hparams,
                        num_threads=FLAGS.num_threads or None)
    print(detector.benchmark(image=FLAGS.image or None, batch_size=FLAGS.batch_size,
                             runs=FLAGS.runs, warmup=FLAGS.warmup, verbose=False))


def main(argv):
    del argv
    run_or_exit(TOOL, benchmark)


def run():
    run_app(main, __name__)


if __name__ == "__main__":
    run()
