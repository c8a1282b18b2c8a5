"""Which ops of a traced graph would have no kernel on a GPU: the check behind test_gpu_kernels.

A graph runs on a GPU only as far as TensorFlow has GPU kernels for its ops. Without a GPU the
kernel registry still tells: a CUDA build of TensorFlow registers every GPU kernel it has,
with the dtypes each one takes, whether or not a GPU is present. This module walks a GraphDef
and every function in its library (cond branches, while bodies, gradients, XLA clusters) and
finds each op that has no kernel for the device that would run it:
- outside XLA, a "GPU" kernel, or a "DEFAULT" one (which serves every device: ReadVariableOp,
  If, While, the function-call ops);
- inside a function XLA compiles (attr _XlaMustCompile true, and every function it calls), an
  "XLA_GPU_JIT" kernel: XLA's own lowering of the op.
A kernel counts only if its dtype constraints accept the node's dtypes (a GPU kernel for
float32 alone does not run a bfloat16 node), as TensorFlow's own kernel lookup decides.
"""

import dataclasses
import functools
from typing import Dict, List, Mapping, Optional, Set, Tuple

import tensorflow as tf
from tensorflow.core.framework import types_pb2
from tensorflow.python.framework import kernels, op_def_registry

GPU = "GPU"
DEFAULT = "DEFAULT"
XLA_GPU = "XLA_GPU_JIT"
XLA_MUST_COMPILE = "_XlaMustCompile"


def register_xla_kernels() -> None:
    """XLA registers its kernels when first used: compile a tiny function so the registry
    lists XLA_GPU_JIT (and XLA_CPU_JIT) kernels. Until then it lists none. Fails unless this
    TensorFlow has GPU and XLA GPU kernels (a CUDA build)."""
    tf.function(lambda x: x + 1.0, jit_compile=True)(tf.constant(1.0))
    for cached in (_kernels, _constrained_attrs, _devices_for):
        cached.cache_clear()  # Anything looked up before lacks XLA's kernels.
    if GPU not in kernel_devices("Conv2D") or XLA_GPU not in kernel_devices("Conv2D"):
        raise AssertionError("this TensorFlow registers no GPU or XLA GPU kernels (kernels of "
                             "Conv2D: %s): the check needs a CUDA build"
                             % (kernel_devices("Conv2D"),))


@functools.lru_cache(maxsize=None)
def _kernels(op_type: str) -> Tuple[Tuple[str, str, Tuple[Tuple[str, frozenset], ...]], ...]:
    """(device type, label, ((attr, allowed dtypes), ...)) of each kernel registered for
    op_type. A labelled kernel serves only nodes whose _kernel attr names its label."""
    return tuple((k.device_type, k.label,
                  tuple((c.name, frozenset(c.allowed_values.list.type)) for c in k.constraint))
                 for k in kernels.get_registered_kernels_for_op(op_type).kernel)


def kernel_devices(op_type: str) -> Tuple[str, ...]:
    """Every device type with a kernel for `op_type`, whatever its dtypes (sorted)."""
    return tuple(sorted({device for device, _, _ in _kernels(op_type)}))


@functools.lru_cache(maxsize=None)
def _op_def(op_type: str):
    return op_def_registry.get(op_type)


def _attr(node, name: str):
    """The node's attr `name`, or the op's default for it (None if neither)."""
    if name in node.attr:
        return node.attr[name]
    op_def = _op_def(node.op)
    for attr in (op_def.attr if op_def else ()):
        if attr.name == name and attr.HasField("default_value"):
            return attr.default_value
    return None


def _types(attr) -> Optional[Tuple[int, ...]]:
    """The dtypes a type or list(type) attr holds (None for a missing attr)."""
    if attr is None:
        return None
    return (attr.type,) if attr.WhichOneof("value") == "type" else tuple(attr.list.type)


@functools.lru_cache(maxsize=None)
def _constrained_attrs(op_type: str) -> Tuple[str, ...]:
    return tuple(sorted({name for _, _, constraints in _kernels(op_type)
                         for name, _ in constraints}))


@functools.lru_cache(maxsize=None)
def _devices_for(op_type: str, label: str,
                 types: Tuple[Tuple[str, Optional[Tuple[int, ...]]], ...]) -> frozenset:
    """The device types whose kernels accept this label and these dtypes: each constraint's
    attr present and every dtype it holds allowed (TensorFlow's KernelAttrsMatch)."""
    given = dict(types)
    return frozenset(
        device for device, kernel_label, constraints in _kernels(op_type)
        if kernel_label == label and
        all(given[name] is not None and all(t in allowed for t in given[name])
            for name, allowed in constraints))


def _kernel_key(node) -> Tuple[str, str, Tuple[Tuple[str, Optional[Tuple[int, ...]]], ...]]:
    """(op type, kernel label, dtypes of the attrs kernels constrain): what picks a kernel."""
    label = node.attr["_kernel"].s.decode() if "_kernel" in node.attr else ""
    return node.op, label, tuple((name, _types(_attr(node, name)))
                                 for name in _constrained_attrs(node.op))


def node_devices(node) -> frozenset:
    """The device types with a kernel that runs this node (its dtypes included)."""
    return _devices_for(*_kernel_key(node))


@functools.lru_cache(maxsize=None)
def _dtype_names(types) -> frozenset:
    return frozenset(tf.dtypes.as_dtype(t).name for _, values in types for t in values or ())


def takes_resource(node) -> bool:
    """Whether one of the node's inputs is a resource (a variable handle, an iterator...)."""
    op_def = _op_def(node.op)
    if op_def is None:
        return False
    for arg in op_def.input_arg:
        if arg.type == types_pb2.DT_RESOURCE:
            return True
        for attr_name in (arg.type_attr, arg.type_list_attr):
            value = _attr(node, attr_name) if attr_name else None
            if value is not None and types_pb2.DT_RESOURCE in (
                    [value.type] if value.WhichOneof("value") == "type" else value.list.type):
                return True
    return False


def _is_true(attr) -> bool:
    return attr is not None and attr.WhichOneof("value") == "b" and attr.b


def _called_functions(node, library: Mapping[str, object]) -> List[str]:
    """The library functions a node calls: its op type, and its func and list(func) attrs."""
    called = [node.op] if node.op in library else []
    for attr in node.attr.values():
        kind = attr.WhichOneof("value")
        if kind == "func":
            called.append(attr.func.name)
        elif kind == "list":
            called.extend(f.name for f in attr.list.func)
    return [name for name in called if name in library]


@dataclasses.dataclass(frozen=True)
class Missing:
    """An op with no kernel for the device that would run it (the first node found)."""
    op_type: str
    needed: str                     # GPU (a DEFAULT kernel also does) or XLA_GPU_JIT
    devices: Tuple[str, ...]        # the device types with a kernel for the op, any dtype
    for_dtypes: Tuple[str, ...]     # ... and those whose kernels take the node's dtypes
    dtypes: Tuple[str, ...]         # the node's dtype attrs, as "T=bfloat16"
    where: str                      # "graph" or the library function holding the node
    node: str

    def describe(self) -> str:
        return ("%s needs a %s kernel; it has kernels for [%s], for its dtypes (%s) [%s]; "
                "e.g. node %s in %s" % (self.op_type, self.needed, ", ".join(self.devices),
                                        ", ".join(self.dtypes) or "none",
                                        ", ".join(self.for_dtypes), self.node, self.where))


def _dtype_attrs(node) -> Tuple[str, ...]:
    return tuple("%s=%s" % (name, ",".join(tf.dtypes.as_dtype(t).name for t in types))
                 for name, types in ((name, _types(node.attr[name])) for name in sorted(node.attr)
                                     if node.attr[name].WhichOneof("value") in ("type", "list"))
                 if types)


@dataclasses.dataclass
class KernelReport:
    """What check_kernels found in one graph.

    missing: ops without a kernel for the device that would run them (one per op type and
      kind of kernel needed).
    allowed: {allowlist entry: where} for the entries the graph needs (ops without a GPU
      kernel that the allowlist lets run on the host).
    allowed_with_resource: allowlisted nodes that take a resource input (they would have to
      run on the resource's device, so the allowlist must not cover them), GPU kernel or not.
    op_types: every op type run outside XLA; xla_op_types: every op type XLA compiles
      (neither counts functions no call reaches, which are checked all the same).
    xla_roots: the library functions compiled with XLA (_XlaMustCompile); xla_functions: they
      and all they call.
    """
    missing: List[Missing]
    allowed: Dict[str, str]
    allowed_with_resource: List[str]
    op_types: Set[str]
    xla_op_types: Set[str]
    xla_roots: Set[str]
    xla_functions: Set[str]
    _dtypes: Dict[str, Set[str]]

    def dtypes_of(self, op_type: str) -> Set[str]:
        """The dtypes (names) of the attrs kernels constrain, over the op's nodes."""
        return self._dtypes.get(op_type, set())


def _split_by_compiler(graph_def):
    """The graph's nodes as (where, node) lists: those run as TensorFlow ops, those XLA
    compiles and those of functions no call reaches; and the XLA roots and functions.

    From the graph, calls are followed through op types that name library functions and
    func / list(func) attrs (cond branches, while bodies, gradients). A function with
    _XlaMustCompile (on its FunctionDef or on the call) and all it calls are XLA's; the rest
    runs as TensorFlow ops. (A loaded SavedModel brings functions no call reaches, such as
    its other training mode.)
    """
    library = {f.signature.name: f for f in graph_def.library.function}
    roots, host, xla = set(), set(), set()
    stack = [(node, False) for node in graph_def.node]
    while stack:
        node, in_xla = stack.pop()
        for name in _called_functions(node, library):
            root = (_is_true(library[name].attr.get(XLA_MUST_COMPILE)) or
                    _is_true(node.attr.get(XLA_MUST_COMPILE)))
            if root and not in_xla:
                roots.add(name)
            to_xla = in_xla or root
            seen = xla if to_xla else host
            if name not in seen:
                seen.add(name)
                stack.extend((n, to_xla) for n in library[name].node_def)
    host_nodes = [("graph", n) for n in graph_def.node]
    host_nodes += [(name, n) for name in sorted(host) for n in library[name].node_def]
    xla_nodes = [(name, n) for name in sorted(xla) for n in library[name].node_def]
    unreached = [(name, n) for name in sorted(set(library) - host - xla)
                 for n in library[name].node_def]
    return host_nodes, xla_nodes, unreached, roots, xla, set(library)


def _allowlist_entry(node, allowed: Set[str]) -> Optional[str]:
    """The entry of `allowed` covering the node: its op type, or "Op[dtype]" for one of the
    node's dtypes."""
    if node.op in allowed:
        return node.op
    for attr in node.attr.values():
        if attr.WhichOneof("value") in ("type", "list"):
            for dtype in _types(attr) or ():
                entry = "%s[%s]" % (node.op, tf.dtypes.as_dtype(dtype).name)
                if entry in allowed:
                    return entry
    return None


def check_kernels(graph_def, allowed_on_host: Optional[Mapping[str, str]] = None) -> KernelReport:
    """Walks `graph_def` and its library. Entries of `allowed_on_host` (op types, or
    "Op[dtype]" for an op with that dtype) may lack a GPU kernel outside XLA: they run on the
    host under soft placement. Inside XLA nothing is allowed."""
    allowed = set(allowed_on_host or ())
    allowed_ops = {entry.split("[")[0] for entry in allowed}
    host, xla, unreached, roots, xla_functions, library = _split_by_compiler(graph_def)
    found: Dict[Tuple[str, str], Missing] = {}
    seen_allowed: Dict[str, str] = {}
    with_resource = set()
    dtypes: Dict[str, Set[str]] = {}
    host_ops, xla_ops = set(), set()

    def check(nodes, needed: Set[str], label: str, ops: Set[str], may_allow: bool):
        for where, node in nodes:
            if node.op in library:
                continue  # A call of a library function is no kernel: its body is walked.
            ops.add(node.op)
            key = _kernel_key(node)
            dtypes.setdefault(node.op, set()).update(_dtype_names(key[2]))
            entry = _allowlist_entry(node, allowed) if may_allow and node.op in allowed_ops \
                else None
            if entry is not None and takes_resource(node):
                with_resource.add("%s (node %s in %s)" % (node.op, node.name, where))
            if _devices_for(*key) & needed:
                continue
            if entry is not None:
                seen_allowed.setdefault(entry, where)
            elif (node.op, label) not in found:
                found[(node.op, label)] = Missing(
                    node.op, label, kernel_devices(node.op), tuple(sorted(_devices_for(*key))),
                    _dtype_attrs(node), where, node.name)

    check(host, {GPU, DEFAULT}, GPU, host_ops, may_allow=True)
    check(xla, {XLA_GPU}, XLA_GPU, xla_ops, may_allow=False)
    # Functions no call reaches are checked as a GPU would run them: better a false alarm
    # than a function left unchecked.
    check(unreached, {GPU, DEFAULT}, GPU, set(), may_allow=True)
    return KernelReport(
        missing=sorted(found.values(), key=lambda m: (m.needed, m.op_type)),
        allowed=seen_allowed, allowed_with_resource=sorted(with_resource),
        op_types=host_ops, xla_op_types=xla_ops, xla_roots=roots,
        xla_functions=xla_functions, _dtypes=dtypes)


__all__ = ["DEFAULT", "GPU", "XLA_GPU", "KernelReport", "Missing", "check_kernels",
           "kernel_devices", "node_devices", "register_xla_kernels", "takes_resource"]
