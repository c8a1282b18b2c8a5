"""efficientdet-export: a checkpoint as a serving SavedModel, a TF-Hub feature module, a .tflite,
an .onnx or an OpenVINO file.

  # Detection SavedModel (uint8 images, encoded images, tf.Example signatures):
  efficientdet-export --model_dir=runs/demo --export_dir=exported/demo
  # TF-Hub feature module, to fine-tune with --hub_module_url:
  efficientdet-export --model_dir=runs/demo --format=hub --export_dir=exported/demo-hub
  # TFLite (writes <export_dir>/model.tflite and model.tflite.json, then checks parity):
  efficientdet-export --model_dir=runs/demo --format=tflite --export_dir=exported/demo-int8 \
      --precision=int8 --representative_data='data/val-*.tfrecord'
  # ONNX (writes <export_dir>/model.onnx and model.onnx.json, then checks parity); hard NMS
  # per class when the config has soft-NMS, which ONNX cannot run (one warning line says so):
  efficientdet-export --model_dir=runs/demo --format=onnx --export_dir=exported/demo-onnx
  # OpenVINO IR (model.xml, model.bin and model.xml.json, then checks parity), soft-NMS kept:
  efficientdet-export --model_dir=runs/demo --format=openvino --export_dir=exported/demo-openvino
  # The same with int8 convolutions (NNCF post-training quantization):
  efficientdet-export --model_dir=runs/demo --format=openvino --precision=int8 \
      --export_dir=exported/demo-openvino-int8 --representative_data='data/val-*.tfrecord'

The config comes from <model_dir>/config.yaml when present, else --model_name, else
the released model --ckpt names; --hparams overrides any of them (e.g.
nms_configs.score_thresh=0.3). EMA weights are exported when the checkpoint has them.
When --model_dir was trained with mlflow_tracking_uri, the export is logged to that MLflow
run too, under export/<export_dir's name>. The run's classes.json (model id, name and the
data's own id of each class, written by --data training) is copied into export_dir.
--tflite_quantization, --openvino_precision and --serving_precision are older names of
--precision. The formats are the rows of efficientdet_keras/workflows/formats.py.
"""

from absl import flags

from efficientdet_keras.cli import flag_groups
from efficientdet_keras.cli.common import HPARAMS_HELP, run_app, run_or_exit
from efficientdet_keras.workflows.formats import FORMATS

TOOL = "efficientdet-export"
RENAMED = {"tflite_quantization": "precision", "openvino_precision": "precision",
           "serving_precision": "precision"}
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
flags.DEFINE_enum("format", "saved_model", list(FORMATS), "; ".join(
    "%s: %s%s" % (fmt.name, fmt.title, " (<export_dir>/%s and its sidecar %s.json)"
                  % (fmt.file_name, fmt.file_name) if fmt.file_name else "")
    for fmt in FORMATS.values()) + ".")
flag_groups.define_precision("The file's precision (default: the format's first): " + "; ".join(
    "%s: %s" % (fmt.name, ", ".join(fmt.precisions)) for fmt in FORMATS.values()
    if len(fmt.precisions) > 1) + ". saved_model: the network's compute precision (needs "
    "--fold_batch_norm); tflite: float16 stores weights, int8 is full integer (FP32, FP16 and "
    "INT8 are accepted too); openvino: float16 weights, int8 convolutions quantized with NNCF.")
flag_groups.define_renamed(RENAMED, {"precision": "string"})
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
flags.DEFINE_boolean("check_parity", True,
                     "tflite, onnx, openvino: after writing, compare the file with the Keras "
                     "model and the detection SavedModel; exit 1 when a check fails.")


def export_and_report(model_dir: str, ckpt: str, format_name: str, export_dir: str,
                      **options) -> None:
    """Runs the export workflow, prints its result, logs it to the run's MLflow run."""
    from efficientdet_keras.workflows.export import export
    if not export_dir:
        raise ValueError("--export_dir is required")
    if not (model_dir or ckpt):
        raise ValueError("give --model_dir or --ckpt")
    result = export(ckpt or model_dir, format_name, export_dir, model_dir=model_dir or None,
                    **options)
    print(result.summary())
    if result.failed_checks:
        raise ValueError("parity check failed for %s: %s (--check_parity=false skips the "
                         "checks)" % (result.path, ", ".join(c.name for c in result.failed_checks)))
    if model_dir:  # The run's MLflow run, when it was tracked.
        from efficientdet_keras.reports.mlflow_export import log_export
        log_export(model_dir, export_dir)


def main(argv):
    del argv
    flag_groups.take_renamed(FLAGS, TOOL, RENAMED)
    run_or_exit(TOOL, export_and_report, FLAGS.model_dir, FLAGS.ckpt, FLAGS.format,
                FLAGS.export_dir, precision=FLAGS.precision or None,
                calibration_data=FLAGS.representative_data or None,
                check=FLAGS.check_parity, model_name=FLAGS.model_name, hparams=FLAGS.hparams,
                num_calibration_images=FLAGS.num_calibration_images,
                fold_batch_norm=FLAGS.fold_batch_norm, onnx_opset=FLAGS.onnx_opset,
                tflite_outputs=FLAGS.tflite_outputs, tflite_input_type=FLAGS.tflite_input_type)


def run():
    run_app(main, __name__)


if __name__ == "__main__":
    run()
