"""Where a TF-Hub feature module comes from, and whether what came is one.

    path = module_folder(handle)          # downloaded into the hub's or kagglehub's cache
    check_feature_contract(layer(probe), config, handle)

Handles read:
  - a local folder or a file:// URL;
  - an http(s) URL, which tensorflow_hub downloads as a compressed module into
    $TFHUB_CACHE_DIR: a tfhub.dev handle (tfhub.dev answers with a redirect to Kaggle
    Models), a Kaggle Models page URL, or an archive download URL;
  - a Kaggle Models handle, owner/model/framework/variation[/version]
    (tensorflow/efficientdet/tensorFlow2/lite0-feature-vector/1), the form Kaggle's pages
    show, which kagglehub (the `kaggle` extra) downloads into its own cache ($KAGGLEHUB_CACHE)
    with its credentials; a versioned handle already there is not fetched again.
"""

import math
import os
import re
from typing import Sequence

_KAGGLE_HANDLE = re.compile(r"^[\w.-]+/[\w.-]+/[\w.-]+/[\w.-]+(/\d+)?$")
# What a finished detector returns: the keys of TF Object Detection API and of this
# package's serving signatures.
_DETECTION_KEYS = ("detection_boxes", "detection_scores", "num_detections", "detections")


def is_kaggle_handle(handle: str) -> bool:
    """owner/model/framework/variation[/version], with no scheme and no such local path."""
    return bool(_KAGGLE_HANDLE.match(handle)) and not os.path.exists(handle)


def module_folder(handle: str) -> str:
    """The local folder of the module `handle` names, downloading it when needed.

    Raises:
      ValueError naming the handle: kagglehub missing for a Kaggle handle, or the download
      or unpacking failing (tensorflow_hub's or kagglehub's first line).
    """
    if handle.startswith("file://"):
        return handle[len("file://"):]
    if is_kaggle_handle(handle):
        return _kaggle_folder(handle)
    import tensorflow_hub as hub
    try:
        return hub.resolve(handle)
    except Exception as e:  # Hub raises many types (OSError, ValueError, URLError).
        raise ValueError("Cannot load TF-Hub module %s: %s" % (handle, _first_line(e))) from None


def _kaggle_folder(handle: str) -> str:
    try:
        import kagglehub
    except ImportError:
        raise ValueError(
            "%s is a Kaggle Models handle (owner/model/framework/variation/version), which "
            "kagglehub downloads: pip install 'efficientdet_keras[kaggle]', or give the "
            "module's folder or http URL" % handle) from None
    try:
        return kagglehub.model_download(handle)
    except Exception as e:  # kagglehub raises requests', its own and ValueError types.
        raise ValueError("Cannot load TF-Hub module %s: no such folder, and as a Kaggle "
                         "Models handle kagglehub says: %s" % (handle, _first_line(e))) from None


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def not_callable_reason(folder: str, handle: str, config) -> str:
    """The line for a SavedModel that hub.KerasLayer cannot call: a finished detector (its
    signatures return detections), or another kind of model, named by its signatures."""
    import tensorflow as tf
    try:
        signatures = tf.saved_model.load(folder).signatures
        outputs = {key for function in signatures.values()
                   for key in function.structured_outputs}
    except Exception:  # Unreadable beyond what the hub said.
        signatures, outputs = {}, set()
    if outputs & set(_DETECTION_KEYS):
        return _detector_line(handle, config)
    return ("%s is not a feature module: it has no callable function, only the signatures %s; "
            "a feature module takes images and returns per-level class and box features"
            % (handle, ", ".join(sorted(signatures)) or "(none)"))


def _detector_line(handle: str, config) -> str:
    return ("%s is a detector, not features: it returns finished detections, which cannot be "
            "fine-tuned; fine-tune the released checkpoint --pretrained_ckpt=%s instead"
            % (handle, config.get("name") or "efficientdet-d0"))


def check_feature_contract(features, config, handle: str, image_hw: Sequence[int]) -> None:
    """Raises ValueError, in one line naming the handle and what it returned, unless
    `features` (the module's answer to one image of `image_hw`) are two lists of one
    [1, H_l, W_l, C] map per level of `config` (min_level..max_level, H_l = H / 2^l), the
    class and box maps of a level alike, with config.fpn_num_filters channels."""
    if isinstance(features, dict) and set(features) & set(_DETECTION_KEYS):
        raise ValueError(_detector_line(handle, config))
    levels = list(range(config.min_level, config.max_level + 1))
    expected = "two lists of %d feature maps (levels %d-%d)" % (len(levels), levels[0], levels[-1])
    if not (isinstance(features, (tuple, list)) and len(features) == 2 and
            all(isinstance(f, (tuple, list)) for f in features)):
        if isinstance(features, (tuple, list)) and len(features) == 4 and all(
                hasattr(t, "shape") and len(t.shape) <= 3 for t in features):
            raise ValueError(_detector_line(handle, config))  # boxes, scores, classes, count
        raise ValueError("TF-Hub module %s must return (class_features, box_features), %s; "
                         "got %s" % (handle, expected, _shapes(features)))
    class_maps, box_maps = (list(f) for f in features)
    found = _levels_found(class_maps, image_hw)
    wanted = [(level, config.fpn_num_filters) for level in levels]
    same_sides = [tuple(a.shape) == tuple(b.shape) for a, b in zip(class_maps, box_maps)]
    if found == wanted and len(box_maps) == len(class_maps) and all(same_sides):
        return
    raise ValueError(
        "TF-Hub module %s returns %s for a %dx%d image; %s needs levels %d-%d of %d channels "
        "(fpn_num_filters)%s" % (
            handle, _describe_levels(found, class_maps, box_maps), image_hw[0], image_hw[1],
            config.get("name") or "this model", levels[0], levels[-1], config.fpn_num_filters,
            _models_like(found)))


def _shapes(value) -> str:
    """The structure of a module's answer, tensors as their shapes."""
    if isinstance(value, dict):
        return "{%s}" % ", ".join("%r: %s" % (k, _shapes(v)) for k, v in sorted(value.items()))
    if isinstance(value, (tuple, list)):
        return "[%s]" % ", ".join(_shapes(v) for v in value)
    shape = getattr(value, "shape", None)
    return str(tuple(shape)) if shape is not None else repr(value)


def _levels_found(maps, image_hw):
    """[(level, channels)] of feature maps: the first map's level from its stride, each next
    one level up, its side ceil(H / 2^level) as the model's resampling gives; None for a map
    that is not [1, H, W, C] or whose side does not fit its level."""
    found, level = [], None
    for feature_map in maps:
        shape = tuple(getattr(feature_map, "shape", ()))
        if len(shape) != 4 or not shape[1]:
            found.append(None)
            continue
        level = round(math.log2(max(image_hw[0] / shape[1], 1))) if level is None else level + 1
        fits = shape[1] == math.ceil(image_hw[0] / 2 ** level)
        found.append((level, int(shape[3])) if fits else None)
    return found


def _describe_levels(found, class_maps, box_maps) -> str:
    if None in found or not found:
        return "maps of shapes %s and %s" % ([tuple(m.shape) for m in class_maps],
                                             [tuple(m.shape) for m in box_maps])
    channels = sorted({c for _, c in found})
    return "levels %d-%d of %s channels" % (found[0][0], found[-1][0],
                                            "/".join(map(str, channels)))


def _models_like(found) -> str:
    """', a module of efficientdet-lite2? Give that --model_name' when models of the family
    have those levels and channels; '' otherwise."""
    if not found or None in found or len({c for _, c in found}) != 1:
        return ""
    from efficientdet_keras.config import MODEL_NAMES, get_efficientdet_config
    like = []
    for name in MODEL_NAMES:
        config = get_efficientdet_config(name)
        if (config.min_level, config.max_level, config.fpn_num_filters) == (
                found[0][0], found[-1][0], found[0][1]):
            like.append(name)
    return ": a module of %s? Give that --model_name" % " or ".join(like) if like else ""
