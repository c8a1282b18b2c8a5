"""The detection SavedModel for serving: pre-processing, network and NMS in one graph.

Three signatures over the serving graph (inference/serving_graph.py, which lists the outputs):
  serving_default  images: uint8 [B, H, W, 3], any size
  image_bytes      images: string [B], encoded JPEG or PNG (sizes may differ)
  tf_example       examples: string [B], serialized tf.Example with image/encoded
NMS settings come from the config. The folder also holds label_map.json ({class id: name})
when the config has a label map.
"""

import os
import shutil

import tensorflow as tf

from efficientdet_keras.config.label_maps import label_names
from efficientdet_keras.checkpoint import ensure_built
from efficientdet_keras.inference.serving_graph import (LABEL_MAP_FILE, DetectionModule,
                                                        inference_network)
from efficientdet_keras.exporters.strip import strip_for_export
from efficientdet_keras.model.weights import averaged_weights
from efficientdet_keras.utils.fileio import fsync_tree, write_json_atomically

def export_detector(model, export_dir: str, fold_batch_norm: bool = True,
                    mixed_precision=None) -> str:
    """Writes the serving SavedModel of `model` (EMA weights when it keeps them), atomically.

    A pruned model is exported without its wrappers, its kernels masked (strip_for_export).
    With `fold_batch_norm` (the default) the SavedModel runs the network with every BatchNorm
    folded into its conv (model/folding.py: the same outputs, fewer and fused kernels);
    quantization-aware models are exported unfolded. `mixed_precision` ("bfloat16",
    "float16") sets the exported network's compute precision; None keeps the model's.
    """
    ensure_built(model)  # Variables must exist before tracing, to be saved with it.
    model = strip_for_export(model)
    tmp_dir = export_dir.rstrip("/") + ".tmp"
    with averaged_weights(model):
        network = inference_network(model, fold_batch_norm, mixed_precision)
        module = DetectionModule(network, network.config)
        signatures = {"serving_default": module.detect_images,
                      "image_bytes": module.detect_encoded,
                      "tf_example": module.detect_examples}
        tf.saved_model.save(module, tmp_dir, signatures=signatures)
    label_map = label_names(model.config.label_map)
    if label_map:  # Class names for whoever serves or draws the detections.
        write_json_atomically(os.path.join(tmp_dir, LABEL_MAP_FILE),
                              {str(k): v for k, v in label_map.items()}, indent=None)
    fsync_tree(tmp_dir)  # The rename below publishes complete files only.
    if os.path.exists(export_dir):
        shutil.rmtree(export_dir)
    os.replace(tmp_dir, export_dir)
    return export_dir
