"""BackgroundCheckpointWriter: a checkpoint of the training state as it is now, written while
training goes on.

It writes what `tf.train.CheckpointManager(checkpoint, directory, max_to_keep=1).save()` writes:
the same object graph, keys and values, through TensorFlow's own writer (the files go into a
`<prefix>_temp` folder and are then moved into place), after which the folder's `checkpoint`
list is replaced, and only then are the files of the checkpoint before deleted; so a write cut
short leaves the previous checkpoint intact and listed. In the caller's thread it only reads
each variable once (a read shares the variable's buffer, and an update of a buffer still read
elsewhere writes into a new one, so the values stay those of the moment; on a GPU they take a
state's worth of its memory until written). The write happens on
a thread of its own, which saves the values as a checkpoint of a copy of the state's object
graph. It does so through a function traced once per state layout (on another thread, while
the first steps run; until it is ready, the copy is saved eagerly), so that a write costs the
file writes rather than the graph walk and serialization of an eager save, which take most of
its time for a detector's thousands of variables.

TensorFlow's own asynchronous checkpoint (CheckpointOptions(experimental_enable_async_checkpoint))
copies each variable into a host variable of its own and traces its copy function at the second
save, on the caller's thread: for a detector that costs more than the saves it hides in the
first backups of every fit.

Variables spread over replicas (tf.distribute) are read and saved as they should be only by
TensorFlow's saver: `can_snapshot` says no for such a state, and the caller saves in place.
"""

import concurrent.futures
import os
import threading
import time
from typing import Dict, List, Optional, Tuple

import tensorflow as tf

from efficientdet_keras.utils.fileio import write_text_atomically

# How TensorFlow names a variable's value among its checkpoint attributes.
_VARIABLE_VALUE = "VARIABLE_VALUE"
_BASE = tf.__internal__.tracking.Trackable
# What CheckpointManager names its checkpoints: <directory>/ckpt-<number>.
_CHECKPOINT_NAME = "ckpt"
_STATE_FILE = "checkpoint"

# The write in progress into each folder, whichever writer started it: a later fit (or a
# reader of the folder) in this process waits for it before it looks.
_writes_in_progress: Dict[str, concurrent.futures.Future] = {}
_writes_lock = threading.Lock()


class _Node(_BASE):
    """An object of the copy: the children of the original object, by the same names."""

    def __init__(self):
        self.children: Dict[str, _BASE] = {}

    def _trackable_children(self, save_type="checkpoint", **kwargs):
        return dict(self.children)


class _Value(_Node):
    """A variable of the copy: the value it had when the state was read."""

    def __init__(self, value: tf.Tensor):
        super().__init__()
        self.value = value

    def _serialize_to_tensors(self):
        return {_VARIABLE_VALUE: self.value}


def _saves_tensors_of_its_own(obj) -> bool:
    """Whether `obj` (not a variable) puts tensors of its own into a checkpoint."""
    if isinstance(obj, tf.__internal__.tracking.DelegatingTrackableMixin):
        return _saves_tensors_of_its_own(obj._trackable)  # noqa: SLF001 (what it delegates to)
    return any(getattr(type(obj), name) is not getattr(_BASE, name)
               for name in ("_serialize_to_tensors", "_gather_saveables_for_checkpoint"))


def can_snapshot(checkpoint: tf.train.Checkpoint) -> bool:
    """Whether all that `checkpoint` saves is the values of plain (not distributed) variables,
    which the writer can read at a moment and save later."""
    for obj in tf.train.TrackableView(checkpoint).descendants():
        if isinstance(obj, tf.Variable):
            if isinstance(obj, tf.distribute.DistributedValues):
                return False
        elif _saves_tensors_of_its_own(obj):
            return False
    return True


class _Layout:
    """The object graph of a checkpoint: its objects in order, each with its children's
    positions by name, and its variables in the order their values are passed. Two
    checkpoints of one model (a fit's and the next one's) have the same `key`."""

    def __init__(self, checkpoint: tf.train.Checkpoint):
        view = tf.train.TrackableView(checkpoint)
        objects = view.descendants()  # The root first.
        position = {id(obj): i for i, obj in enumerate(objects)}
        self.variables: List[tf.Variable] = [o for o in objects if isinstance(o, tf.Variable)]
        self.key: Tuple = tuple(
            ((tuple(obj.shape), obj.dtype) if isinstance(obj, tf.Variable) else None,
             tuple((name, position[id(child)]) for name, child in view.children(obj).items()))
            for obj in objects)

    def copy(self, values) -> _Node:
        """The root of a copy of the graph holding `values` (one per variable, in order)."""
        values = iter(values)
        nodes = [_Node() if variable is None else _Value(next(values))
                 for variable, _ in self.key]
        for node, (_, children) in zip(nodes, self.key):
            node.children = {name: nodes[i] for name, i in children}
        return nodes[0]

    def read(self) -> List[tf.Tensor]:
        """The variables' values now (an AutoCastVariable reads its float32 variable)."""
        return [tf.raw_ops.ReadVariableOp(resource=v.handle, dtype=v.dtype)
                for v in self.variables]


def wait_for_writes_into(directory: str) -> None:
    """Waits for a write into `directory` that a writer of this process has in progress
    (whatever its outcome: its writer reports its errors)."""
    with _writes_lock:
        write = _writes_in_progress.get(os.path.abspath(directory))
    if write is not None:
        concurrent.futures.wait([write])


class BackgroundCheckpointWriter:
    """Saves `checkpoint` into `directory` as CheckpointManager(max_to_keep=1) does, in the
    background: `save()` returns once the state is read, `wait()` once it is written.

    One write at a time: `save()` first waits for the one before. The error of a write (a
    full disk) is raised by the `save()` or `wait()` after it. The write function is traced
    on a thread of its own as soon as the writer is made; until it is ready, writes save
    the copy of the state eagerly (slower, still on the writer's thread).

    Args:
      checkpoint: the tf.train.Checkpoint to save; `can_snapshot(checkpoint)` must hold. The
        attribute may be given another checkpoint of the same model (a later fit's): the
        traced function serves it too.
      directory: the folder of its checkpoints and their `checkpoint` list.
    """

    def __init__(self, checkpoint: tf.train.Checkpoint, directory: str):
        self.checkpoint = checkpoint
        self.directory = directory
        self._writer = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="checkpoint-writer")
        self._tracer = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="checkpoint-tracer")
        self._write: Optional[concurrent.futures.Future] = None
        # The tracing of the write function for the layout of key _traced_key.
        self._trace: Optional[concurrent.futures.Future] = None
        self._traced_key: Optional[Tuple] = None
        _ = checkpoint.save_counter  # Made now, as the saves will: part of the layout.
        self._start_trace(_Layout(checkpoint))

    def done(self) -> bool:
        """Whether no write is in progress (one may be done and not waited for yet)."""
        return self._write is None or self._write.done()

    def save(self) -> str:
        """Reads the state and starts writing it; returns the prefix it is written to."""
        self.wait()
        self.checkpoint.save_counter.assign_add(1)  # As CheckpointManager.save numbers them.
        layout = _Layout(self.checkpoint)
        prefix = os.path.join(self.directory, "%s-%d" % (
            _CHECKPOINT_NAME, int(self.checkpoint.save_counter.numpy())))
        self._start_write(prefix, layout, layout.read(), self._traced_function(layout))
        return prefix

    def wait(self) -> None:
        """Waits for the write in progress, if any; raises its error."""
        write, self._write = self._write, None
        if write is not None:
            write.result()

    def finish_tracing(self) -> None:
        """Waits until the traced write function is ready (the saves before are eager)."""
        concurrent.futures.wait([self._trace])

    def _start_trace(self, layout: _Layout) -> None:
        @tf.function(autograph=False)  # Plain Python: nothing to convert.
        def write(prefix, values):
            return tf.train.Checkpoint(layout.copy(values)).write(prefix)

        specs = [tf.TensorSpec(v.shape, v.dtype) for v in layout.variables]
        self._traced_key = layout.key
        self._trace = self._tracer.submit(write.get_concrete_function,
                                          tf.TensorSpec([], tf.string), specs)

    def _traced_function(self, layout: _Layout):
        """The traced write function of `layout` if it is ready, else None (and it is traced
        when variables came or went since)."""
        if layout.key != self._traced_key:
            self._start_trace(layout)
            return None
        if not self._trace.done() or self._trace.exception() is not None:
            return None  # A failed trace leaves the writes eager.
        return self._trace.result()

    def _start_write(self, *args) -> None:
        write = self._writer.submit(self._write_checkpoint, *args)
        key = os.path.abspath(self.directory)
        with _writes_lock:
            _writes_in_progress[key] = write

        def untrack(done):
            with _writes_lock:
                if _writes_in_progress.get(key) is done:
                    del _writes_in_progress[key]

        write.add_done_callback(untrack)
        self._write = write

    def _write_checkpoint(self, prefix: str, layout: _Layout, values: List[tf.Tensor],
                          traced_write) -> None:
        """On the writer's thread: the checkpoint, then the list naming it alone, then the
        files of the checkpoints it replaces."""
        state = tf.train.get_checkpoint_state(self.directory)
        before = list(state.all_model_checkpoint_paths) if state is not None else []
        # What CheckpointManager writes; its timestamps let a manager of this folder
        # (a later run saving in place) sweep this checkpoint as its own.
        preserved = state.last_preserved_timestamp if state is not None else time.time()
        os.makedirs(self.directory, exist_ok=True)  # Which a traced save does not make.
        if traced_write is None:
            tf.train.Checkpoint(layout.copy(values)).write(prefix)
        else:
            traced_write(tf.constant(prefix), values)
        name = os.path.basename(prefix)
        write_text_atomically(os.path.join(self.directory, _STATE_FILE), (
            'model_checkpoint_path: "%s"\nall_model_checkpoint_paths: "%s"\n'
            "all_model_checkpoint_timestamps: %r\nlast_preserved_timestamp: %r\n"
            % (name, name, time.time(), preserved)))
        replaced = {os.path.basename(path) for path in before} - {name}
        for file_name in os.listdir(self.directory):
            if file_name.split(".")[0] in replaced:
                os.remove(os.path.join(self.directory, file_name))
