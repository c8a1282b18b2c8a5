"""TFLite model metadata for detection files: what MediaPipe Tasks' ObjectDetector and the
LiteRT (TFLite) Task Library read to run a detector without code of their own.

    from efficientdet_keras.exporters.tflite_metadata import with_detection_metadata
    flatbuffer = with_detection_metadata(flatbuffer, config, input_type="uint8")

adds a `TFLITE_METADATA` entry (a ModelMetadata flatbuffer, file identifier "M001") and
appends the label file as a zip archive after the model, the layout both runtimes expect.
The metadata is written from the published metadata schema with the `flatbuffers` package
TensorFlow already depends on: the maintained writers (MediaPipe's and tflite-support's)
cannot be installed beside this package (their absl-py and protobuf pins conflict with
tensorflow-model-optimization's and TensorFlow's), and MediaPipe 1.x's cannot be imported.

What it says:
  input   "image": RGB, the file's size; for a float32 input, normalisation mean 0 / std 1,
          because the graph normalises the 0..255 pixels itself (the sidecar's mean and std
          here would normalise twice). A uint8 input is fed as it is.
  outputs "location" (boxes, BOUNDARIES in ratio, stored ymin, xmin, ymax, xmax),
          "category" (0-based class index, with the label file: class id k on line k-1),
          "score" (with the config's score threshold), "number of detections".
"""

import io
import zipfile
from typing import Dict, List, Optional, Sequence

import flatbuffers
from tensorflow.lite.python import schema_py_generated as tflite_schema

from efficientdet_keras.config.label_maps import label_names

METADATA_NAME = "TFLITE_METADATA"
LABEL_FILE_NAME = "labels.txt"
DETECTION_OUTPUT_NAMES = ("location", "category", "score", "number of detections")
# The oldest metadata parser that understands every field written here (all date from the
# schema's first release).
MIN_PARSER_VERSION = "1.0.0"
_FILE_IDENTIFIER = b"M001"
# Enum and union values of the metadata schema.
_RGB = 1
_BOUNDARIES, _RATIO = 1, 0
_TENSOR_VALUE_LABELS = 3
_FEATURE_PROPERTIES, _IMAGE_PROPERTIES, _BOUNDING_BOX_PROPERTIES = 1, 2, 3
_NORMALIZATION_OPTIONS, _SCORE_THRESHOLDING_OPTIONS = 1, 3
# Boxes are stored ymin, xmin, ymax, xmax; the schema's order is left, top, right, bottom.
_BOX_INDEX = (1, 0, 3, 2)


# How the model was trained to see a picture (config key resize_mode), for the input's description.
FITTING_DESCRIPTIONS = {
    "letterbox": "letterboxed: resized keeping its aspect ratio and padded at the bottom and right",
    "stretch": "stretched: each axis resized to the input on its own, as the clients resize frames",
}

def label_lines(config) -> List[str]:
    """One name per 0-based class index: the label map's name of class id k on line k-1,
    `class_k` where the map has none. Raises ValueError for ids beyond num_classes."""
    names = label_names(config.label_map) or {}
    num_classes = int(config.num_classes)
    extra = sorted(k for k in names if not 1 <= int(k) <= num_classes)
    if extra:
        raise ValueError("label_map has class ids %s outside 1..num_classes=%d: give a "
                         "label map of num_classes entries or raise num_classes"
                         % (", ".join(str(k) for k in extra[:5]), num_classes))
    return [str(names.get(k, "class_%d" % k)) for k in range(1, num_classes + 1)]


class _MetadataBuilder:
    """Writes ModelMetadata tables with flatbuffers' builder, bottom up (children first)."""

    def __init__(self):
        self.builder = flatbuffers.Builder(1024)
        # Values equal to the schema default (0: RATIO, RGB's neighbours) are written too.
        self.builder.ForceDefaults(True)

    def string(self, text: str) -> int:
        return self.builder.CreateString(text)

    def offsets(self, items: Sequence[int]) -> int:
        builder = self.builder
        builder.StartVector(4, len(items), 4)
        for item in reversed(items):
            builder.PrependUOffsetTRelative(item)
        return builder.EndVector()

    def floats(self, values: Sequence[float]) -> int:
        return self._scalars(values, self.builder.PrependFloat32, float)

    def uints(self, values: Sequence[int]) -> int:
        return self._scalars(values, self.builder.PrependUint32, int)

    def _scalars(self, values, prepend, cast) -> int:
        """A vector of 4-byte scalars."""
        self.builder.StartVector(4, len(values), 4)
        for value in reversed(values):
            prepend(cast(value))
        return self.builder.EndVector()

    def table(self, fields: Dict[int, tuple]) -> int:
        """A table from {slot: (kind, value)}, kind "offset", "byte", "uint", "int", "float"."""
        builder = self.builder
        builder.StartObject(max(fields) + 1 if fields else 0)
        prepend = {"offset": builder.PrependUOffsetTRelativeSlot,
                   "byte": builder.PrependInt8Slot, "ubyte": builder.PrependUint8Slot,
                   "uint": builder.PrependUint32Slot, "int": builder.PrependInt32Slot,
                   "float": builder.PrependFloat32Slot}
        for slot, (kind, value) in sorted(fields.items()):
            prepend[kind](slot, value, 0)
        return builder.EndObject()

    # -- the schema's tables, each with its slot numbers --

    def associated_file(self, name: str, description: str, file_type: int) -> int:
        return self.table({0: ("offset", self.string(name)),
                           1: ("offset", self.string(description)),
                           2: ("byte", file_type)})

    def content(self, properties_type: int, properties: int,
                value_range: Optional[tuple] = None) -> int:
        fields = {0: ("ubyte", properties_type), 1: ("offset", properties)}
        if value_range is not None:
            fields[2] = ("offset", self.table({0: ("int", value_range[0]),
                                               1: ("int", value_range[1])}))
        return self.table(fields)

    def process_unit(self, options_type: int, options: int) -> int:
        return self.table({0: ("ubyte", options_type), 1: ("offset", options)})

    def tensor(self, name: str, description: str, content: int,
               process_units: Sequence[int] = (), stats: Optional[tuple] = None,
               associated_files: Sequence[int] = ()) -> int:
        fields = {0: ("offset", self.string(name)), 1: ("offset", self.string(description)),
                  3: ("offset", content)}
        if process_units:
            fields[4] = ("offset", self.offsets(process_units))
        if stats is not None:
            fields[5] = ("offset", self.table({0: ("offset", self.floats(stats[0])),
                                               1: ("offset", self.floats(stats[1]))}))
        if associated_files:
            fields[6] = ("offset", self.offsets(associated_files))
        return self.table(fields)

    def finish(self, root: int) -> bytes:
        self.builder.Finish(root, file_identifier=_FILE_IDENTIFIER)
        return bytes(self.builder.Output())


def detection_metadata(config, input_type: str, score_threshold: Optional[float] = None,
                       output_order: Sequence[int] = (0, 1, 2, 3), version: str = "1",
                       author: str = "", license_text: str = "Apache-2.0") -> bytes:
    """The ModelMetadata flatbuffer of a detection .tflite written for `config`.

    output_order: per output of the file's subgraph, its place in DETECTION_OUTPUT_NAMES.
    """
    out = _MetadataBuilder()
    height, width = (int(s) for s in config.image_size)
    image_properties = out.table({0: ("byte", _RGB), 1: ("offset", out.table(
        {0: ("uint", width), 1: ("uint", height)}))})
    units = []
    if input_type == "float32":
        normalization = out.table({0: ("offset", out.floats([0.0])),
                                   1: ("offset", out.floats([1.0]))})
        units = [out.process_unit(_NORMALIZATION_OPTIONS, normalization)]
    fitting = FITTING_DESCRIPTIONS[config.resize_mode]
    image = out.tensor(
        "image", "RGB image of %dx%d, pixel values 0..255 (%s), %s"
        % (width, height, input_type, fitting),
        out.content(_IMAGE_PROPERTIES, image_properties), units,
        stats=([255.0], [0.0]))

    boxes = out.table({0: ("offset", out.uints(_BOX_INDEX)), 1: ("byte", _BOUNDARIES),
                       2: ("byte", _RATIO)})
    location = out.tensor("location", "Boxes ymin, xmin, ymax, xmax, as fractions of the "
                          "input's height and width", out.content(
                              _BOUNDING_BOX_PROPERTIES, boxes, (2, 2)))
    labels = out.associated_file(LABEL_FILE_NAME, "Class names, one per class index",
                                 _TENSOR_VALUE_LABELS)
    category = out.tensor("category", "Class index of each box (class id - 1)",
                          out.content(_FEATURE_PROPERTIES, out.table({}), (1, 1)),
                          associated_files=[labels])
    if score_threshold is None:
        score_threshold = float(config.nms_configs.score_thresh or 0.0)
    threshold = out.table({0: ("float", float(score_threshold))})
    score = out.tensor("score", "Score of each box (sigmoid of the class logit)",
                       out.content(_FEATURE_PROPERTIES, out.table({}), (1, 1)),
                       [out.process_unit(_SCORE_THRESHOLDING_OPTIONS, threshold)])
    count = out.tensor("number of detections", "How many rows of the other outputs are "
                       "detections", out.content(_FEATURE_PROPERTIES, out.table({})))
    outputs = [location, category, score, count]

    subgraph = out.table({0: ("offset", out.string(config.name)),
                          2: ("offset", out.offsets([image])),
                          3: ("offset", out.offsets([outputs[i] for i in output_order]))})
    root = out.table({
        0: ("offset", out.string(config.name)),
        1: ("offset", out.string(
            "EfficientDet object detector %s (%d classes), exported by efficientdet_keras"
            % (config.name, int(config.num_classes)))),
        2: ("offset", out.string(version)),
        3: ("offset", out.offsets([subgraph])),
        4: ("offset", out.string(author)),
        5: ("offset", out.string(license_text)),
        7: ("offset", out.string(MIN_PARSER_VERSION))})
    return out.finish(root)


def _output_order(model) -> List[int]:
    """Per subgraph output, its place in DETECTION_OUTPUT_NAMES (from the signature's keys)."""
    keys = ("detection_boxes", "detection_classes", "detection_scores", "num_detections")
    signature = model.signatureDefs[0]
    by_tensor = {item.tensorIndex: item.name.decode() if isinstance(item.name, bytes)
                 else item.name for item in signature.outputs}
    outputs = list(model.subgraphs[0].outputs)
    names = [by_tensor.get(tensor) for tensor in outputs]
    if sorted(names, key=str) != sorted(keys):
        raise ValueError("metadata needs a detection .tflite with outputs %s, got %s"
                         % (", ".join(keys), names))
    return [keys.index(name) for name in names]


def with_detection_metadata(flatbuffer: bytes, config, input_type: str,
                            score_threshold: Optional[float] = None) -> bytes:
    """`flatbuffer` (a detection .tflite) with its metadata and label file added."""
    model = tflite_schema.ModelT.InitFromPackedBuf(bytearray(flatbuffer), 0)
    metadata = detection_metadata(config, input_type, score_threshold, _output_order(model))
    buffer = tflite_schema.BufferT()
    buffer.data = list(metadata)
    model.buffers.append(buffer)
    entry = tflite_schema.MetadataT()
    entry.name = METADATA_NAME
    entry.buffer = len(model.buffers) - 1
    model.metadata = [m for m in (model.metadata or []) if _name(m) != METADATA_NAME] + [entry]
    builder = flatbuffers.Builder(len(flatbuffer) + len(metadata) + 1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return _append_zip(bytes(builder.Output()),
                       {LABEL_FILE_NAME: ("\n".join(label_lines(config)) + "\n").encode()})


def _name(metadata_entry) -> str:
    name = metadata_entry.name
    return name.decode() if isinstance(name, bytes) else name


def _append_zip(flatbuffer: bytes, files: Dict[str, bytes]) -> bytes:
    """The model followed by a zip archive of `files`, stored uncompressed so runtimes can
    read them in place; zip offsets count from the start of the model."""
    stream = io.BytesIO(flatbuffer)
    stream.seek(0, io.SEEK_END)
    with zipfile.ZipFile(stream, "a", compression=zipfile.ZIP_STORED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return stream.getvalue()


def metadata_files(tflite_bytes: bytes) -> Dict[str, bytes]:
    """The files packed after a .tflite's model (empty when there are none)."""
    try:
        with zipfile.ZipFile(io.BytesIO(tflite_bytes)) as archive:
            return {name: archive.read(name) for name in archive.namelist()}
    except zipfile.BadZipFile:
        return {}
