"""efficientdet-export: a checkpoint as a serving SavedModel, a TF-Hub feature module, a .tflite,
an .onnx or an OpenVINO file.

  # Detection SavedModel (uint8 images, encoded images, tf.Example signatures):
  efficientdet-export --model_dir=runs/demo --export_dir=exported/demo
  # TF-Hub feature module, to fine-tune with --hub_module_url:
  efficientdet-export --model_dir=runs/demo --format=hub --export_dir=exported/demo-hub
  # TFLite (writes <export_dir>/model.tflite and model.tflite.json, then checks parity):
  efficientdet-export --model_dir=runs/demo --format=tflite --export_dir=exported/demo-int8 \
      --tflite_quantization=int8 --representative_data='data/val-*.tfrecord'
  # ONNX (writes <export_dir>/model.onnx and model.onnx.json, then checks parity); hard NMS
  # per class when the config has soft-NMS, which ONNX cannot run (one warning line says so):
  efficientdet-export --model_dir=runs/demo --format=onnx --export_dir=exported/demo-onnx
  # OpenVINO IR (model.xml, model.bin and model.xml.json, then checks parity), soft-NMS kept:
  efficientdet-export --model_dir=runs/demo --format=openvino --export_dir=exported/demo-openvino
  # The same with int8 convolutions (NNCF post-training quantization):
  efficientdet-export --model_dir=runs/demo --format=openvino --openvino_precision=int8 \
      --export_dir=exported/demo-openvino-int8 --representative_data='data/val-*.tfrecord'

The config comes from <model_dir>/config.yaml when present, else --model_name, else
the released model --ckpt names; --hparams overrides any of them (e.g.
nms_configs.score_thresh=0.3). EMA weights are exported when the checkpoint has them.
When --model_dir was trained with mlflow_tracking_uri, the export is logged to that MLflow
run too, under export/<export_dir's name>. The run's classes.json (model id, name and the
data's own id of each class, written by --data training) is copied into export_dir.
"""

import os

from absl import flags

from efficientdet_keras.cli.common import (HPARAMS_HELP, load_model_and_config, run_app,
                                           run_or_exit)

TOOL = "efficientdet-export"
FLAGS = flags.FLAGS
flags.DEFINE_string("model_name", "", "Model, when there is no config.yaml (default: the "
                    "model a released --ckpt name stands for, else efficientdet-d0).")
flags.DEFINE_string("model_dir", "", "Training directory (config.yaml and checkpoints).")
flags.DEFINE_string("ckpt", "", "Checkpoint prefix, directory (its latest), archive "
                    "directory (its best), e.g. runs/x/ckpt-3, runs/x/best or runs/x/last, or "
                    "a released model's name such as efficientdet-lite0 (downloaded once); "
                    "default: latest in model_dir.")
flags.DEFINE_string("hparams", "", HPARAMS_HELP)
flags.DEFINE_string("export_dir", "", "Where the SavedModel or hub module is written (replaced "
                    "atomically); tflite, onnx, openvino: the folder of model.tflite, "
                    "model.onnx or model.xml.")
flags.DEFINE_enum("format", "saved_model", ["saved_model", "hub", "tflite", "onnx", "openvino"],
                  "saved_model: the detector for serving; hub: a TF-Hub feature module; "
                  "tflite: <export_dir>/model.tflite and its sidecar model.tflite.json; "
                  "onnx: <export_dir>/model.onnx and its sidecar model.onnx.json (hard NMS); "
                  "openvino: <export_dir>/model.xml, model.bin and model.xml.json (the "
                  "config's NMS, soft-NMS included).")
flags.DEFINE_enum("openvino_precision", "float32", ["float32", "float16", "int8"],
                  "openvino: float32; float16 weights (half the size; the runner computes in "
                  "float32); int8: convolutions quantized with NNCF, calibrated on "
                  "--representative_data.")
flags.DEFINE_string("tflite_quantization", "float32",
                    "tflite: float32, float16 (weights) or int8 (full integer); FP32, FP16 and "
                    "INT8 are accepted too.")
flags.DEFINE_enum("tflite_outputs", "detections", ["detections", "raw"],
                  "tflite: detections (TFLite_Detection_PostProcess inside) or the raw outputs.")
flags.DEFINE_enum("tflite_input_type", "uint8", ["uint8", "float32"],
                  "tflite: the image input's type (float32 holds 0..255).")
flags.DEFINE_string("representative_data", "",
                    "tflite, openvino: TFRecord file pattern of images for int8 calibration and "
                    "the parity checks (needed for int8); onnx: images for the parity check.")
flags.DEFINE_integer("num_calibration_images", 100,
                     "tflite and openvino int8: images used for calibration.", lower_bound=1)
flags.DEFINE_boolean("fold_batch_norm", True,
                     "saved_model, onnx, openvino: run the network with every BatchNorm folded "
                     "into its conv (the same detections, fewer kernels; --nofold_batch_norm "
                     "keeps them).")
flags.DEFINE_integer("onnx_opset", 17, "onnx: the file's ONNX opset, 13 to 18 (the default, "
                     "17, is read by ONNX Runtime 1.13+ and TensorRT 8.6+).")
flags.DEFINE_enum("serving_precision", "", ["", "float32", "bfloat16", "float16"],
                  "saved_model: the network's compute precision (needs --fold_batch_norm); "
                  "empty: the config's mixed_precision.")
flags.DEFINE_boolean("check_parity", True,
                     "tflite, onnx, openvino: after writing, compare the file with the Keras "
                     "model and the detection SavedModel; exit 1 when a check fails.")


def export():
    if not FLAGS.export_dir:
        raise ValueError("--export_dir is required")
    if not (FLAGS.model_dir or FLAGS.ckpt):
        raise ValueError("give --model_dir or --ckpt")
    if FLAGS.format == "tflite":
        check_tflite_flags()  # Before the (slow) model loading.
    if FLAGS.format == "onnx":
        check_onnx_flags()
    if FLAGS.format == "openvino":
        check_openvino_flags()
    model, _ = load_model_and_config(FLAGS.model_dir, FLAGS.ckpt, FLAGS.model_name, FLAGS.hparams)
    if FLAGS.format == "tflite":
        return export_tflite_and_check(model)
    if FLAGS.format == "onnx":
        return export_onnx_and_check(model)
    if FLAGS.format == "openvino":
        return export_openvino_and_check(model)
    if FLAGS.format == "hub":
        from efficientdet_keras.export.hub_module import export_feature_module
        path = export_feature_module(model, FLAGS.export_dir)
    else:
        from efficientdet_keras.export.saved_model import export_detector
        path = export_detector(model, FLAGS.export_dir, FLAGS.fold_batch_norm,
                               FLAGS.serving_precision or None)
    print("Exported %s to %s" % ("TF-Hub feature module" if FLAGS.format == "hub"
                                 else "detection SavedModel", path))


def check_tflite_flags():
    """Raises ValueError naming the flag when the tflite flags do not fit together."""
    from efficientdet_keras.export import tflite
    try:
        quantization = tflite.canonical_quantization(FLAGS.tflite_quantization)
    except ValueError as e:
        raise ValueError("--tflite_quantization: %s" % e) from None
    if quantization == "int8" and not FLAGS.representative_data and not _is_qat_run():
        raise ValueError("--tflite_quantization=int8 needs --representative_data (a TFRecord "
                         "file pattern of calibration images), unless the model was trained "
                         "with quantization-aware training")


def check_onnx_flags():
    """Raises ValueError (one line) for an opset out of range."""
    from efficientdet_keras.export.onnx import check_opset
    try:
        check_opset(FLAGS.onnx_opset)
    except ValueError as e:
        raise ValueError("--onnx_opset: %s" % e) from None


def check_openvino_flags():
    """Raises ValueError (one line) for int8 without calibration images."""
    if FLAGS.openvino_precision == "int8" and not FLAGS.representative_data:
        raise ValueError("--openvino_precision=int8 needs --representative_data (a TFRecord "
                         "file pattern of calibration images)")


def _is_qat_run() -> bool:
    """Whether the run's config (config.yaml and --hparams) asks for QAT, read without
    building the model: its int8 ranges were learned, no calibration images needed."""
    from efficientdet_keras.cli.common import load_run_config
    from efficientdet_keras.optimization import is_quantization_aware
    return is_quantization_aware(load_run_config(FLAGS.model_dir, FLAGS.model_name,
                                                 FLAGS.hparams, FLAGS.ckpt))


def export_tflite_and_check(model):
    """Writes <export_dir>/model.tflite (+ sidecar) and runs the parity checks of its kind."""
    from efficientdet_keras.export import tflite, tflite_parity
    quantization = tflite.canonical_quantization(FLAGS.tflite_quantization)
    os.makedirs(FLAGS.export_dir, exist_ok=True)
    path = tflite.export_tflite(
        model, os.path.join(FLAGS.export_dir, tflite.TFLITE_FILE_NAME), quantization,
        FLAGS.tflite_outputs, FLAGS.tflite_input_type, FLAGS.representative_data or None,
        FLAGS.num_calibration_images)
    print("Exported %s TFLite model (%s outputs, %s input) to %s, %.1f MB" % (
        quantization, FLAGS.tflite_outputs, FLAGS.tflite_input_type, path,
        os.path.getsize(path) / 1e6))
    if not FLAGS.check_parity:
        return
    images = tflite_parity.check_images(model.config, FLAGS.representative_data or None)
    report_parity(path, tflite_parity.standard_checks(model, path, images))


def export_onnx_and_check(model):
    """Writes <export_dir>/model.onnx (+ sidecar) and runs its parity check."""
    from efficientdet_keras.export import onnx, graph_parity, tflite_parity
    os.makedirs(FLAGS.export_dir, exist_ok=True)
    path = onnx.export_onnx(model, os.path.join(FLAGS.export_dir, onnx.ONNX_FILE_NAME),
                            FLAGS.onnx_opset, FLAGS.fold_batch_norm)
    across = onnx.onnx_nms_method(model.config) == "global"
    print("Exported ONNX model (opset %d, hard NMS %s, uint8 images of any size and batch) to "
          "%s, %.1f MB" % (FLAGS.onnx_opset, "across classes" if across else "per class", path,
                           os.path.getsize(path) / 1e6))
    if FLAGS.check_parity:
        images = tflite_parity.check_images(model.config, FLAGS.representative_data or None)
        report_parity(path, graph_parity.standard_checks(model, path, images,
                                                        FLAGS.fold_batch_norm))


def export_openvino_and_check(model):
    """Writes <export_dir>/model.xml and model.bin (+ sidecar) and runs its parity check."""
    from efficientdet_keras.export import graph_parity, openvino, tflite_parity
    path = openvino.export_openvino(
        model, os.path.join(FLAGS.export_dir, openvino.OPENVINO_FILE_NAME),
        FLAGS.openvino_precision, FLAGS.fold_batch_norm, FLAGS.representative_data or None,
        FLAGS.num_calibration_images)
    size = sum(os.path.getsize(p) for p in (path, path[:-len(".xml")] + ".bin"))
    print("Exported OpenVINO model (%s weights, %s NMS, uint8 images of any size and batch) "
          "to %s, %.1f MB" % (FLAGS.openvino_precision, model.config.nms_configs.method or "hard",
                              path, size / 1e6))
    if FLAGS.check_parity:
        images = tflite_parity.check_images(model.config, FLAGS.representative_data or None)
        report_parity(path, graph_parity.standard_checks(model, path, images,
                                                         FLAGS.fold_batch_norm))


def report_parity(path, results):
    """Prints one "Parity: ..." line per check; raises ValueError naming the failed ones."""
    from efficientdet_keras.export import tflite_parity
    for result in results:
        print("Parity: " + result.summary)
    failures = tflite_parity.failed(results)
    if failures:
        raise ValueError("parity check failed for %s: %s (--check_parity=false skips the "
                         "checks)" % (path, ", ".join(r.name for r in failures)))


def copy_class_mapping() -> None:
    """The run's classes.json (each model id with the data's own id and name) goes with the
    export, so whoever serves it can map detections back to the dataset's ids."""
    import shutil
    mapping = os.path.join(FLAGS.model_dir, "classes.json")
    if FLAGS.model_dir and os.path.exists(mapping) and os.path.isdir(FLAGS.export_dir):
        shutil.copyfile(mapping, os.path.join(FLAGS.export_dir, "classes.json"))


def export_and_log():
    export()
    copy_class_mapping()
    if FLAGS.model_dir:  # The run's MLflow run, when it was tracked.
        from efficientdet_keras.reports.mlflow_export import log_export
        log_export(FLAGS.model_dir, FLAGS.export_dir)


def main(argv):
    del argv
    run_or_exit(TOOL, export_and_log)


def run():
    run_app(main, __name__)


if __name__ == "__main__":
    run()
