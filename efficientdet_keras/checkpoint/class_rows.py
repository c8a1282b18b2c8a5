"""A checkpoint's class-prediction rows carried over to a model's classes by name.

The class head's last convolution (`class-predict`) has one output channel per anchor and class,
anchor-major: channel `a * num_classes + (id - 1)`. When the checkpoint and the model both know
their class names, each model class whose name the checkpoint knows starts from the
checkpoint's channels of that class, at every anchor; the other classes start near the
focal-loss prior (the prior bias and a small random kernel: their logit is close to the prior's
at every anchor). Everything else in the head is the same for every class and loads as usual.
A class head of another class count that is not carried by name starts near the prior too.

Names match when they are equal ignoring case, spaces, "_" and "-" ("Traffic_Light" is COCO's
"traffic light"), or when `CLASS_NAME_ALIASES` puts them in one group.
"""

import dataclasses
import json
from typing import Dict, Mapping, Optional

import numpy as np

# Other names of the same classes in the datasets users start from: Pascal VOC's spellings of
# COCO's classes first, then common variants. The first name of each group is COCO's.
CLASS_NAME_ALIASES = (
    ("airplane", "aeroplane"),
    ("motorcycle", "motorbike"),
    ("tv", "tvmonitor", "television"),
    ("couch", "sofa"),
    ("person", "people", "pedestrian"),
    ("bicycle", "bike"),
    ("cell phone", "mobile phone", "cellphone"),
)

# The variables whose last axis is the anchor-major class channels.
CLASS_PREDICT_VARIABLES = ("class_net/class-predict/bias", "class_net/class-predict/kernel",
                           "class_net/class-predict/pointwise_kernel")
# The spread of a new class's kernel: RetinaNet's initialisation of a class head's last layer
# (and the plain-convolution head's own), small enough that a trained network's features give
# logits near the bias, large enough that the gradient reaches the layers below.
NEW_CLASS_KERNEL_STDDEV = 0.01


def _normalized(name: str) -> str:
    return "".join(ch for ch in str(name).lower() if ch not in " _-\t")


_ALIAS_OF = {_normalized(alias): _normalized(group[0])
             for group in CLASS_NAME_ALIASES for alias in group}


@dataclasses.dataclass
class ClassRows:
    """Which model class starts from which checkpoint class ({model id: checkpoint id}), with
    both sides' names."""
    ids: Dict[int, int]
    model_names: Dict[int, str]
    checkpoint_names: Dict[int, str]

    def describe(self, source: str) -> str:
        """One line: the classes carried over from `source`, and the new ones."""
        carried = ["%s" % self.model_names[m] if _normalized(self.model_names[m]) ==
                   _normalized(self.checkpoint_names[k]) else
                   "%s (its %s)" % (self.model_names[m], self.checkpoint_names[k])
                   for m, k in sorted(self.ids.items())]
        new = [self.model_names[m] for m in sorted(self.model_names) if m not in self.ids]
        if not carried:
            return ("Class head: none of the %d classes is one of %s's by name; all start new"
                    % (len(self.model_names), source))
        return "Class head: %d of %d classes start from %s's rows by name: %s%s" % (
            len(carried), len(self.model_names), source, ", ".join(carried),
            "; new: %s" % ", ".join(new) if new else "")


def match_class_names(model_names: Mapping[int, str],
                      checkpoint_names: Mapping[int, str]) -> Dict[int, int]:
    """{model id: checkpoint id} for each model class the checkpoint knows: by the same name
    first, then by an alias."""
    exact, aliased = {}, {}
    for k in sorted(checkpoint_names):
        key = _normalized(checkpoint_names[k])
        exact.setdefault(key, k)
        aliased.setdefault(_ALIAS_OF.get(key, key), k)
    rows = {}
    for m, name in model_names.items():
        key = _normalized(name)
        found = exact.get(key, aliased.get(_ALIAS_OF.get(key, key)))
        if found is not None:
            rows[int(m)] = int(found)
    return rows


def checkpoint_class_names(ckpt: str, prefix: str) -> Optional[Dict[int, str]]:
    """{class id: name} of what a checkpoint was trained on, None when it does not say.

    ckpt: what the user gave (a released name is looked up in the registry); prefix: the
    resolved checkpoint prefix, whose run folder may hold config.yaml (its label_map) or
    classes.json (a run's, or an export's copy of it).
    """
    from efficientdet_keras.checkpoint.paths import run_file_beside
    from efficientdet_keras.checkpoint.released import find_released
    from efficientdet_keras.config.label_maps import label_names
    entry = find_released(ckpt)
    if entry is not None:
        return label_names(entry.label_map)
    config_file = run_file_beside(prefix, "config.yaml")
    if config_file:
        from efficientdet_keras.config.overrides import read_yaml
        names = label_names((read_yaml(config_file) or {}).get("label_map"))
        if names:
            return names
    classes_file = run_file_beside(prefix, "classes.json")
    if classes_file:
        with open(classes_file) as f:
            classes = json.load(f).get("classes") or []
        return {int(c["id"]): str(c["name"]) for c in classes} or None
    return None


def rows_fit(model_shape, ckpt_shape, rows: Mapping[int, int], num_anchors: int) -> bool:
    """Whether a checkpoint's class-predict variable can give `rows` to the model's: the same
    shape but the last axis, num_anchors x a class count holding every checkpoint id."""
    model_shape, ckpt_shape = list(model_shape), list(ckpt_shape)
    return (model_shape[:-1] == ckpt_shape[:-1] and not model_shape[-1] % num_anchors
            and not ckpt_shape[-1] % num_anchors
            and max(rows.values(), default=0) <= ckpt_shape[-1] // num_anchors)


def class_channels(checkpoint_value: Optional[np.ndarray], initial_value: np.ndarray,
                   rows: Mapping[int, int], num_anchors: int, kernel: bool) -> np.ndarray:
    """The model's class-predict value: each carried class's channels at every anchor taken
    from the checkpoint's (None: no class is carried), the other classes near the prior.

    Near the prior means that the class's logit is close to the bias at every anchor: a
    bias's channels of the new classes keep the initial value (the focal-loss prior), a
    kernel's keep their random initial values scaled to NEW_CLASS_KERNEL_STDDEV. The
    initializer's own scale gives logits far from the prior on the features of a trained
    network, and a validation loss in the millions; a zero kernel starts at the prior but
    passes no gradient to the layers below until it has moved away from zero.

    Raises:
      ValueError when either last axis is not num_anchors x a class count, or a checkpoint id
      is beyond the checkpoint's classes.
    """
    model_channels = initial_value.shape[-1]
    value = np.array(initial_value, copy=True)
    if model_channels % num_anchors:
        raise ValueError("class-predict of %s channels does not hold %d anchors"
                         % (initial_value.shape, num_anchors))
    model_classes = model_channels // num_anchors
    carried = np.zeros([model_channels], bool)
    if checkpoint_value is not None:
        ckpt_channels = checkpoint_value.shape[-1]
        if ckpt_channels % num_anchors or initial_value.shape[:-1] != checkpoint_value.shape[:-1]:
            raise ValueError("class-predict of %s channels cannot take rows of one of %s "
                             "channels with %d anchors" % (initial_value.shape,
                                                           checkpoint_value.shape, num_anchors))
        ckpt_classes = ckpt_channels // num_anchors
        if rows and max(rows.values()) > ckpt_classes:
            raise ValueError("checkpoint class id %d is beyond its %d classes"
                             % (max(rows.values()), ckpt_classes))
        for model_id, ckpt_id in rows.items():
            model_index = np.arange(num_anchors) * model_classes + model_id - 1
            ckpt_index = np.arange(num_anchors) * ckpt_classes + ckpt_id - 1
            value[..., model_index] = checkpoint_value[..., ckpt_index]
            carried[model_index] = True
    if kernel and not carried.all():
        new = value[..., ~carried]
        spread = float(np.std(new))
        value[..., ~carried] = new * (NEW_CLASS_KERNEL_STDDEV / spread) if spread > 0 else 0.0
    return value


def is_class_predict(name: str) -> bool:
    return any(name.endswith(suffix) for suffix in CLASS_PREDICT_VARIABLES)


def is_class_predict_kernel(name: str) -> bool:
    return is_class_predict(name) and not name.endswith("/bias")


def plan_class_rows(ckpt: str, model_label_map, num_classes: int) -> Optional[ClassRows]:
    """The classes a model (its config's label_map and num_classes) carries over from a
    checkpoint by name; None when either side has no names, or when the checkpoint numbers the
    model's named classes as the model does with as many classes (its head then loads whole).
    """
    from efficientdet_keras.checkpoint.download import checkpoint_location
    from efficientdet_keras.checkpoint.paths import resolve_checkpoint_path
    from efficientdet_keras.config.label_maps import label_names
    model_names = label_names(model_label_map)
    if not model_names:
        return None
    checkpoint_names = checkpoint_class_names(
        ckpt, resolve_checkpoint_path(checkpoint_location(ckpt)))
    if not checkpoint_names:
        return None
    ids = match_class_names(model_names, checkpoint_names)
    same_numbering = len(ids) == len(model_names) and all(m == k for m, k in ids.items())
    if same_numbering and num_classes == max(checkpoint_names):
        return None
    return ClassRows(ids, model_names, checkpoint_names)
