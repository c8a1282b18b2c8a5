"""efficientdet-export: a checkpoint as a serving SavedModel or a TF-Hub feature module.

  # Detection SavedModel (uint8 images, encoded images, tf.Example signatures):
  efficientdet-export --model_dir=runs/demo --export_dir=exported/demo
  # TF-Hub feature module, to fine-tune with --hub_module_url:
  efficientdet-export --model_dir=runs/demo --format=hub --export_dir=exported/demo-hub

The config comes from <model_dir>/config.yaml when present, else --model_name;
--hparams overrides either (e.g. nms_configs.score_thresh=0.3). EMA weights are
exported when the checkpoint has them.
"""

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

from absl import flags  # noqa: E402

from efficientdet_keras.cli.common import (HPARAMS_HELP, load_model_and_config, run_app,  # noqa: E402
                                           run_or_exit)

TOOL = "efficientdet-export"
FLAGS = flags.FLAGS
flags.DEFINE_string("model_name", "efficientdet-d0", "Model, when model_dir has no config.yaml.")
flags.DEFINE_string("model_dir", "", "Training directory (config.yaml and checkpoints).")
flags.DEFINE_string("ckpt", "", "Checkpoint prefix, directory (its latest) or archive directory (its "
                    "best); default: latest in model_dir.")
flags.DEFINE_string("hparams", "", HPARAMS_HELP)
flags.DEFINE_string("export_dir", "", "Where the SavedModel is written (replaced atomically).")
flags.DEFINE_enum("format", "saved_model", ["saved_model", "hub"],
                  "saved_model: the detector for serving; hub: a TF-Hub feature module.")


def export():
    if not FLAGS.export_dir:
        raise ValueError("--export_dir is required")
    if not (FLAGS.model_dir or FLAGS.ckpt):
        raise ValueError("give --model_dir or --ckpt")
    model, _ = load_model_and_config(FLAGS.model_dir, FLAGS.ckpt, FLAGS.model_name, FLAGS.hparams)
    if FLAGS.format == "hub":
        from efficientdet_keras.export.hub_module import export_feature_module
        path = export_feature_module(model, FLAGS.export_dir)
    else:
        from efficientdet_keras.export.saved_model import export_detector
        path = export_detector(model, FLAGS.export_dir)
    print("Exported %s to %s" % ("TF-Hub feature module" if FLAGS.format == "hub"
                                 else "detection SavedModel", path))


def main(argv):
    del argv
    run_or_exit(TOOL, export)


def run():
    run_app(main, __name__)


if __name__ == "__main__":
    run()
