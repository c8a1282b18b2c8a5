"""int8 post-training quantization of an OpenVINO IR detector with NNCF.

    ir = quantize(ir, config, "data/val-*.tfrecord", num_images=100)

NNCF (OpenVINO's own compression library) inserts int8 quantize/dequantize pairs on the
convolutions' weights and inputs, with activation ranges measured on the calibration images
(the letterboxed uint8 images a runner feeds, as for the int8 .tflite). Two choices keep the
accuracy:
  - the "mixed" preset: activations get asymmetric ranges. Swish outputs are almost all
    positive, and a symmetric range would waste half of the int8 codes on them;
  - the class and box prediction convolutions stay in float32 (`prediction_convolutions`):
    their outputs are the logits and box codes that decoding, the score threshold and NMS
    read directly, where an int8 step moves a box edge or a score across the threshold.
  - weights use half of the int8 range (NNCF's overflow fix, on every layer): CPUs without VNNI
    (AVX2, AVX-512 without VNNI) add int8 products in saturating 16-bit sums, which clip with
    full-range weights. An IR is often run on another CPU than the one that quantized it.
Pre-processing, box decoding and NMS contain no convolution, so NNCF leaves them in float32.
The benchmarks page ("Every format, one table") has the AP of each choice.
"""

import contextlib
import logging
from typing import List

from efficientdet_keras.utils.extras import import_extra

# How far (in single-consumer steps: bias add, layout transpose) a prediction convolution's
# output is from the reshape into per-anchor outputs.
_MAX_STEPS_TO_RESHAPE = 3


def nncf_module():
    """The nncf package, or a one-line MissingExtraError."""
    return import_extra("nncf", "OpenVINO int8 quantization", "openvino")


def prediction_convolutions(ir) -> List[str]:
    """Friendly names of the IR's convolutions whose output, after its bias (and a
    transpose), is reshaped into per-anchor class logits or box codes: the last convolution
    of the class and of the box head at each feature level. Found by the graph's shape
    because conversion renames the folded convolutions."""
    found = []
    for op in ir.get_ordered_ops():
        if op.get_type_name() != "Convolution":
            continue
        node = op
        for _ in range(_MAX_STEPS_TO_RESHAPE):
            consumers = [target.get_node() for target in node.output(0).get_target_inputs()]
            if len(consumers) != 1:
                break
            node = consumers[0]
            if node.get_type_name() == "Reshape":
                found.append(op.get_friendly_name())
                break
    return found


@contextlib.contextmanager
def _nncf_warnings_only():
    """NNCF logs a line per layer it leaves alone; its progress bars stay."""
    logger = logging.getLogger("nncf")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


def calibration_inputs(config, file_pattern: str, num_images: int) -> list:
    """uint8 [1, H, W, 3] letterboxed images of the TFRecords, as the IR takes them."""
    from efficientdet_keras.exporters.tflite import calibration_images
    return [inputs[0] for inputs in calibration_images(config, file_pattern, num_images)]


def quantize(ir, config, calibration_data: str, num_images: int = 100, preset: str = "mixed",
             float_predictions: bool = True):
    """The openvino.Model `ir` with int8 convolutions (see the module doc), calibrated on
    the first `num_images` images of the TFRecords matching `calibration_data`.

    preset ("mixed" or "performance": symmetric activations) and float_predictions (keep the
    prediction convolutions in float32) are the module doc's choices; the other values are
    there to measure them (`benchmarks/bench.py --what=openvino_int8`).

    Raises ValueError (one line) when the pattern gives no image; MissingExtraError when
    nncf is not installed.
    """
    nncf = nncf_module()
    images = calibration_inputs(config, calibration_data, num_images)
    if not images:
        raise ValueError("%s: no calibration image found" % calibration_data)
    kept_float = []
    if float_predictions:
        levels = config.max_level - config.min_level + 1
        kept_float = prediction_convolutions(ir)
        if len(kept_float) != 2 * levels:
            logging.warning("OpenVINO int8: found %d of the %d class and box prediction "
                            "convolutions; the others are quantized too",
                            len(kept_float), 2 * levels)
    presets = {"mixed": nncf.QuantizationPreset.MIXED,
               "performance": nncf.QuantizationPreset.PERFORMANCE}
    with _nncf_warnings_only():
        return nncf.quantize(ir, nncf.Dataset(images), preset=presets[preset],
                             subset_size=len(images),
                             ignored_scope=nncf.IgnoredScope(names=kept_float),
                             advanced_parameters=nncf.AdvancedQuantizationParameters(
                                 overflow_fix=nncf.OverflowFix.ENABLE))
