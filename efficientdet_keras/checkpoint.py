"""Reading and writing name-based checkpoints (the layout of the released ones).

Keys are variable names without ":0", e.g. `efficientnet-b0/stem/conv2d/kernel`;
EMA values sit under `<name>/ExponentialMovingAverage`. The package writes its
own checkpoints in the same layout, so released and home-made checkpoints load
through the same function.
"""

import dataclasses
import os
import re
import uuid
from typing import Dict, List, Mapping, Optional

import tensorflow as tf
from absl import logging

EMA_SUFFIX = "/ExponentialMovingAverage"
_OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"


@dataclasses.dataclass
class RestoreReport:
    """What `restore_ckpt` did, variable name by variable name."""
    path: str
    loaded: List[str] = dataclasses.field(default_factory=list)
    loaded_from_ema: List[str] = dataclasses.field(default_factory=list)
    missing: List[str] = dataclasses.field(default_factory=list)
    mismatched: List[str] = dataclasses.field(default_factory=list)  # "name: model vs ckpt shape"
    excluded: List[str] = dataclasses.field(default_factory=list)

    @property
    def skipped(self) -> List[str]:
        return self.missing + self.mismatched + self.excluded


def variable_name(variable: tf.Variable) -> str:
    """The checkpoint key of a model variable: its name without the ":0" suffix."""
    name = variable.name
    return name[:-2] if name.endswith(":0") else name


def resolve_checkpoint_path(path: str) -> str:
    """Returns a checkpoint prefix from a prefix, an index file or a directory.

    Raises:
      FileNotFoundError naming the path when it holds no checkpoint.
    """
    if path.endswith(".index"):
        path = path[:-len(".index")]
    if os.path.isdir(path):
        latest = tf.train.latest_checkpoint(path)
        if latest is None:
            # A directory without a "checkpoint" state file but with one index.
            indices = sorted(f for f in os.listdir(path) if f.endswith(".index"))
            if len(indices) == 1:
                latest = os.path.join(path, indices[0][:-len(".index")])
        if latest is None:
            raise FileNotFoundError("No checkpoint found in directory %s" % path)
        return latest
    if not tf.io.gfile.exists(path + ".index"):
        raise FileNotFoundError("Checkpoint %s does not exist (no %s.index)" % (path, path))
    return path


def restore_ckpt(model, ckpt_path: str, use_ema: Optional[bool] = None,
                 skip_mismatch: bool = True, exclude: Optional[str] = None) -> RestoreReport:
    """Loads a checkpoint into `model` by variable name.

    Args:
      model: an EfficientDetNet (built here if it is not built yet).
      ckpt_path: a checkpoint prefix, its .index file, or a directory (latest checkpoint).
      use_ema: load `<name>/ExponentialMovingAverage` values where present.
        Default: True when the model's config has moving_average_decay > 0. A
        checkpoint without EMA values falls back to the plain ones, with a warning.
      skip_mismatch: skip variables that are missing from the checkpoint or have
        another shape (a new number of classes), listing them in one log line.
        False makes them an error.
      exclude: a regex; variables whose names match it are not loaded (for
        example r".*/class-predict/.*" to keep new class heads).

    Returns:
      A RestoreReport listing what was loaded and skipped.

    Raises:
      FileNotFoundError: no checkpoint at `ckpt_path`.
      ValueError: the checkpoint shares no variable with the model, or
        `skip_mismatch=False` and some variables could not be loaded.
    """
    path = resolve_checkpoint_path(ckpt_path)
    ensure_built(model)
    reader = tf.train.load_checkpoint(path)
    ckpt_shapes = reader.get_variable_to_shape_map()
    if _OBJECT_GRAPH_KEY in ckpt_shapes and not any(
            variable_name(v) in ckpt_shapes for v in model.variables):
        return _restore_object_based(model, path)
    if use_ema is None:
        config = getattr(model, "config", None)
        use_ema = bool(config is not None and config.get("moving_average_decay", 0))
    has_ema = any(key.endswith(EMA_SUFFIX) for key in ckpt_shapes)
    if use_ema and not has_ema:
        logging.warning("Checkpoint %s holds no ExponentialMovingAverage values; "
                        "loading the plain weights instead.", path)
    exclude_pattern = re.compile(exclude) if exclude else None

    report = RestoreReport(path=path)
    for variable in model.variables:
        name = variable_name(variable)
        if exclude_pattern is not None and exclude_pattern.match(name):
            report.excluded.append(name)
            continue
        key = name + EMA_SUFFIX if use_ema and name + EMA_SUFFIX in ckpt_shapes else name
        if key not in ckpt_shapes:
            report.missing.append(name)
            continue
        model_shape, ckpt_shape = variable.shape.as_list(), list(ckpt_shapes[key])
        if model_shape != ckpt_shape:
            report.mismatched.append("%s: model %s vs checkpoint %s" % (name, model_shape, ckpt_shape))
            continue
        variable.assign(reader.get_tensor(key))
        (report.loaded_from_ema if key != name else report.loaded).append(name)

    if not report.loaded and not report.loaded_from_ema:
        raise ValueError("Checkpoint %s shares no variable with model %s (model variables look "
                         "like %r; checkpoint keys like %r)"
                         % (path, model.name, variable_name(model.variables[0]),
                            sorted(ckpt_shapes)[0] if ckpt_shapes else None))
    problems = report.missing + report.mismatched
    if problems and not skip_mismatch:
        raise ValueError("Checkpoint %s cannot fill %d variables of %s: %s"
                         % (path, len(problems), model.name, "; ".join(problems)))
    if report.skipped:
        logging.warning("Restored %d variables from %s; skipped %d: missing %s; shape mismatch "
                        "%s; excluded %s.", len(report.loaded) + len(report.loaded_from_ema), path,
                        len(report.skipped), report.missing or "none",
                        report.mismatched or "none", report.excluded or "none")
    else:
        logging.info("Restored all %d variables from %s%s.",
                     len(report.loaded) + len(report.loaded_from_ema), path,
                     " (EMA values)" if report.loaded_from_ema else "")
    return report


def _restore_object_based(model, path: str) -> RestoreReport:
    """Loads a Keras `save_weights` checkpoint (object graph, not names)."""
    status = model.load_weights(path)
    status.assert_existing_objects_matched()
    logging.info("Restored object-based checkpoint %s with Keras load_weights.", path)
    return RestoreReport(path=path, loaded=[variable_name(v) for v in model.variables])


def save_ckpt(model, ckpt_prefix: str, ema_values: Optional[Mapping[str, tf.Tensor]] = None) -> str:
    """Writes the model's variables as a name-based checkpoint, atomically.

    Args:
      model: a built model.
      ckpt_prefix: e.g. "model_dir/ckpt-12"; the directory is created.
      ema_values: optional {variable name: EMA value}, written under
        `<name>/ExponentialMovingAverage`, as in the released checkpoints.

    Returns:
      The checkpoint prefix, now also recorded in the directory's "checkpoint" file.
    """
    directory = os.path.dirname(os.path.abspath(ckpt_prefix))
    os.makedirs(directory, exist_ok=True)
    tensors: Dict[str, tf.Tensor] = {}
    for variable in model.variables:
        tensors[variable_name(variable)] = tf.convert_to_tensor(variable)
    for name, value in (ema_values or {}).items():
        tensors[name + EMA_SUFFIX] = tf.convert_to_tensor(value)
    names = sorted(tensors)
    # Write under a temporary prefix, then move the data before the index:
    # a reader never finds an index whose data is not complete.
    tmp_prefix = "%s.tmp-%s" % (ckpt_prefix, uuid.uuid4().hex)
    tf.raw_ops.SaveV2(prefix=tmp_prefix, tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tensors[n] for n in names])
    data_suffix = ".data-00000-of-00001"
    os.replace(tmp_prefix + data_suffix, ckpt_prefix + data_suffix)
    os.replace(tmp_prefix + ".index", ckpt_prefix + ".index")
    _write_checkpoint_state(directory, os.path.basename(ckpt_prefix))
    return ckpt_prefix


def _write_checkpoint_state(directory: str, latest: str) -> None:
    state_path = os.path.join(directory, "checkpoint")
    previous = []
    if os.path.exists(state_path):
        state = tf.train.get_checkpoint_state(directory)
        if state is not None:
            previous = [os.path.basename(p) for p in state.all_model_checkpoint_paths]
    paths = [p for p in previous if p != latest] + [latest]
    text = 'model_checkpoint_path: "%s"\n' % latest
    text += "".join('all_model_checkpoint_paths: "%s"\n' % p for p in paths)
    tmp_path = state_path + ".tmp"
    with open(tmp_path, "w") as f:
        f.write(text)
    os.replace(tmp_path, state_path)


def ensure_built(model) -> None:
    """Creates a model's variables with one small forward pass if needed."""
    if model.built and model.variables:
        return
    builder = getattr(model, "build_variables", None)
    if builder is None:
        raise ValueError("Model %s is not built; call it on an input first." % model.name)
    builder()
