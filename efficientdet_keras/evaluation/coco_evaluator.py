"""COCO box evaluation that matches pycocotools exactly.

    evaluator = COCOEvaluator(annotation_file="instances_val.json")   # or ground truth from batches
    for images, labels in dataset:
        detections = postprocess_detections(config, *model(images), labels["image_scales"])
        evaluator.add_batch(labels, detections)
    metrics = evaluator.result()     # {"AP": ..., "AP50": ..., ..., "AP_/person": ...}

Every image the evaluator has seen counts, with or without detections. Image
ids are int64 end to end (never floats): the pipeline's `source_ids`, the id
column of the detections and, through `data.formats.image_ids.image_id_to_int64`, the ids
of a ground-truth JSON (integers, numeric strings or other strings alike), so
ids up to 2^63 - 1 and hashed string ids match exactly. Two scoring backends give
the same numbers: pycocotools (the reference) and faster-coco-eval (used when
installed).
"""

import contextlib
import copy
import io
from typing import Dict, List, Mapping, Optional

import numpy as np

from efficientdet_keras.data.formats.image_ids import ImageId, image_id_to_int64
from efficientdet_keras.data.formats.coco_json import coco_image_ids, read_coco_json
from efficientdet_keras.evaluation.id_check import check_ids_match
from efficientdet_keras.detection.precision_table import AccumulatedPrecision
from efficientdet_keras.detection.postprocess import (BatchedDetections, CocoRows,
                                                      box_scale_factors, to_coco_rows)

METRIC_NAMES = ("AP", "AP50", "AP75", "APs", "APm", "APl",
                "ARmax1", "ARmax10", "ARmax100", "ARs", "ARm", "ARl")
BACKENDS = ("auto", "pycocotools", "faster_coco_eval")


def faster_coco_eval_available() -> bool:
    try:
        import faster_coco_eval  # noqa: F401
    except ImportError:
        return False
    return True


def _numpy(value) -> np.ndarray:
    return value.numpy() if hasattr(value, "numpy") else np.asarray(value)


class COCOEvaluator:
    """Accumulates detections (and optionally ground truth) batch by batch; scores with COCO.

    Args:
      annotation_file: a COCO instances JSON with the ground truth. Without it,
        ground truth comes from the batches passed to `add_batch` / `add_groundtruth`.
      label_map: {class id: name}; enables per-class AP keyed "AP_/<name>". With an
        annotation file, its categories are used when no label map is given.
      backend: "auto" (faster-coco-eval when installed, else pycocotools),
        "pycocotools" or "faster_coco_eval".
      verbose: let the backend print its summary table.
    """

    def __init__(self, annotation_file: Optional[str] = None,
                 label_map: Optional[Mapping[int, str]] = None, backend: str = "auto",
                 verbose: bool = False):
        if backend not in BACKENDS:
            raise ValueError("backend must be one of %s, got %r" % (", ".join(BACKENDS), backend))
        if backend == "auto":
            backend = "faster_coco_eval" if faster_coco_eval_available() else "pycocotools"
        self.backend = backend
        self.verbose = verbose
        self.annotation_file = annotation_file
        self._file_groundtruth = None
        self._file_ids: Dict[int, ImageId] = {}
        if annotation_file:
            self._file_groundtruth, self._file_ids = load_groundtruth_file(annotation_file)
            if label_map is None:
                label_map = {c["id"]: c["name"] for c in self._file_groundtruth.get("categories", [])}
        self.label_map = dict(label_map) if label_map else None
        self.reset()

    def reset(self) -> None:
        """Forgets all detections and batch ground truth (for the next epoch)."""
        self._detections: List[CocoRows] = []
        self._images: Dict[int, dict] = {}
        self._annotations: List[dict] = []
        self._evaluated_ids: List[int] = []
        # The precision table of the last `result()` (for precision-recall curves).
        self.last_precision: Optional[AccumulatedPrecision] = None

    # --- accumulation ----------------------------------------------------------
    def add_detections(self, image_ids, detections: CocoRows) -> None:
        """Adds the detections of the images `image_ids` (int64 `[B]`).

        `image_ids` lists every image of the batch, so images without detections count.
        `detections` holds int64 ids `[M]` and float rows `[M, 6]` (see `to_coco_rows`).
        """
        self._evaluated_ids.extend(int(i) for i in _numpy(image_ids).astype(np.int64).reshape(-1))
        ids = np.asarray(detections.image_ids)
        if ids.dtype != np.int64:  # A float id column would have rounded ids above 2^53.
            raise TypeError("Detection image ids must be int64, got %s" % ids.dtype)
        rows = np.asarray(detections.rows, np.float64).reshape(-1, 6)
        if len(rows):
            self._detections.append(CocoRows(ids.reshape(-1), rows))

    def add_groundtruth(self, image_ids, boxes, classes, is_crowd=None, area=None,
                        image_scales=None) -> None:
        """Adds padded ground truth of a batch (the InputPipeline's labels).

        Args:
          image_ids: [B] integers.
          boxes: [B, N, 4] (ymin, xmin, ymax, xmax) in network-input pixels (multiplied
            by image_scales) or original pixels (image_scales None).
          classes: [B, N] ids, <= 0 for padding. is_crowd: [B, N] bool. area: [B, N]
            original pixels^2 (0 or missing: the box area).
        """
        ids = _numpy(image_ids).astype(np.int64).reshape(-1)
        boxes = _numpy(boxes).astype(np.float64)
        classes = _numpy(classes).astype(np.int64)
        crowd = np.zeros_like(classes, bool) if is_crowd is None else _numpy(is_crowd).astype(bool)
        areas = np.zeros_like(boxes[..., 0]) if area is None else _numpy(area).astype(np.float64)
        if image_scales is not None:
            boxes = boxes * box_scale_factors(_numpy(image_scales)).numpy().astype(np.float64)
        for b, image_id in enumerate(ids):
            image_id = int(image_id)
            if image_id in self._images:
                continue  # Seen before (a repeated or padded batch); count it once.
            self._images[image_id] = {"id": image_id}
            for box, cls, iscrowd, ann_area in zip(boxes[b], classes[b], crowd[b], areas[b]):
                if cls <= 0:
                    continue
                ymin, xmin, ymax, xmax = box
                width, height = xmax - xmin, ymax - ymin
                self._annotations.append({
                    "id": len(self._annotations) + 1, "image_id": image_id,
                    "category_id": int(cls), "iscrowd": int(iscrowd),
                    "bbox": [float(xmin), float(ymin), float(width), float(height)],
                    "area": float(ann_area) if ann_area > 0 else float(width * height)})

    def add_batch(self, labels: Mapping, detections: BatchedDetections) -> None:
        """Adds one batch: detections (original pixels) and, without a file, its ground truth."""
        image_ids = labels["source_ids"]
        self.add_detections(image_ids, to_coco_rows(image_ids, detections))
        if self._file_groundtruth is None:
            self.add_groundtruth(image_ids, labels["groundtruth_boxes"],
                                 labels["groundtruth_classes"], labels.get("groundtruth_is_crowd"),
                                 labels.get("groundtruth_area"), labels["image_scales"])

    # --- scoring -----------------------------------------------------------------
    def groundtruth_dataset(self) -> dict:
        """The COCO ground-truth dict that will be scored (restricted to evaluated images)."""
        if self._file_groundtruth is not None:
            evaluated = set(self._evaluated_ids)
            # Images missing from the file would be dropped without a word (or fail
            # pycocotools when they have detections).
            check_ids_match(sorted(evaluated), self.annotation_file, "the evaluated images",
                            self._file_ids)
            data = copy.copy(self._file_groundtruth)
            data["images"] = [im for im in data["images"] if im["id"] in evaluated]
            data["annotations"] = [a for a in data["annotations"] if a["image_id"] in evaluated]
            return data
        categories = ([{"id": int(k), "name": str(v)} for k, v in sorted(self.label_map.items())]
                      if self.label_map else
                      [{"id": c, "name": str(c)} for c in sorted({a["category_id"]
                                                                   for a in self._annotations})])
        return {"images": list(self._images.values()), "annotations": list(self._annotations),
                "categories": categories}

    def detection_results(self, original_ids: bool = False) -> List[dict]:
        """Detections as a COCO results list (what test-dev submissions hold).

        Args:
          original_ids: give each image id as the annotation file spells it (e.g. the
            string "img_a.jpg"), so the list scores against that file with any COCO tool.
            Default: the int64 ids the evaluator scores with.
        """
        results = []
        for chunk in self._detections:
            for image_id, row in zip(chunk.image_ids.tolist(), chunk.rows.tolist()):
                if original_ids:
                    image_id = self._file_ids.get(image_id, image_id)
                results.append({"image_id": image_id, "bbox": row[:4], "score": row[4],
                                "category_id": int(row[5])})
        return results

    def result(self) -> Dict[str, float]:
        """Scores everything added since the last reset.

        Returns:
          The 12 COCO metrics by METRIC_NAMES, plus "AP_/<name>" per class when a
          label map is known. -1 marks a metric with no ground truth (as in pycocotools).
        """
        groundtruth = self.groundtruth_dataset()
        if not groundtruth["images"]:
            raise ValueError("Nothing to evaluate: no images were added")
        results = self.detection_results()
        if not results:
            # pycocotools cannot load an empty result list; one zero-score detection
            # of zero size changes no metric (every AP and AR stays 0, or -1 without gt).
            first = groundtruth["images"][0]["id"]
            category = groundtruth["categories"][0]["id"] if groundtruth["categories"] else 1
            results = [{"image_id": first, "bbox": [0.0, 0.0, 0.0, 0.0], "score": 0.0,
                        "category_id": category}]
        evaluation = self._run_backend(groundtruth, results)
        self.last_precision = self._accumulated_precision(evaluation)
        metrics = {name: float(value) for name, value in zip(METRIC_NAMES, evaluation.stats)}
        if self.label_map:
            metrics.update(self._per_class_ap(evaluation, groundtruth))
        return metrics

    def _run_backend(self, groundtruth: dict, results: List[dict]):
        quiet = contextlib.nullcontext() if self.verbose else contextlib.redirect_stdout(io.StringIO())
        with quiet:
            if self.backend == "faster_coco_eval":
                from faster_coco_eval import COCO, COCOeval_faster
                gt = COCO(groundtruth)
                evaluation = COCOeval_faster(gt, gt.loadRes(results), "bbox",
                                             print_function=print if self.verbose else _silent)
            else:
                from pycocotools.coco import COCO
                from pycocotools.cocoeval import COCOeval
                gt = COCO()
                gt.dataset = groundtruth
                gt.createIndex()
                evaluation = COCOeval(gt, gt.loadRes(results), "bbox")
            evaluation.evaluate()
            evaluation.accumulate()
            evaluation.summarize()
        return evaluation

    def _accumulated_precision(self, evaluation) -> AccumulatedPrecision:
        category_ids = [int(c) for c in evaluation.params.catIds]
        names = [str((self.label_map or {}).get(c, c)) for c in category_ids]
        return AccumulatedPrecision(
            precision=np.asarray(evaluation.eval["precision"], np.float64),
            iou_thresholds=np.asarray(evaluation.params.iouThrs, np.float64),
            recall_thresholds=np.asarray(evaluation.params.recThrs, np.float64),
            category_ids=category_ids, names=names)

    def _per_class_ap(self, evaluation, groundtruth) -> Dict[str, float]:
        """AP over IoU 0.5:0.95, all areas, 100 detections, for each category."""
        precision = np.asarray(evaluation.eval["precision"])  # [T, R, K, A, M]
        category_ids = list(evaluation.params.catIds)
        out = {}
        for k, category_id in enumerate(category_ids):
            values = precision[:, :, k, 0, -1]
            values = values[values > -1]
            name = self.label_map.get(category_id, str(category_id))
            out["AP_/%s" % name] = float(values.mean()) if values.size else -1.0
        return out


def load_groundtruth_file(annotation_file: str):
    """A COCO ground-truth JSON with every image id mapped to int64 (Python ints).

    Returns:
      (the COCO dict with int64 "id" / "image_id" values,
       {int64 id: the id as the file spells it}).
    Raises:
      ValueError naming the file and the id for duplicate or malformed ids.
    """
    data = read_coco_json(annotation_file)
    original_ids = coco_image_ids(data, annotation_file)
    data = dict(data)
    data["images"] = [dict(image, id=image_id_to_int64(image["id"])) for image in data["images"]]
    data["annotations"] = [dict(ann, image_id=image_id_to_int64(ann["image_id"]))
                           for ann in data["annotations"]]
    return data, original_ids


def _silent(*args, **kwargs):
    del args, kwargs


def gather_across_replicas(strategy, value):
    """Concatenates a per-replica tensor (or nest of tensors) from all replicas on axis 0.

    Use inside a distributed eval loop before `add_batch`, so every replica's
    images are scored.
    """
    import tensorflow as tf
    return tf.nest.map_structure(lambda v: strategy.gather(v, axis=0), value)
