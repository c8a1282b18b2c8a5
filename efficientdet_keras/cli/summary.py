"""efficientdet-summary: builds a model from flags and prints its structure.

Shows the config in use, the parameters of each part (backbone, BiFPN, heads)
and the output shape of every pyramid level for one input.
"""

import sys

from absl import flags

from efficientdet_keras.cli.common import HPARAMS_HELP, run_app

FLAGS = flags.FLAGS
flags.DEFINE_string("model_name", "", "Model from the EfficientDet family: efficientdet-d0 ... "
                    "efficientdet-d7x or efficientdet-lite0 ... lite4 (default: the model a "
                    "released --ckpt name stands for, else efficientdet-d0).")
flags.DEFINE_string("hparams", "", HPARAMS_HELP)
flags.DEFINE_string("ckpt", "", "Optional checkpoint to load first: a path or a released "
                    "model's name such as efficientdet-d0 (downloaded once).")


def count_parameters(variables) -> int:
    return int(sum(v.shape.num_elements() for v in variables))


def main(argv):
    del argv
    import numpy as np
    import tensorflow as tf

    from efficientdet_keras import EfficientDetNet, restore_ckpt
    from efficientdet_keras.inference.loading import load_run_config

    try:
        config = load_run_config("", FLAGS.model_name, FLAGS.hparams, FLAGS.ckpt)
    except ValueError as e:  # A bad name or override: one line, no stack trace.
        sys.exit("efficientdet-summary: %s" % e)
    model = EfficientDetNet(config=config)
    height, width = config.image_size
    class_outputs, box_outputs = model(tf.zeros([1, height, width, 3]), training=False)
    if FLAGS.ckpt:
        try:
            report = restore_ckpt(model, FLAGS.ckpt)
        except (ValueError, FileNotFoundError) as e:  # Another model, no network: one line.
            sys.exit("efficientdet-summary: %s" % e)
        print("Loaded %d variables from %s" % (len(report.loaded) + len(report.loaded_from_ema),
                                                report.path))

    print("%s  input %dx%d (HxW), %d classes, backbone %s, BiFPN %d x %d filters, fusion %s"
          % (config.name, height, width, config.num_classes, config.backbone_name,
             config.fpn_cell_repeats, config.fpn_num_filters, config.fpn_weight_method))
    print("\n%-16s %14s %14s" % ("part", "trainable", "all"))
    parts = [("backbone", model.backbone), ("BiFPN", model.fpn_cells),
             ("class head", model.class_net), ("box head", model.box_net)]
    parts += [(layer.name, layer) for layer in model.resample_layers]
    for label, layer in parts:
        print("%-16s %14s %14s" % (label, "{:,}".format(count_parameters(layer.trainable_variables)),
                                   "{:,}".format(count_parameters(layer.variables))))
    print("%-16s %14s %14s" % ("total", "{:,}".format(count_parameters(model.trainable_variables)),
                               "{:,}".format(count_parameters(model.variables))))
    print("\n%-6s %-22s %-22s" % ("level", "class output", "box output"))
    for level, cls, box in zip(range(config.min_level, config.max_level + 1),
                               class_outputs, box_outputs):
        print("P%-5d %-22s %-22s" % (level, cls.shape.as_list(), box.shape.as_list()))
    scores = tf.sigmoid(class_outputs[0]).numpy()
    print("\nMean initial class score on a blank image: %.4f (prior 0.01)" % float(np.mean(scores)))


def run():
    run_app(main, __name__)


if __name__ == "__main__":
    run()
