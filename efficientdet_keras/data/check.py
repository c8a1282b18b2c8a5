"""The data check: what a dataset holds, as the model will see it, and how the anchors fit it.

    config = get_efficientdet_config("efficientdet-d0")
    scan = scan_dataset(TFRecordSource("tfrecord/train-*"), config)
    summary = summarize(scan, config, label_map={1: "cat"})
    print(format_report(summary))
    plot_box_sizes(scan, config, "box_sizes.png")

Records are read and checked exactly as training reads them (`data.decode.decode_and_clean`
on the source's raw examples): records training would skip are listed by name with the
reason, box repairs (dropped, clipped) are counted, and so are the records with more
objects than max_instances_per_image and the objects they lose. Boxes are measured in pixels
of the network input after the evaluation resize: the image is scaled by min(H/h, W/w),
keeping its aspect ratio, and padded at the bottom and right (`data.augmentation.augment.resize_crop_pad`).
"""

import dataclasses
from typing import Dict, List, Mapping, Optional, Tuple

import numpy as np
import tensorflow as tf
from absl import logging

from efficientdet_keras.detection.anchor_fit import (AnchorSettings, anchor_sizes, recommend_anchors,
                                          suggest_anchors)
from efficientdet_keras.data.decode import decode_and_clean
from efficientdet_keras.data.health import REPAIR_KINDS, DataHealth, Truncation
from efficientdet_keras.utils.drawing import class_name
from efficientdet_keras.utils.progress import ProgressBar

# Percentiles shown for box sizes and aspect ratios.
PERCENTILES = (0, 5, 25, 50, 75, 95, 100)
# Suggestions listed besides the best one.
SHOWN_CANDIDATES = 5
# Skipped records named in the text report (the JSON output lists all).
SHOWN_SKIPPED = 50
# Records counted per progress-bar step by `count_records`.
COUNT_CHUNK = 1024


def count_records(source, show_progress: bool = True) -> int:
    """The records of a source: its list's length, or for TFRecords the records read once
    (with a progress bar of records and records/s; --num_examples_per_epoch skips this)."""
    if hasattr(source, "records"):
        return len(source.records)
    if show_progress:
        print("Counting the records of %d TFRecord file(s)" % len(source.files))
    # Each record becomes a 1 at once, so the batches hold numbers, not image bytes.
    chunks = tf.data.TFRecordDataset(source.files).map(lambda _: 1).batch(COUNT_CHUNK)
    bar = ProgressBar(None, unit_name="record") if show_progress else None
    count = 0
    for chunk in chunks.map(tf.reduce_sum):
        count += int(chunk)
        if bar is not None:
            bar.update(count)
    if bar is not None:
        bar.finish()
    return count


@dataclasses.dataclass
class DatasetScan:
    """What reading a dataset found.

    Attributes:
      records: how many records were read (usable and skipped).
      boxes_per_image: int [I] boxes kept per usable image.
      classes: int [B] class id of every kept box.
      is_crowd: bool [B].
      input_boxes: float32 [B, 4] [ymin, xmin, ymax, xmax] in network-input pixels.
      skipped: [(record name, "<kind>: <detail>")] of the records training would skip.
      repairs: {kind: count} of the box repairs decoding made (non-zero kinds only).
      source_problems: {kind: count} of entries the source left out before decoding
        (COCO JSON entries without an image file, ...; named in the log).
      truncation: the records with more objects than max_instances_per_image.
    """
    records: int
    boxes_per_image: np.ndarray
    classes: np.ndarray
    is_crowd: np.ndarray
    input_boxes: np.ndarray
    skipped: List[Tuple[str, str]]
    repairs: Dict[str, int]
    source_problems: Dict[str, int]
    truncation: Truncation = dataclasses.field(default_factory=Truncation)


def letterboxed_boxes(boxes: np.ndarray, height: int, width: int,
                      image_size: Tuple[int, int]) -> np.ndarray:
    """Normalised boxes [N, 4] of an h x w image in pixels of the network input, where the
    evaluation resize puts them (the same rounding as `augment.resize_crop_pad`)."""
    scale = min(image_size[0] / height, image_size[1] / width)
    scaled_h = max(np.round(height * scale), 1.0)
    scaled_w = max(np.round(width * scale), 1.0)
    return np.asarray(boxes, np.float32).reshape(-1, 4) * np.float32(
        [scaled_h, scaled_w, scaled_h, scaled_w])


def _checked_examples(source, config, health: DataHealth) -> tf.data.Dataset:
    """The source's records, decoded and checked as training does, without the pixels."""
    def check(raw):
        example = decode_and_clean(raw, config.num_classes, config.max_instances_per_image,
                                   health)
        shape = tf.shape(example["image"])
        return {"ok": example["ok"], "record": example["record"],
                "skip_reason": example["skip_reason"], "height": shape[0], "width": shape[1],
                "boxes": example["boxes"], "classes": example["classes"],
                "is_crowd": example["is_crowd"]}

    raw = source.raw_dataset(None, shuffle=False, seed=None)
    return raw.map(check, num_parallel_calls=tf.data.AUTOTUNE,
                   deterministic=True).prefetch(tf.data.AUTOTUNE)


def scan_dataset(source, config, max_records: Optional[int] = None,
                 show_progress: bool = True) -> DatasetScan:
    """Reads every record of a source (TFRecordSource, CocoSource, RecordsSource).

    Args:
      config: num_classes, max_instances_per_image and image_size are used.
      max_records: read at most this many records (all when None or 0).
      show_progress: a progress bar of records read and records per second.
    """
    health = DataHealth()
    dataset = _checked_examples(source, config, health)
    total = len(source.records) if hasattr(source, "records") else None
    if max_records:
        dataset = dataset.take(max_records)
        total = min(total, max_records) if total is not None else max_records
    bar = ProgressBar(total, unit_name="record") if show_progress else None
    image_size = tuple(config.image_size)
    counts, classes, crowd, boxes, skipped = [], [], [], [], []
    records = 0
    for example in dataset.as_numpy_iterator():
        records += 1
        if example["ok"]:
            height, width = int(example["height"]), int(example["width"])
            counts.append(len(example["classes"]))
            classes.append(example["classes"])
            crowd.append(example["is_crowd"])
            boxes.append(letterboxed_boxes(example["boxes"], height, width, image_size))
        else:
            skipped.append((example["record"].decode(errors="replace"),
                            example["skip_reason"].decode(errors="replace")))
        if bar is not None:
            bar.update(records)
    if bar is not None:
        bar.finish()
    repairs = {kind: n for kind, n in health.summary().items() if kind in REPAIR_KINDS and n}
    return DatasetScan(
        records=records, boxes_per_image=np.array(counts, np.int64),
        classes=np.concatenate(classes + [np.zeros([0], np.int64)]).astype(np.int64),
        is_crowd=np.concatenate(crowd + [np.zeros([0], bool)]).astype(bool),
        input_boxes=np.concatenate(boxes + [np.zeros([0, 4], np.float32)]),
        skipped=skipped, repairs=repairs,
        source_problems=dict(getattr(source, "skipped", {}) or {}),
        truncation=health.truncation())


def matching_boxes(scan: DatasetScan, config) -> np.ndarray:
    """The boxes [B', 4] the labeler matches to anchors: crowd boxes are left out when
    skip_crowd_during_training makes them ignore regions."""
    if config.get("skip_crowd_during_training", True):
        return scan.input_boxes[~scan.is_crowd]
    return scan.input_boxes


def _percentiles(values: np.ndarray) -> Dict[str, float]:
    if len(values) == 0:
        return {}
    return {"p%d" % p: float(v) for p, v in zip(PERCENTILES, np.percentile(values, PERCENTILES))}


def summarize(scan: DatasetScan, config, label_map: Optional[Mapping[int, str]] = None) -> dict:
    """The numbers of the report, as a JSON-ready dict.

    Keys: records, images, skipped [{record, reason}], repairs, source_problems,
    over_max_instances {records, objects_dropped, most_objects, max_instances}, boxes,
    crowd_boxes, boxes_per_image {mean, median, max}, images_without_boxes, classes
    [{id, name, boxes, images}], box_size_px and aspect_ratio {p0 ... p100} (sqrt(w*h)
    and w/h at the input size), input_size, anchors {current, unmatched, matched_boxes,
    candidates [{anchor_scale, aspect_ratios, unmatched, hparams}], suggestion (the
    settings `anchor_fit.recommend_anchors` picks, or None to keep the current ones)}.
    """
    per_image = scan.boxes_per_image
    image_of_box = np.repeat(np.arange(len(per_image)), per_image)
    classes = []
    for class_id in np.unique(scan.classes):
        mask = scan.classes == class_id
        classes.append({"id": int(class_id), "name": class_name(class_id, label_map),
                        "boxes": int(mask.sum()), "images": int(len(np.unique(image_of_box[mask])))})
    heights = scan.input_boxes[:, 2] - scan.input_boxes[:, 0]
    widths = scan.input_boxes[:, 3] - scan.input_boxes[:, 1]
    matched = matching_boxes(scan, config)
    current = AnchorSettings.from_config(config)
    ranked = suggest_anchors(matched, current)
    current_unmatched = next(c.unmatched for c in ranked if c.settings == current)
    recommended = recommend_anchors(ranked, current)
    return {
        "records": scan.records, "images": int(len(per_image)),
        "skipped": [{"record": name, "reason": reason} for name, reason in scan.skipped],
        "repairs": dict(scan.repairs), "source_problems": dict(scan.source_problems),
        "over_max_instances": dataclasses.asdict(scan.truncation),
        "boxes": int(per_image.sum()), "crowd_boxes": int(scan.is_crowd.sum()),
        "boxes_per_image": ({"mean": float(per_image.mean()), "median": float(np.median(per_image)),
                             "max": int(per_image.max())} if len(per_image) else {}),
        "images_without_boxes": int(np.sum(per_image == 0)),
        "classes": classes,
        "input_size": list(current.image_size),
        "box_size_px": _percentiles(np.sqrt(heights * widths)),
        "aspect_ratio": _percentiles(widths / np.maximum(heights, 1e-6)),
        "anchors": {
            "current": _candidate_dict(current, current_unmatched),
            "matched_boxes": int(len(matched)),
            "candidates": [_candidate_dict(c.settings, c.unmatched)
                           for c in ranked[:SHOWN_CANDIDATES]],
            "suggestion": (None if recommended is None
                           else _candidate_dict(recommended.settings, recommended.unmatched)),
        },
    }


def _candidate_dict(settings: AnchorSettings, unmatched: float) -> dict:
    return {"anchor_scale": settings.anchor_scale, "aspect_ratios": list(settings.aspect_ratios),
            "unmatched": unmatched, "hparams": settings.hparams()}


def _percentile_row(title: str, values: Dict[str, float]) -> str:
    cells = "".join("%9.2f" % values["p%d" % p] for p in PERCENTILES) if values else "  (none)"
    return "  %-22s%s" % (title, cells)


def format_report(summary: dict) -> str:
    """The summary as the text table the tool prints."""
    lines = ["Records read            %d" % summary["records"],
             "Usable images           %d" % summary["images"],
             "Skipped records         %d" % len(summary["skipped"])]
    for item in summary["skipped"][:SHOWN_SKIPPED]:
        lines.append("  %s: %s" % (item["record"], item["reason"]))
    if len(summary["skipped"]) > SHOWN_SKIPPED:
        lines.append("  ... and %d more (--output_json lists all)"
                     % (len(summary["skipped"]) - SHOWN_SKIPPED))
    for title, counts in (("Entries left out", summary["source_problems"]),
                          ("Box repairs", summary["repairs"])):
        if counts:
            lines.append("%-24s%s" % (title, ", ".join("%s=%d" % kv for kv in counts.items())))
    per_image = summary["boxes_per_image"]
    lines.append("Boxes                   %d (%d crowd)" % (summary["boxes"], summary["crowd_boxes"]))
    if per_image:
        lines.append("Boxes per image         mean %.2f, median %g, max %d; %d images without boxes"
                     % (per_image["mean"], per_image["median"], per_image["max"],
                        summary["images_without_boxes"]))
    too_many = Truncation(**summary["over_max_instances"]).describe()
    if too_many:
        lines.append("Too many objects        %s" % too_many)
    lines.append("")
    lines.append("  %-6s %-24s %9s %9s" % ("class", "name", "boxes", "images"))
    for item in summary["classes"]:
        lines.append("  %-6d %-24s %9d %9d" % (item["id"], item["name"][:24], item["boxes"],
                                             item["images"]))
    lines.append("")
    lines.append("At the %dx%d input (aspect-preserving resize):" % tuple(summary["input_size"]))
    lines.append("  %-22s%s" % ("percentile", "".join("%9s" % ("p%d" % p) for p in PERCENTILES)))
    lines.append(_percentile_row("box size sqrt(w*h) px", summary["box_size_px"]))
    lines.append(_percentile_row("aspect ratio w/h", summary["aspect_ratio"]))
    lines.extend(_anchor_lines(summary["anchors"]))
    return "\n".join(lines)


def _anchor_lines(anchors: dict) -> List[str]:
    current = anchors["current"]
    lines = ["", "Anchors: %s leaves %.1f%% of %d boxes without an anchor at IoU >= 0.5"
             % (current["hparams"], 100 * current["unmatched"], anchors["matched_boxes"]),
             "  %-50s %s" % ("best of the search grid", "unmatched")]
    lines.extend("  %-50s %8.1f%%" % (c["hparams"], 100 * c["unmatched"])
                 for c in anchors["candidates"])
    suggestion = anchors["suggestion"]
    if suggestion is None:
        lines.append("The current anchors match enough of the boxes (or the grid does no "
                     "better); keep them.")
    else:
        lines.append("Suggested: --hparams=%s (unmatched %.1f%% instead of %.1f%%)"
                     % (suggestion["hparams"], 100 * suggestion["unmatched"],
                        100 * current["unmatched"]))
        if len(suggestion["aspect_ratios"]) != len(current["aspect_ratios"]):
            lines.append("  (another number of aspect ratios changes the head sizes: "
                         "pretrained class and box heads would not load)")
    return lines


def plot_box_sizes(scan: DatasetScan, config, path: str) -> Optional[str]:
    """Writes a PNG: the histogram of box sizes against the anchor sizes of each level, and
    box width against height with the anchor shapes. Returns `path`, or None (one logged
    note) when matplotlib (the `reports` extra) is not installed."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        logging.warning("matplotlib is not installed: the box size chart %s is skipped (pip "
                        "install 'efficientdet_keras[reports]' to get it)", path)
        return None
    from efficientdet_keras.utils.figures import new_figure, save_figure
    boxes = matching_boxes(scan, config)
    heights, widths = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
    anchors = anchor_sizes(AnchorSettings.from_config(config))
    figure = new_figure(panels=2)
    size_axes, shape_axes = figure.subplots(1, 2)
    _draw_size_histogram(size_axes, np.sqrt(heights * widths), anchors)
    shape_axes.scatter(widths, heights, s=4, alpha=0.4, label="boxes")
    shape_axes.scatter([w for _, _, w in anchors], [h for _, h, _ in anchors], marker="x",
                       color="red", label="anchors")
    shape_axes.set(xscale="log", yscale="log", xlabel="box width (input px)",
                   ylabel="box height (input px)", title="box shapes and anchor shapes")
    shape_axes.legend(loc="upper left", fontsize=8)
    return save_figure(figure, path)


def _draw_size_histogram(axes, sizes: np.ndarray, anchors) -> None:
    """sqrt(w*h) histogram on log bins, with a dashed line per anchor size (coloured by level)."""
    anchor_sizes_px = [np.sqrt(h * w) for _, h, w in anchors]
    everything = list(sizes) + anchor_sizes_px
    bins = np.geomspace(max(min(everything), 0.5), max(everything) * 1.05, 40)
    axes.hist(sizes, bins=bins, color="tab:blue", alpha=0.7)
    levels = sorted({level for level, _, _ in anchors})
    for (level, _, _), size in zip(anchors, anchor_sizes_px):
        axes.axvline(size, color="C%d" % (levels.index(level) % 9 + 1), linestyle="--",
                     linewidth=0.8)
    for index, level in enumerate(levels):  # One legend entry per level.
        axes.plot([], [], color="C%d" % (index % 9 + 1), linestyle="--", label="anchors P%d" % level)
    axes.set(xscale="log", xlabel="box size sqrt(w*h) (input px)", ylabel="boxes",
             title="box sizes and anchor sizes")
    axes.legend(fontsize=8)
