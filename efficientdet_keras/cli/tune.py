"""efficientdet-tune: a search over the settings that decide a small-data fine-tune.

  # 12 trials of 10 epochs each on your data, from the released D0:
  efficientdet-tune --data=datasets/pets --model_dir=runs/pets-search --trials=12 \\
      --pretrained_ckpt=efficientdet-d0 --num_epochs=10 --batch_size=8
  # Then train with the best settings:
  efficientdet-train --data=datasets/pets --model_dir=runs/pets --num_epochs=10 \\
      --pretrained_ckpt=efficientdet-d0 --hparams=runs/pets-search/best_hparams.yaml

Each trial trains in <model_dir>/trial-N with its own learning rate (a factor of 1/4 to 4 of
the config's, log-scaled), warm-up, scale-jitter range and freezing (none, the backbone, or
the backbone and the BiFPN), chosen by Optuna's TPE sampler; a trial whose validation AP falls
behind the median of the trials before it at the same epoch is stopped. The table of trials
goes to <model_dir>/trials.csv, the best settings to <model_dir>/best_hparams.yaml. The study is
kept in <model_dir>/tune.db: the same command again, after a kill or with a larger --trials,
continues the search, and a trial that was cut off resumes its training.
"""

import sys

from absl import flags

from efficientdet_keras.cli import flag_groups
from efficientdet_keras.cli.common import HPARAMS_HELP, run_app, run_or_exit

TOOL = "efficientdet-tune"
FLAGS = flags.FLAGS
flags.DEFINE_string("model_dir", "", "The search's folder: tune.db, trial-N/, trials.csv and "
                    "best_hparams.yaml.")
flags.DEFINE_integer("trials", 10, "Trials the search has when done (finished or stopped "
                     "early), counting those of an earlier start.", lower_bound=1)
flag_groups.define_data(
    "Its val (else test) split scores the trials.")
flags.DEFINE_bool("demo", False, "Search on the built-in synthetic shapes.")
flags.DEFINE_integer("demo_images", 1000, "Images of the demo dataset.", lower_bound=8)
flags.DEFINE_string("model_name", "efficientdet-d0", "Model from the EfficientDet family: "
                    "efficientdet-d0 ... efficientdet-d7x or efficientdet-lite0 ... lite4.")
flags.DEFINE_string("pretrained_ckpt", "", "The detector checkpoint every trial fine-tunes: a "
                    "path or a released name such as efficientdet-d0.")
flags.DEFINE_string("hparams", "", HPARAMS_HELP + " Every trial starts from it.")
flags.DEFINE_integer("num_epochs", None, "Epochs of each trial (default: the config's).")
flags.DEFINE_integer("batch_size", None, "Global batch size (default: the config's).")
flags.DEFINE_integer("eval_samples", None, "Score each trial on at most this many validation "
                     "images (default: all).")
flags.DEFINE_integer("tf_random_seed", 0, "The sampler's seed and every trial's training seed.")


def main(argv):
    del argv
    from efficientdet_keras.workflows.tune import tune
    if not FLAGS.model_dir:
        sys.exit("%s: --model_dir is required: the search's folder" % TOOL)
    if bool(FLAGS.data) == bool(FLAGS.demo):
        sys.exit("%s: give one of --data (your dataset) and --demo" % TOOL)
    result = run_or_exit(
        TOOL, tune, FLAGS.model_dir, trials=FLAGS.trials, data=FLAGS.data or None,
        demo=FLAGS.demo, demo_images=FLAGS.demo_images,
        **flag_groups.data_options(FLAGS), model=FLAGS.model_name,
        pretrained=FLAGS.pretrained_ckpt or None, hparams=FLAGS.hparams,
        seed=FLAGS.tf_random_seed, eval_samples=FLAGS.eval_samples, eval_images=0,
        config_overrides={"num_epochs": FLAGS.num_epochs, "batch_size": FLAGS.batch_size})
    print(result.table())
    if result.best_hparams:
        print("Best settings: %s (efficientdet-train --hparams=%s)"
              % (result.best_hparams, result.best_hparams))


def run():
    run_app(main, __name__)


if __name__ == "__main__":
    run()
