"""Running an exported .onnx detector with ONNX Runtime.

    runner = ONNXRunner("exported/model.onnx")
    found = runner.detect(image)    # image: uint8 [h, w, 3], any size
    outputs = runner.run(batch)     # uint8 [B, H, W, 3]: the file's four outputs by name

The file comes from `efficientdet-export --format=onnx` (exporters/onnx.py, which describes its
input and outputs) with its sidecar `<file>.onnx.json`; graph_file_runner.py has what the
runners of exported graph files share. Pre-processing and NMS are inside the file: images of
any size go in as they are, a batch of one size at a time. onnxruntime is imported when a
runner is made: it is an extra (`pip install "efficientdet_keras[onnx]"`).
"""

from typing import Dict, Optional, Sequence

import numpy as np

from efficientdet_keras.inference.graph_file_runner import INPUT_NAME, GraphFileRunner
from efficientdet_keras.utils.extras import import_extra


def _onnxruntime():
    return import_extra("onnxruntime", "running an .onnx file", "onnx")


class ONNXRunner(GraphFileRunner):
    """One exported .onnx detector (see the module doc and GraphFileRunner).

    Args:
      path, num_threads (ONNX Runtime's intra-op threads), config_overrides: as
        GraphFileRunner's.
      providers: ONNX Runtime execution providers, best first (None: every available one,
        in ONNX Runtime's order of preference).

    Attributes:
      runtime: the onnxruntime.InferenceSession.
    """

    file_format = "onnx"
    description = ".onnx"
    format_name = "ONNX"
    runtime_name = "ONNX Runtime"

    def __init__(self, path: str, num_threads: Optional[int] = None,
                 providers: Optional[Sequence[str]] = None, config_overrides=None):
        self._providers = providers
        super().__init__(path, num_threads, config_overrides)

    def _open(self, num_threads: Optional[int]) -> None:
        ort = _onnxruntime()
        options = ort.SessionOptions()
        if num_threads:
            options.intra_op_num_threads = int(num_threads)
        try:
            self.runtime = ort.InferenceSession(
                self.path, options,
                providers=list(self._providers or ort.get_available_providers()))
        except Exception as e:  # noqa: BLE001 (onnxruntime raises its own exception types)
            raise self._load_error(e) from None
        self._output_names = [o.name for o in self.runtime.get_outputs()]
        self._check_io([{i.name} for i in self.runtime.get_inputs()], self._output_names)

    def _infer(self, images: np.ndarray) -> Dict[str, np.ndarray]:
        outputs = self.runtime.run(self._output_names, {INPUT_NAME: images})
        return dict(zip(self._output_names, outputs))
