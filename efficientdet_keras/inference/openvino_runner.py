"""Running an exported OpenVINO IR detector (`model.xml` and `model.bin`) with OpenVINO.

    runner = OpenVINORunner("exported/demo-openvino/model.xml")
    found = runner.detect(image)    # image: uint8 [h, w, 3], any size
    outputs = runner.run(batch)     # uint8 [B, H, W, 3]: the file's four outputs by name

The IR comes from `efficientdet-export --format=openvino` (exporters/openvino.py, which
describes it) with its sidecar `<file>.xml.json`; graph_file_runner.py has what the runners of
exported graph files share. It runs on OpenVINO's CPU plugin in float32: the plugin's default
on CPUs with bfloat16 instructions is to compute in bfloat16, which moves scores by up to
0.02 and, through soft-NMS, reorders detections. openvino is imported when a runner is
made: it is an extra (`pip install "efficientdet_keras[openvino]"`).
"""

from typing import Dict, Optional

import numpy as np

from efficientdet_keras.inference.graph_file_runner import OUTPUT_NAMES, GraphFileRunner
from efficientdet_keras.utils.extras import import_extra

DEVICE = "CPU"


def openvino_module():
    """The openvino package, or a one-line MissingExtraError."""
    return import_extra("openvino", "an OpenVINO model", "openvino")


class OpenVINORunner(GraphFileRunner):
    """One exported OpenVINO IR detector (see the module doc and GraphFileRunner).

    num_threads: the CPU plugin's inference threads (None: its default).

    Attributes:
      compiled: the openvino.CompiledModel.
    """

    file_format = "openvino"
    description = "OpenVINO .xml"
    format_name = "OpenVINO"
    runtime_name = "OpenVINO"

    def _open(self, num_threads: Optional[int]) -> None:
        ov = openvino_module()
        properties = {"INFERENCE_PRECISION_HINT": "f32"}
        if num_threads:
            properties["INFERENCE_NUM_THREADS"] = int(num_threads)
        try:
            self.compiled = ov.Core().compile_model(self.path, DEVICE, properties)
        except Exception as e:  # noqa: BLE001 (OpenVINO raises RuntimeError and its own types)
            raise self._load_error(e) from None
        # Converted tensors may carry several names (TensorFlow's internal ones too).
        self._outputs = {name: output for output in self.compiled.outputs
                         for name in output.get_names() if name in OUTPUT_NAMES}
        self._check_io([i.get_names() for i in self.compiled.inputs], self._outputs)
        self._request = self.compiled.create_infer_request()

    def _infer(self, images: np.ndarray) -> Dict[str, np.ndarray]:
        results = self._request.infer({0: images})
        return {name: np.array(results[output]) for name, output in self._outputs.items()}
