"""Restoring name-based checkpoints: released ones and the package's own.

The package writes its checkpoints in the released layout (checkpoint/save.py), so both load
through `restore_ckpt`, which matches variables by name and shape and reports what it skipped.
"""

import collections
import dataclasses
import re
from typing import List, Mapping, Optional, Tuple

import tensorflow as tf
from absl import logging

from efficientdet_keras.checkpoint.architecture import Architecture, infer_architecture
from efficientdet_keras.checkpoint.class_rows import (ClassRows, class_channels, is_class_predict,
                                                      is_class_predict_kernel, rows_fit)
from efficientdet_keras.checkpoint.download import checkpoint_location
from efficientdet_keras.checkpoint.names import EMA_SUFFIX, variable_name, wrapper_state_variables
from efficientdet_keras.checkpoint.paths import resolve_checkpoint_path
from efficientdet_keras.checkpoint.save import ensure_built

_OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
_CLASS_BIAS = "class_net/class-predict/bias"


@dataclasses.dataclass
class RestoreReport:
    """What `restore_ckpt` did, variable name by variable name."""
    path: str
    loaded: List[str] = dataclasses.field(default_factory=list)
    loaded_from_ema: List[str] = dataclasses.field(default_factory=list)
    missing: List[str] = dataclasses.field(default_factory=list)
    mismatched: List[str] = dataclasses.field(default_factory=list)  # "name: model vs ckpt shape"
    excluded: List[str] = dataclasses.field(default_factory=list)
    model_variables: int = 0
    backbone_only: bool = False  # The checkpoint holds an EfficientNet backbone and nothing else.
    class_rows: Optional[ClassRows] = None  # The classes carried over by name, if any were.

    @property
    def skipped(self) -> List[str]:
        return self.missing + self.mismatched + self.excluded

    @property
    def num_loaded(self) -> int:
        return len(self.loaded) + len(self.loaded_from_ema)


def restore_ckpt(model, ckpt_path: str, use_ema: Optional[bool] = None,
                 skip_mismatch: bool = True, exclude: Optional[str] = None,
                 allow_partial: bool = False,
                 class_rows: Optional[ClassRows] = None) -> RestoreReport:
    """Loads a checkpoint into `model` by variable name.

    Args:
      model: an EfficientDetNet (built here if it is not built yet).
      ckpt_path: a checkpoint prefix, its .index file, a directory (latest checkpoint), or
        the name of a released checkpoint ("efficientdet-d0", "efficientnet-b0"; see
        checkpoint/released.py), downloaded into the cache on first use. A path that
        exists wins over a name.
      use_ema: None (default) loads `<name>/ExponentialMovingAverage` values
        wherever the checkpoint has them (the released AP was measured with
        them), whatever the model's own moving_average_decay; False loads the
        plain values; True asks for EMA values and warns when there are none.
      skip_mismatch: skip variables that are missing from the checkpoint or have
        another shape (a new number of classes), listing them in one log line.
        False makes them an error.
      exclude: a regex; variables whose names match it are not loaded (for
        example r".*/class-predict/.*" to keep new class heads).
      allow_partial: accept a checkpoint of another model, one that fills less
        than half of the model's variables or has another backbone (normally
        an error naming the model the checkpoint looks like). A checkpoint
        holding only an EfficientNet backbone needs no flag: it must fill the
        backbone and the rest keeps its initial values.
      class_rows: which model class starts from which checkpoint class (ClassRows); given,
        the class-prediction layer takes the checkpoint's channels of those classes (at every
        anchor) whatever the two class counts, and starts the other classes near the
        focal-loss prior (checkpoint/class_rows.py). None: it loads whole when its shape fits;
        a class kernel of another class count is skipped and scaled down as a new class's, so
        that every class starts near the prior.

    Returns:
      A RestoreReport listing what was loaded and skipped.

    Raises:
      FileNotFoundError: no checkpoint at `ckpt_path`.
      ValueError: the checkpoint shares no variable with the model; it fills
        less than half of them or has another backbone (unless allow_partial);
        it is an EfficientNet classification checkpoint that cannot fill the
        backbone (unless allow_partial); or
        `skip_mismatch=False` and some variables could not be loaded. The model
        is left unchanged.
    """
    path = resolve_checkpoint_path(checkpoint_location(ckpt_path))
    ensure_built(model)
    reader = tf.train.load_checkpoint(path)
    ckpt_shapes = reader.get_variable_to_shape_map()
    if _OBJECT_GRAPH_KEY in ckpt_shapes and not any(
            variable_name(v) in ckpt_shapes for v in model.variables):
        return _restore_object_based(model, path)
    use_ema = _resolve_use_ema(use_ema, ckpt_shapes, path)
    ckpt_arch = infer_architecture(ckpt_shapes)
    report, assignments = _plan_restore(model, ckpt_shapes, path, use_ema, exclude,
                                        class_rows.ids if class_rows is not None else None)
    report.backbone_only = ckpt_arch.backbone_only
    if class_rows is not None and any(rows is not None for _, _, rows in assignments):
        report.class_rows = class_rows
    _check_plan(model, report, ckpt_arch, ckpt_shapes, skip_mismatch, allow_partial)
    # Assign only once the whole plan is accepted: an error leaves the model as it was.
    for variable, key, rows in assignments:
        value = reader.get_tensor(key) if key is not None else None
        if rows is not None:
            value = class_channels(value, variable.numpy(), rows, _anchors_per_location(model),
                                   kernel=is_class_predict_kernel(variable_name(variable)))
        variable.assign(value)
    _log_report(model, report, ckpt_arch, ckpt_shapes)
    return report


def _resolve_use_ema(use_ema: Optional[bool], ckpt_shapes: Mapping[str, list], path: str) -> bool:
    """None means "EMA values wherever the checkpoint has them"."""
    has_ema = any(key.endswith(EMA_SUFFIX) for key in ckpt_shapes)
    if use_ema and not has_ema:
        logging.warning("Checkpoint %s holds no ExponentialMovingAverage values; "
                        "loading the plain weights instead.", path)
    return has_ema if use_ema is None else bool(use_ema)


def _plan_restore(model, ckpt_shapes: Mapping[str, list], path: str, use_ema: bool,
                  exclude: Optional[str], class_rows: Optional[Mapping[int, int]]
                  ) -> Tuple[RestoreReport, List[Tuple[tf.Variable, str, Optional[Mapping]]]]:
    """Matches model variables with checkpoint keys by name and shape.

    Returns:
      The report, and (variable, checkpoint key, class rows or None) to assign. A variable
      without an EMA entry takes its plain value; a class kernel of another class count comes
      as (variable, None, {}): no class carried, all near the prior.
    """
    exclude_pattern = re.compile(exclude) if exclude else None
    # Pruning masks and quantization ranges: loaded when the checkpoint has them (one of
    # ours), never counted as missing (released checkpoints have none).
    wrapper_state = wrapper_state_variables(model)
    report = RestoreReport(path=path, model_variables=len(model.variables) - len(wrapper_state))
    assignments = []
    for variable in model.variables:
        name = variable_name(variable)
        if exclude_pattern is not None and exclude_pattern.match(name):
            report.excluded.append(name)
            continue
        key = name + EMA_SUFFIX if use_ema and name + EMA_SUFFIX in ckpt_shapes else name
        if id(variable) in wrapper_state:
            if key in ckpt_shapes and variable.shape.as_list() == list(ckpt_shapes[key]):
                assignments.append((variable, key, None))
            continue
        if key not in ckpt_shapes:
            report.missing.append(name)
            continue
        model_shape, ckpt_shape = variable.shape.as_list(), list(ckpt_shapes[key])
        rows = class_rows if class_rows is not None and is_class_predict(name) else None
        if model_shape != ckpt_shape if rows is None else not rows_fit(
                model_shape, ckpt_shape, rows, _anchors_per_location(model)):
            report.mismatched.append("%s: model %s vs checkpoint %s" % (name, model_shape, ckpt_shape))
            if is_class_predict_kernel(name):  # A head of another class count: near the prior.
                assignments.append((variable, None, {}))
            continue
        assignments.append((variable, key, rows))
        (report.loaded_from_ema if key != name else report.loaded).append(name)
    return report, assignments


def _check_plan(model, report: RestoreReport, ckpt_arch: Architecture,
                ckpt_shapes: Mapping[str, list], skip_mismatch: bool, allow_partial: bool) -> None:
    """Raises ValueError when the checkpoint is not one the model can start from."""
    model_arch = infer_architecture({variable_name(v): v.shape.as_list() for v in model.variables})

    def looks_like() -> str:  # Only for errors: naming the family builds every family config.
        return "the checkpoint looks like %s, the model is %s" % (ckpt_arch.describe(),
                                                                  model_arch.describe())

    if not report.num_loaded:
        raise ValueError("Checkpoint %s shares no variable with model %s: %s (model variables "
                         "look like %r; checkpoint keys like %r)"
                         % (report.path, model.name, looks_like(),
                            variable_name(model.variables[0]),
                            sorted(ckpt_shapes)[0] if ckpt_shapes else None))
    wanted = report.model_variables - len(report.excluded)
    # Another backbone leaves the features random even when the rest fills half the model.
    other_backbone = None not in (ckpt_arch.backbone, model_arch.backbone) and \
        ckpt_arch.backbone != model_arch.backbone
    if not allow_partial and report.backbone_only:
        _check_backbone_filled(report, ckpt_arch, model_arch)
    elif not allow_partial and (2 * report.num_loaded < wanted or other_backbone):
        raise ValueError("Checkpoint %s does not fit model %s: %s; loaded %d of %d variables%s. "
                         "Build the model the checkpoint was made for, or pass "
                         "allow_partial=True to keep what fits."
                         % (report.path, model.name, looks_like(), report.num_loaded, wanted,
                            ", none of the %s backbone" % model_arch.backbone
                            if other_backbone else ""))
    problems = report.missing + report.mismatched
    if problems and not skip_mismatch:
        raise ValueError("Checkpoint %s cannot fill %d variables of %s: %s"
                         % (report.path, len(problems), model.name, "; ".join(problems)))


def _check_backbone_filled(report: RestoreReport, ckpt_arch: Architecture,
                           model_arch: Architecture) -> None:
    """A classification checkpoint must fill every backbone variable: it is all it offers."""
    scope = ckpt_arch.backbone + "/"
    unfilled = [p for p in report.missing + report.mismatched if p.startswith(scope)]
    if unfilled:
        raise ValueError("Checkpoint %s is %s but cannot fill %d backbone variables of the model, "
                         "%s: %s" % (report.path, ckpt_arch.describe(), len(unfilled),
                                     model_arch.describe(), _summarize(unfilled)))


def _log_report(model, report: RestoreReport, ckpt_arch: Architecture,
                ckpt_shapes: Mapping[str, list]) -> None:
    """Writes the one log line of a restore: what was loaded, and what was skipped and why."""
    if report.loaded_from_ema and report.loaded:
        values = "EMA values for %d, plain values for %d" % (len(report.loaded_from_ema),
                                                             len(report.loaded))
    else:
        values = "EMA values" if report.loaded_from_ema else "plain values"
    notes = ["Restored %d of %d variables from %s (%s)" % (
        report.num_loaded, report.model_variables, report.path, values)]
    if report.backbone_only:
        notes.append("backbone-only checkpoint: %s" % ckpt_arch.describe())
    class_head = _class_head_note(model, report, ckpt_shapes)
    if report.class_rows is not None:
        class_head = "class head: %d of %d classes from the checkpoint's by name" % (
            len(report.class_rows.ids), model.config.num_classes)
    if class_head:
        notes.append(class_head)
    if report.skipped:
        kinds = [("missing", report.missing), ("shape mismatch", report.mismatched),
                 ("excluded", report.excluded)]
        notes.append("skipped %d: %s" % (len(report.skipped), "; ".join(
            "%s %s" % (kind, _summarize(names)) for kind, names in kinds if names)))
    logging.log(logging.WARNING if report.skipped else logging.INFO, "; ".join(notes) + ".")


def _class_head_note(model, report: RestoreReport, ckpt_shapes: Mapping[str, list]) -> str:
    """"class head skipped: 90 classes in checkpoint, 21 in model" when the counts differ."""
    bias = [v for v in model.variables if variable_name(v).endswith(_CLASS_BIAS)]
    if len(bias) != 1 or _CLASS_BIAS not in ckpt_shapes or not any(
            m.startswith(_CLASS_BIAS + ":") for m in report.mismatched):
        return ""
    model_outputs, ckpt_outputs = bias[0].shape[0], ckpt_shapes[_CLASS_BIAS][0]
    config = getattr(model, "config", None)
    num_classes = config.get("num_classes") if config is not None else None
    anchors = model_outputs // num_classes if num_classes else 0
    if anchors and model_outputs == anchors * num_classes and ckpt_outputs % anchors == 0:
        return "class head skipped: %d classes in checkpoint, %d in model" % (
            ckpt_outputs // anchors, num_classes)
    return "class head skipped: %d outputs in checkpoint, %d in model" % (ckpt_outputs,
                                                                        model_outputs)


def _anchors_per_location(model) -> int:
    """Anchors per location of the model's class head: its outputs over its class count."""
    bias = [v for v in model.variables if variable_name(v).endswith(_CLASS_BIAS)]
    return bias[0].shape[-1] // model.config.num_classes


def _summarize(names: List[str], limit: int = 8) -> str:
    """Lists a few names in full; many as counts per top-level scope."""
    if not names:
        return "none"
    if len(names) <= limit:
        return ", ".join(names)
    counts = collections.Counter(name.split("/")[0] for name in names)
    return ", ".join("%s/... (%d)" % (scope, count) for scope, count in counts.items())


def _restore_object_based(model, path: str) -> RestoreReport:
    """Loads a Keras `save_weights` checkpoint (object graph, not names)."""
    status = model.load_weights(path)
    status.assert_existing_objects_matched()
    logging.info("Restored object-based checkpoint %s with Keras load_weights.", path)
    return RestoreReport(path=path, loaded=[variable_name(v) for v in model.variables],
                         model_variables=len(model.variables))
