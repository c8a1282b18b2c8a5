"""What the Detector returns: detections of one image, raw network outputs, benchmark figures."""

import dataclasses
from typing import List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from efficientdet_keras.detection.wbf import WBF_IOU_THRESHOLD, fuse_detections
from efficientdet_keras.utils.drawing import class_name


@dataclasses.dataclass
class Detections:
    """The detections of one image, highest score first.

    Attributes:
      boxes: float32 [n, 4] ymin, xmin, ymax, xmax in pixels of the original image (within
        it).
      scores: float32 [n].
      class_ids: int64 [n], 1..num_classes.
      class_names: str [n], from the label map (the id as text without one).
      image_size: (height, width) of the original image.
    """
    boxes: np.ndarray
    scores: np.ndarray
    class_ids: np.ndarray
    class_names: np.ndarray
    image_size: Tuple[int, int]

    @classmethod
    def from_arrays(cls, boxes, scores, class_ids, image_size,
                    label_map: Optional[Mapping[int, str]] = None) -> "Detections":
        """Sorted by score (stable), boxes clipped to the image, names looked up in
        label_map."""
        scores = np.asarray(scores, np.float32).reshape(-1)
        order = np.argsort(-scores, kind="stable")
        class_ids = np.asarray(class_ids).reshape(-1).astype(np.int64)[order]
        names = np.array([class_name(i, label_map) for i in class_ids], dtype=str)
        # The models clip boxes to their padded input, which reaches past the image.
        height, width = image_size[:2]
        boxes = np.clip(np.asarray(boxes, np.float32).reshape(-1, 4), 0,
                        np.array([height, width, height, width], np.float32))
        return cls(boxes=boxes[order],
                   scores=scores[order], class_ids=class_ids,
                   class_names=names.reshape(-1),
                   image_size=(int(image_size[0]), int(image_size[1])))

    def __len__(self) -> int:
        return len(self.scores)

    def top(self, score_threshold: float = 0.0,
            max_detections: Optional[int] = None) -> "Detections":
        """The detections scoring at least score_threshold, at most max_detections of them."""
        keep = np.flatnonzero(self.scores >= score_threshold)[:max_detections]
        return dataclasses.replace(self, boxes=self.boxes[keep], scores=self.scores[keep],
                                   class_ids=self.class_ids[keep],
                                   class_names=self.class_names[keep])

    def to_dict(self) -> dict:
        """Plain lists, ready for json.dump."""
        return {"image_size": list(self.image_size), "boxes": self.boxes.tolist(),
                "scores": self.scores.tolist(), "class_ids": self.class_ids.tolist(),
                "class_names": self.class_names.tolist()}

    def records(self, decimals: int = 2) -> List[dict]:
        """One dict per detection: {"box": [ymin, xmin, ymax, xmax], "score", "class", "name"},
        boxes rounded to `decimals` and scores to 4 decimals (efficientdet-infer's
        detections.json)."""
        return [{"box": [round(float(v), decimals) for v in box], "score": round(float(score), 4),
                 "class": int(class_id), "name": str(name)}
                for box, score, class_id, name in zip(self.boxes, self.scores, self.class_ids,
                                                      self.class_names)]


def ensemble_detections(per_model: Sequence[Detections],
                        iou_threshold: float = WBF_IOU_THRESHOLD) -> Detections:
    """One image's detections by several models (each a `Detections` of the same image, say
    from Detectors of different checkpoints or sizes) fused into one by weighted box fusion
    (detection/wbf.py): overlapping boxes of a class are averaged with their scores as
    weights, and a box only some models found keeps that share of its score. Class names
    come from the first model that names the class."""
    if not per_model:
        raise ValueError("ensemble_detections needs the detections of at least one model")
    sizes = {found.image_size for found in per_model}
    if len(sizes) != 1:
        raise ValueError("ensemble_detections takes detections of one image; got image sizes "
                         "%s" % sorted(sizes))
    names = {}
    for found in reversed(per_model):
        names.update(zip(found.class_ids.tolist(), found.class_names.tolist()))
    fused = fuse_detections([{"boxes": found.boxes, "scores": found.scores,
                              "classes": found.class_ids} for found in per_model], iou_threshold)
    return Detections.from_arrays(fused["boxes"], fused["scores"], fused["classes"],
                                  per_model[0].image_size, names)


@dataclasses.dataclass
class RawOutputs:
    """The network's outputs for one image (`detect(..., only_network=True)`).

    Attributes:
      class_outputs: class logits. From a checkpoint, one array per level (min_level first),
        [h_l, w_l, num_anchors * num_classes]; from a raw .tflite, one array [A, num_classes]
        (all levels, in the anchor order of efficientdet_keras.detection.anchors.Anchors).
      box_outputs: box codes, the same way: [h_l, w_l, num_anchors * 4] per level or [A, 4].
      image_scale: original pixels per network input pixel (to map decoded boxes back); a
        float, or float32 [y, x] with resize_mode stretch.
      image_size: (height, width) of the original image.
    """
    class_outputs: List[np.ndarray]
    box_outputs: List[np.ndarray]
    image_scale: Union[float, np.ndarray]
    image_size: Tuple[int, int]


@dataclasses.dataclass
class Latency:
    """Timed runs of one batch: median and 90th percentile milliseconds, images per second
    at the median."""
    median_ms: float
    p90_ms: float
    images_per_second: float

    @classmethod
    def from_seconds(cls, seconds: List[float], batch_size: int) -> "Latency":
        median = float(np.median(seconds))
        return cls(median_ms=median * 1e3, p90_ms=float(np.percentile(seconds, 90)) * 1e3,
                   images_per_second=batch_size / median)

    def __str__(self) -> str:
        return "median %.1f ms, p90 %.1f ms per batch, %.1f images/s" % (
            self.median_ms, self.p90_ms, self.images_per_second)


@dataclasses.dataclass
class BenchmarkResult:
    """`Detector.benchmark`'s figures.

    Attributes:
      network: the network alone on pre-processed input (None for a SavedModel or .onnx, whose
        graph cannot be split; for a .tflite with detection outputs it includes the file's
        NMS op).
      end_to_end: `detect` on uint8 images: pre-processing, network and NMS.
    """
    source: str
    batch_size: int
    image_size: Tuple[int, int]
    runs: int
    warmup: int
    network: Optional[Latency]
    end_to_end: Latency

    def __str__(self) -> str:
        network = self.network or "not separable (a SavedModel or .onnx is one graph)"
        return ("%s, batch %d of %dx%d images, %d runs after %d warm-up runs:\n"
                "  network     %s\n  end to end  %s"
                % (self.source, self.batch_size, self.image_size[0], self.image_size[1],
                   self.runs, self.warmup, network, self.end_to_end))
