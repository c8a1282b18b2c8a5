"""The Python detector: any trained or exported model in, detections in original pixels out.

    detector = Detector("efficientdet-d0")           # a released model by name (COCO names)
    detector = Detector("runs/demo")                 # a training directory (latest checkpoint)
    detector = Detector("exported/demo")             # a detection SavedModel
    detector = Detector("exported/demo.tflite")      # a .tflite file (its .tflite.json beside it)
    detector = Detector("exported/demo.onnx")        # an .onnx file (its .onnx.json beside it)
    detector = Detector("exported/ov/model.xml")     # an OpenVINO IR (model.bin, model.xml.json)
    detector = Detector("efficientdet-d0/", model_name="efficientdet-d0")  # a checkpoint

    found = detector.detect("photo.jpg", score_threshold=0.4)   # Detections
    Detector("runs/demo", tta="flip")                # each image and its mirror, fused
    Detector("runs/demo", slice=640, overlap=0.2)    # large images in tiles, merged
    found.boxes, found.scores, found.class_ids, found.class_names
    picture = detector.draw("photo.jpg", found)                 # uint8 [H, W, 3]
    detector.detect_video("clip.mp4", "out/", track=True)       # out/clip.mp4, clip.jsonl
    detector.benchmark(batch_size=8)
"""

import os
import time
from typing import Optional

import numpy as np

from efficientdet_keras.detection.slicing import SliceSettings, detect_sliced, slice_settings
from efficientdet_keras.detection.tta import check_tta, merge_flipped
from efficientdet_keras.utils.drawing import draw_boxes
from efficientdet_keras.inference import loading
from efficientdet_keras.inference.images import image_list, load_image
from efficientdet_keras.inference.results import BenchmarkResult, Detections, Latency


class Detector:
    """Detects objects with a model directory, a checkpoint, a SavedModel, a .tflite, an .onnx
    or an OpenVINO file.

    Args:
      path: what to load; its kind is recognised (`loading.source_kind`):
        - the name of a released COCO detector ("efficientdet-d0" ... "efficientdet-d7x",
          "efficientdet-lite0" ... "efficientdet-lite4"), downloaded into the cache on first
          use, with the COCO class names; a file or folder of that name wins over the name;
        - a training directory (config.yaml and ckpt-*): its latest checkpoint;
        - a checkpoint: a prefix, its .index, a folder of checkpoints (the latest) or an
          archive folder (the best); the config is model_name's, else the config.yaml of
          its run;
        - a detection SavedModel from efficientdet-export (label_map.json names classes);
        - a .tflite file from efficientdet-export --format=tflite (sidecar beside it);
        - an .onnx file from efficientdet-export --format=onnx (sidecar beside it), run
          with ONNX Runtime (`pip install "efficientdet_keras[onnx]"`);
        - an OpenVINO IR's .xml from efficientdet-export --format=openvino (its .bin and
          sidecar beside it), run with OpenVINO (`pip install "efficientdet_keras[openvino]"`).
      model_name: the model of a checkpoint without config.yaml (e.g. "efficientdet-d0").
      hparams: config overrides ("k=v,..." or a dict) for a directory or checkpoint (NMS
        settings, classes, label_map) and for decoding a raw .tflite.
      tta: test-time augmentation: "flip" also runs each image's mirror image and fuses
        the two sets of detections by weighted box fusion (detection/tta.py); None: the
        config's key tta where the model has a config (not a SavedModel), else none.
      num_threads: .tflite interpreter threads, ONNX Runtime's intra-op threads, OpenVINO's
        inference threads (None: the runtime's default).
      slice: sliced detection for large images (detection/slicing.py): a tile size in pixels
        (or (height, width), or SliceSettings for every setting); each image is cut into
        tiles that overlap by `overlap` of their size, each tile is detected in at the
        model's size, with a pass over the whole image too, and the detections are merged
        (boxes cut at a tile's edge into the whole ones). None: the whole image only.
      overlap: the fraction of a tile that neighbouring tiles share, with `slice`.

    Checkpoints load their EMA weights where they have them, and run the SavedModel's own
    pre-processing, network and NMS graph in-process, so a checkpoint and its export give
    the same detections.
    """

    def __init__(self, path, model_name: Optional[str] = None, hparams="",
                 num_threads: Optional[int] = None, tta: Optional[str] = None,
                 slice=None, overlap: float = 0.2):  # noqa: A002 (the name users know)
        path = os.fspath(path)
        slicing = slice_settings(slice, overlap)  # Checked before a model is loaded.
        from efficientdet_keras.checkpoint.released import find_released
        released = find_released(path)
        kind = loading.CHECKPOINT if released else loading.source_kind(path)
        if released:
            from efficientdet_keras.checkpoint.download import released_checkpoint_dir
            config = loading.released_config(released, model_name, hparams)
            folder = released_checkpoint_dir(released.name)
            self._backend = _keras_backend(config, folder, released.name)
        elif kind == loading.TFLITE:
            self._backend = _tflite_backend(path, num_threads, hparams)
        elif kind in (loading.SAVED_MODEL, loading.ONNX, loading.OPENVINO):
            if hparams:
                raise ValueError("hparams cannot change %s: an exported %s keeps the config "
                                 "(NMS included) it was exported with"
                                 % (path, "SavedModel" if kind == loading.SAVED_MODEL
                                    else "%s file" % os.path.splitext(path)[1]))
            from efficientdet_keras.inference import backends
            self._backend = (backends.saved_model_backend(path) if kind == loading.SAVED_MODEL
                             else backends.GraphFileBackend(path, num_threads=num_threads))
        elif kind == loading.MODEL_DIR:
            config = loading.load_run_config(path, model_name or "", hparams)
            self._backend = _keras_backend(config, path, path)
        else:
            config = loading.checkpoint_config(path, model_name, hparams)
            self._backend = _keras_backend(config, path, path)
        self.kind = kind
        self.tta = self._tta_setting(tta)
        self.slicing = slicing

    def _tta_setting(self, tta: Optional[str]) -> Optional[str]:
        if tta is None and self.config is not None:
            tta = self.config.tta
        return check_tta(tta)

    @classmethod
    def from_checkpoint(cls, ckpt: str, config, tta: Optional[str] = None,
                        slice=None, overlap: float = 0.2) -> "Detector":  # noqa: A002
        """A checkpoint (prefix, folder or archive folder) read with a given Config."""
        slicing = slice_settings(slice, overlap)
        return cls._with_backend(_keras_backend(config, ckpt, ckpt), loading.CHECKPOINT, tta,
                                 slicing)

    @classmethod
    def from_model(cls, model, config=None, tta: Optional[str] = None,
                   slice=None, overlap: float = 0.2) -> "Detector":  # noqa: A002
        """An EfficientDetNet in memory, with its current weights (config: model.config)."""
        from efficientdet_keras.inference.backends import KerasBackend
        config = config if config is not None else model.config
        return cls._with_backend(KerasBackend(model, config, config.name), "model", tta,
                                 slice_settings(slice, overlap))

    @classmethod
    def _with_backend(cls, backend, kind: str, tta: Optional[str] = None,
                      slicing: Optional[SliceSettings] = None) -> "Detector":
        detector = cls.__new__(cls)
        detector._backend, detector.kind = backend, kind
        detector.tta = detector._tta_setting(tta)
        detector.slicing = slicing
        return detector

    @property
    def label_map(self):
        """{class id: name}; empty when the model names no classes."""
        return self._backend.label_map

    @property
    def config(self):
        """The Config of a checkpoint or exported file (from its sidecar); None for a
        SavedModel."""
        return getattr(self._backend, "config", None)

    def detect(self, images, score_threshold: float = 0.0,
               max_detections: Optional[int] = None, only_network: bool = False):
        """Detects objects in one image or a list of images of any sizes.

        Args:
          images: one image or a list (or a uint8 array [B, H, W, 3]); each a uint8 array
            [H, W, 3] (grayscale and RGBA are converted), a PIL image or a file path.
          score_threshold: drop detections scoring lower (the model's NMS score_thresh
            applies first).
          max_detections: keep at most this many per image (None: all the model returns).
          only_network: return the network's raw outputs (`RawOutputs`: class logits and
            box codes) instead of detections; for checkpoints and raw .tflite files only
            (a SavedModel, .onnx or OpenVINO file is one graph).

        Returns:
          `Detections` (boxes [n, 4] ymin, xmin, ymax, xmax in original pixels, scores,
          class_ids 1..C, class_names) or `RawOutputs` for one image; a list for a list.

        Raises:
          FileNotFoundError: an image file is missing (the message names it).
          ValueError: an image file cannot be decoded (the message names it).
        """
        arrays, single = image_list(images)
        if only_network:
            found = self._backend.raw_outputs(arrays) if arrays else []
        else:
            found = [Detections.from_arrays(boxes, scores, classes, image.shape[:2],
                                            self.label_map).top(score_threshold, max_detections)
                     for image, (boxes, scores, classes)
                     in zip(arrays, self._detect_arrays(arrays, score_threshold)
                            if arrays else [])]
        return found[0] if single else found

    def _detect_arrays(self, arrays, score_threshold: float):
        """(boxes, scores, classes) per image: of the whole images, or with slicing, of
        their tiles' detections at or above score_threshold, merged."""
        if self.slicing is None:
            return self._detect_whole(arrays)
        return [detect_sliced(self._detect_whole, image, self.slicing, score_threshold)
                for image in arrays]

    def _detect_whole(self, arrays):
        """The backend's (boxes, scores, classes) per image; with tta "flip", fused with
        those of the mirror images (as many detections as the plain pass may give)."""
        found = self._backend.detect(arrays)
        if self.tta != "flip":
            return found
        in_mirrors = self._backend.detect([np.ascontiguousarray(a[:, ::-1]) for a in arrays])
        fused = []
        for image, plain, mirror in zip(arrays, found, in_mirrors):
            as_dicts = [dict(zip(("boxes", "scores", "classes"), d)) for d in (plain, mirror)]
            merged = merge_flipped(*as_dicts, width=image.shape[1],
                                   max_detections=max(len(plain[1]), len(mirror[1])))
            fused.append((merged["boxes"], merged["scores"], merged["classes"]))
        return fused

    def detect_video(self, source, output_dir: str, **options):
        """Detects in every frame of a video file, a stream URL or a camera index ("0") and
        writes the annotated video and one JSON line per frame into output_dir; `track=True`
        keeps each object's id across frames. The options and the result are
        `inference.video.detect_video`'s (the `video` extra; `track` for ids)."""
        from efficientdet_keras.inference.video import detect_video
        return detect_video(self, source, output_dir, **options)

    def draw(self, image, detections: Detections, score_threshold: float = 0.0) -> np.ndarray:
        """`image` (as `detect` takes it) with the detections' boxes, names and scores drawn.

        Returns:
          uint8 [H, W, 3], a new array.
        """
        names = dict(zip(detections.class_ids.tolist(), detections.class_names.tolist()))
        return draw_boxes(load_image(image), detections.boxes, detections.class_ids,
                          detections.scores, label_map=names, score_threshold=score_threshold)

    def benchmark(self, image=None, batch_size: int = 1, runs: int = 10, warmup: int = 3,
                  verbose: bool = True) -> BenchmarkResult:
        """Latency as the older inference driver measured it: `warmup` untimed runs, then
        `runs` timed runs of one batch, for the network alone and end to end.

        Args:
          image: the image repeated batch_size times (anything `detect` takes); default a
            random 640x480 image.
          verbose: print the figures.

        Returns:
          A BenchmarkResult: median and p90 milliseconds per batch and images/s.
        """
        if image is None:
            image = np.random.default_rng(0).integers(0, 256, [480, 640, 3], dtype=np.uint8)
        batch = [load_image(image)] * batch_size
        network_fn = self._backend.network_fn(batch)
        network = (None if network_fn is None
                   else Latency.from_seconds(timed_runs(network_fn, runs, warmup), batch_size))
        end_to_end = Latency.from_seconds(
            timed_runs(lambda: self.detect(batch), runs, warmup), batch_size)
        result = BenchmarkResult(source=self._backend.description, batch_size=batch_size,
                                 image_size=tuple(batch[0].shape[:2]), runs=runs, warmup=warmup,
                                 network=network, end_to_end=end_to_end)
        if verbose:
            print(result)
        return result


def timed_runs(fn, runs: int, warmup: int):
    """Seconds of each of `runs` calls of fn, after `warmup` untimed calls."""
    if runs < 1:
        raise ValueError("benchmark runs must be at least 1, got %d" % runs)
    for _ in range(warmup):
        fn()
    seconds = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - start)
    return seconds


def _keras_backend(config, ckpt: str, description: str):
    from efficientdet_keras.inference.serving_graph import inference_network
    from efficientdet_keras.inference.backends import KerasBackend
    model = inference_network(loading.restore_model(config, ckpt, use_ema=None))
    return KerasBackend(model, config, description)


def _tflite_backend(path: str, num_threads: Optional[int], hparams):
    from efficientdet_keras.inference.backends import TFLiteBackend
    return TFLiteBackend(path, num_threads=num_threads, config_overrides=hparams or None)
