"""TensorFlow frontend: SavedModel directories, frozen GraphDef `.pb` files and Keras `.keras` /
`.h5` files -> the graph IR (the same ops the ONNX frontend makes, so every later stage applies).

Loading needs TensorFlow (imported here, lazily): a SavedModel signature or a Keras model is
traced to a concrete function and its variables frozen to constants
(convert_variables_to_constants_v2). The frozen GraphDef is then converted node by node with
the converter table of the `tf_ops_*.py` modules:

    @tf_converter("Relu")
    def relu(ctx: TFContext, node: NodeDef) -> list[Value]:
        return ctx.add("relu", [ctx.input(node, 0)], node=node)

Identity chains, IdentityN, StopGradient, NoOp, PlaceholderWithDefault (its default) and
control dependencies are dropped; only the nodes the outputs depend on are converted.
NHWC ops are imported as they are: a convolution or pool reads its input through a
transpose to NCHW and writes through a transpose back, and the transpose-sinking pass
(passes/transpose_sink.py) cancels the pairs between layers.

A leading unknown (batch) dimension of an input becomes 1; other unknown dims need
`input_shapes` (`--input-shape NAME=...`).
"""

from __future__ import annotations

import collections
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np

from tensorir.debug import stage
from tensorir.errors import ModelError, ShapeError, TirError, UnsupportedOpError
from tensorir.frontend.onnx import ImportContext, prune_unused
from tensorir.graph.graph import Graph, Value
from tensorir.graph.types import TensorType

NodeDef = Any  # tensorflow.core.framework.node_def_pb2.NodeDef
TFConverter = Callable[["TFContext", NodeDef], Sequence[Value]]
TF_CONVERTERS: dict[str, TFConverter] = {}
# ops whose output is their first input: removed at import
PASS_THROUGH = {"Identity", "StopGradient", "PlaceholderWithDefault", "Snapshot", "PreventGradient"}
KERAS_SUFFIXES = (".keras", ".h5", ".hdf5")


def tf_converter(*op_types: str) -> Callable[[TFConverter], TFConverter]:
    def deco(fn: TFConverter) -> TFConverter:
        for t in op_types:
            if t in TF_CONVERTERS:
                raise RuntimeError(f"TF op {t} has two converters")
            TF_CONVERTERS[t] = fn
        return fn

    return deco


def _load_converters() -> None:
    from tensorir.frontend import load_converters

    load_converters("tf_ops")


def supported_tf_ops() -> set[str]:
    _load_converters()
    return set(TF_CONVERTERS) | PASS_THROUGH | {"IdentityN", "NoOp", "Placeholder", "Const"}


def import_tf(need: str = "TensorFlow models need TensorFlow at import time") -> Any:
    """The tensorflow module (lazily: ONNX models never need it); one line if it is missing,
    starting with `need` (what needs it)."""
    from tensorir.devices import preload_opencl

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    preload_opencl()  # before TensorFlow, or a later PoCL load crashes (devices.preload_opencl)
    try:
        import tensorflow as tf
    except ImportError:
        raise TirError(f"{need}: pip install 'tensorir[tf]' (tensorflow-cpu)") from None
    return tf


def is_tf_model(path: str | os.PathLike) -> bool:
    """A SavedModel folder, a .pb GraphDef or a Keras .keras / .h5 file (by name)."""
    p = Path(path)
    if p.is_dir():
        return (p / "saved_model.pb").is_file() or (p / "saved_model.pbtxt").is_file()
    return p.suffix.lower() in (".pb", *KERAS_SUFFIXES)


# ---- loading -----------------------------------------------------------------------
@dataclass
class TFModel:
    """A frozen GraphDef with its inputs (placeholder name, shape with None for unknown dims,
    dtype) and outputs (name, tensor name)."""

    graph_def: Any
    inputs: list[tuple[str, tuple[int | None, ...] | None, str]]
    outputs: list[tuple[str, str]]
    name: str


def load_tf_model(path: str | os.PathLike, signature: str = "serving_default") -> TFModel:
    """Read and freeze a TensorFlow model; a ModelError naming the file when it cannot."""
    p = Path(path)
    if not p.exists():
        raise ModelError(f"{p}: no such file or folder")
    tf = import_tf()
    if p.is_dir():
        if not is_tf_model(p):
            raise ModelError(f"{p}: a folder that is no SavedModel (no saved_model.pb)")
        return _load_saved_model(tf, p, signature)
    if p.suffix.lower() == ".pb":
        return _load_graph_def(tf, p)
    if p.suffix.lower() in KERAS_SUFFIXES:
        return _load_keras(tf, p)
    raise ModelError(f"{p}: not a TensorFlow model (expected a SavedModel folder, .pb, .keras or .h5)")


def _load_saved_model(tf: Any, p: Path, signature: str) -> TFModel:
    try:
        loaded = tf.saved_model.load(str(p))
    except Exception as e:  # TF raises many kinds for a broken folder
        loaded = _load_without_slots(tf, p, e)
    sigs = dict(loaded.signatures)
    if signature not in sigs:
        have = ", ".join(sorted(sigs)) or "none"
        raise ModelError(f"{p}: no signature '{signature}' (--signature); the SavedModel has: {have}")
    fn = sigs[signature]
    outs = fn.structured_outputs
    names = (
        sorted(outs) if isinstance(outs, dict) else [f"output_{i}" for i in range(len(tf.nest.flatten(outs)))]
    )
    return _freeze(tf, fn, names, p.name)


def _load_without_slots(tf: Any, p: Path, error: Exception) -> Any:
    """The SavedModel loaded with its optimizer's slot variables left out of the object graph: a
    Keras 2 model saved with its optimizer names slots that TF >= 2.16 cannot revive ('_UserObject'
    object has no attribute 'add_slot'); inference never reads them. A copy of saved_model.pb
    without them, next to links to the original variables and assets."""
    import tempfile

    from tensorflow.core.protobuf import saved_model_pb2

    failed = ModelError(f"{p}: cannot load the SavedModel: {_first_line(error)}")
    sm = saved_model_pb2.SavedModel()
    try:
        sm.ParseFromString((p / "saved_model.pb").read_bytes())
    except Exception:
        raise failed from None
    nodes = [n for g in sm.meta_graphs for n in g.object_graph_def.nodes if n.slot_variables]
    if not nodes:
        raise failed
    for n in nodes:
        del n.slot_variables[:]
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "saved_model.pb").write_bytes(sm.SerializeToString())
        for sub in p.iterdir():
            if sub.name != "saved_model.pb":
                (Path(d) / sub.name).symlink_to(sub.resolve())
        level = tf.get_logger().level
        tf.get_logger().setLevel("ERROR")  # one warning per slot value left in the checkpoint
        try:
            return tf.saved_model.load(d)
        except Exception:
            raise failed from None
        finally:
            tf.get_logger().setLevel(level)


def _load_keras(tf: Any, p: Path) -> TFModel:
    import keras

    try:
        model = keras.models.load_model(str(p), compile=False)
    except Exception as e:
        raise ModelError(f"{p}: cannot load the Keras model: {_first_line(e)}") from None
    specs = [tf.TensorSpec(t.shape, t.dtype, name=_keras_name(t, i)) for i, t in enumerate(model.inputs)]

    def call(*xs: Any) -> Any:
        return model(list(xs) if len(xs) > 1 else xs[0], training=False)

    fn = tf.function(call).get_concrete_function(*specs)
    names = [_keras_name(t, i, "output") for i, t in enumerate(model.outputs)]
    return _freeze(tf, fn, names, p.stem)


def _keras_name(t: Any, i: int, kind: str = "input") -> str:
    name = str(getattr(t, "name", "") or f"{kind}_{i}")
    return name.split(":")[0].replace("/", "_")


def _freeze(tf: Any, fn: Any, out_names: list[str], name: str) -> TFModel:
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    frozen = convert_variables_to_constants_v2(fn)
    gd = frozen.graph.as_graph_def()
    inputs = [
        (t.name.split(":")[0], _dims(t.shape), t.dtype.as_numpy_dtype().dtype.name) for t in frozen.inputs
    ]
    tensors = [t.name for t in frozen.outputs]
    if len(out_names) != len(tensors):
        out_names = [f"output_{i}" for i in range(len(tensors))]
    return TFModel(gd, inputs, list(zip(out_names, tensors, strict=True)), name)


def _dims(shape: Any) -> tuple[int | None, ...] | None:
    if shape.rank is None:
        return None
    return tuple(None if d is None else int(d) for d in shape.as_list())


def _load_graph_def(tf: Any, p: Path) -> TFModel:
    gd = tf.compat.v1.GraphDef()
    try:
        gd.ParseFromString(p.read_bytes())
    except Exception as e:
        raise ModelError(
            f"{p}: not a valid frozen GraphDef (truncated or not a .pb graph): {_first_line(e)}"
        ) from None
    if not gd.node:
        raise ModelError(f"{p}: not a valid frozen GraphDef (no nodes)")
    inputs = []
    for n in gd.node:
        if n.op == "Placeholder":
            shape = tf.TensorShape(n.attr["shape"].shape) if "shape" in n.attr else tf.TensorShape(None)
            dtype = tf.dtypes.as_dtype(n.attr["dtype"].type).as_numpy_dtype().dtype.name
            inputs.append((n.name, _dims(shape), dtype))
    used = {_node_of(i) for n in gd.node for i in n.input}
    sinks = [
        n for n in gd.node if n.name not in used and n.op not in ("NoOp", "Const", "Placeholder", "Assert")
    ]
    if not sinks:
        raise ModelError(f"{p}: the GraphDef has no output node")
    return TFModel(gd, inputs, [(n.name, f"{n.name}:0") for n in sinks], p.stem)


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"


def _node_of(tensor: str) -> str:
    """'^ctrl' / 'name:1' / 'name' -> the node name."""
    return tensor.lstrip("^").split(":")[0]


def _tensor_key(tensor: str) -> tuple[str, int]:
    name, _, idx = tensor.partition(":")
    return name, int(idx) if idx else 0


# ---- converting ----------------------------------------------------------------------
def node_label(node: NodeDef) -> str:
    return f"node '{node.name}' ({node.op})"


class TFContext(ImportContext):
    """State of one TF import: the graph being built and the TF tensor -> Value map."""

    def __init__(self, graph: Graph, nodes: Mapping[str, NodeDef]) -> None:
        super().__init__(graph, 0, {})
        self.tf = import_tf()
        self.nodes = nodes
        self.tvalues: dict[tuple[str, int], Value] = {}

    def data_inputs(self, node: NodeDef) -> list[str]:
        return [i for i in node.input if not i.startswith("^")]

    def input(self, node: NodeDef, i: int) -> Value:  # type: ignore[override]
        ins = self.data_inputs(node)
        if i >= len(ins):
            raise ModelError(f"{node_label(node)}: required input {i} is missing")
        return self.tvalues[_tensor_key(ins[i])]

    def n_inputs(self, node: NodeDef) -> int:
        return len(self.data_inputs(node))

    def const_input(self, node: NodeDef, i: int, what: str = "") -> np.ndarray:  # type: ignore[override]
        value = self.const_value(self.input(node, i))
        if value is None:
            raise ModelError(
                f"{node_label(node)}: {what or f'input {i}'} must be a constant: "
                "tensorir compiles static shapes"
            )
        return value

    def attr(self, node: NodeDef, name: str, default: Any = None) -> Any:
        """A node attribute as a Python value (str, int, float, bool, numpy dtype name, array, list)."""
        if name not in node.attr:
            return default
        a = node.attr[name]
        kind = a.WhichOneof("value")
        if kind == "s":
            return a.s.decode()
        if kind in ("i", "f", "b"):
            return getattr(a, kind)
        if kind == "type":
            return self.tf.dtypes.as_dtype(a.type).as_numpy_dtype().dtype.name
        if kind == "tensor":
            return self.tf.make_ndarray(a.tensor)
        if kind == "list":
            for field in ("i", "f", "s", "b"):
                vals = list(getattr(a.list, field))
                if vals:
                    return [v.decode() for v in vals] if field == "s" else vals
            return []
        return default

    def add(  # type: ignore[override]
        self,
        op: str,
        inputs: Sequence[Value],
        attrs: dict[str, Any] | None = None,
        node: NodeDef | None = None,
    ) -> list[Value]:
        name = node.name if node is not None else ""
        try:
            return self.graph.add_node(op, inputs, attrs, name=name)
        except ShapeError as e:
            label = node_label(node) if node is not None else op
            raise ShapeError(f"{label}: {str(e).split(': ', 1)[-1]}") from None

    def add1(
        self,
        op: str,
        inputs: Sequence[Value],
        attrs: dict[str, Any] | None = None,
        node: NodeDef | None = None,
    ) -> Value:
        return self.add(op, inputs, attrs, node)[0]

    def shape(self, v: Value) -> tuple[int, ...]:
        return self.type_of(v).shape


def _reachable(model: TFModel, nodes: Mapping[str, NodeDef]) -> list[NodeDef]:
    """The nodes the outputs depend on (data edges only), in dependency order."""
    dag = nx.DiGraph()
    todo = [_node_of(t) for _, t in model.outputs]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name not in nodes:
            raise ModelError(f"tensor '{name}' is read but no node defines it")
        dag.add_node(name)
        for i in nodes[name].input:
            if not i.startswith("^"):
                dag.add_edge(_node_of(i), name)
                todo.append(_node_of(i))
    try:
        return [nodes[n] for n in nx.lexicographical_topological_sort(dag)]
    except nx.NetworkXUnfeasible:
        raise ModelError("the TensorFlow graph has a cycle (control flow is not supported)") from None


def _check_supported(order: Sequence[NodeDef]) -> None:
    known = supported_tf_ops()
    missing: dict[str, list[str]] = collections.defaultdict(list)
    for n in order:
        if n.op not in known:
            missing[n.op].append(n.name)
    if missing:
        parts = [f"{t} x{len(ns)} (e.g. node '{ns[0]}')" for t, ns in sorted(missing.items())]
        raise UnsupportedOpError(f"unsupported TensorFlow ops: {', '.join(parts)}")


def input_types(
    model: TFModel, input_shapes: Mapping[str, Sequence[int]], override: bool = True
) -> dict[str, TensorType]:
    """The static type of each input: declared dims, a leading unknown dim as 1, the rest
    from `input_shapes` (which may only fill unknown dims unless `override`)."""
    names = {n for n, _, _ in model.inputs}
    unknown = sorted(set(input_shapes) - names)
    if unknown:
        have = ", ".join(sorted(names))
        raise ModelError(f"--input-shape names '{unknown[0]}', which is not a model input (inputs: {have})")
    return {
        name: _input_type(name, dims, dtype, input_shapes.get(name), override)
        for name, dims, dtype in model.inputs
    }


def _input_type(
    name: str, dims: tuple[int | None, ...] | None, dtype: str, given: Sequence[int] | None, override: bool
) -> TensorType:
    shown = "?" if dims is None else "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"
    if given is not None:
        given = tuple(int(d) for d in given)
        ok = dims is None or (
            len(given) == len(dims) and all(d in (None, g) for d, g in zip(dims, given, strict=True))
        )
        if not ok and not override:
            raise ModelError(
                f"--input-shape {name}={','.join(map(str, given))} changes input '{name}', which the model "
                f"declares as {shown}: only unknown dims may be given (--override-shape forces it)"
            )
        return TensorType(given, dtype)
    if dims is None:
        raise ModelError(f"input '{name}' has an unknown rank; give its shape with --input-shape {name}=...")
    filled = [1 if d is None and i == 0 else d for i, d in enumerate(dims)]
    if None in filled:
        raise ModelError(
            f"input '{name}' has an unknown dimension ({shown}); give its shape with "
            f"--input-shape {name}=1,... (API: input_shapes={{'{name}': [...]}})"
        )
    return TensorType(tuple(filled), dtype)


def convert(
    model: TFModel, input_shapes: Mapping[str, Sequence[int]] | None = None, override_shapes: bool = True
) -> Graph:
    """The graph IR of a loaded TensorFlow model."""
    _load_converters()
    nodes = {n.name: n for n in model.graph_def.node}
    order = _reachable(model, nodes)
    _check_supported(order)
    types = input_types(model, dict(input_shapes or {}), override_shapes)
    graph = Graph(model.name or "main")
    ctx = TFContext(graph, nodes)
    for node in order:
        outs = _convert_node(ctx, node, types)
        for k, v in enumerate(outs):
            ctx.tvalues[(node.name, k)] = v
    graph.set_outputs((name, ctx.tvalues[_tensor_key(t)]) for name, t in model.outputs)
    prune_unused(graph)
    return graph


def _convert_node(ctx: TFContext, node: NodeDef, types: Mapping[str, TensorType]) -> Sequence[Value]:
    if node.op == "Placeholder":
        if node.name not in types:
            raise ModelError(f"{node_label(node)}: a placeholder that is no input of the signature")
        return [ctx.graph.add_input(node.name, types[node.name])]
    if node.op == "Const":
        return [ctx.graph.add_const(np.asarray(ctx.attr(node, "value")), node.name)]
    if node.op in PASS_THROUGH:
        return [ctx.input(node, 0)]
    if node.op == "IdentityN":
        return [ctx.input(node, i) for i in range(ctx.n_inputs(node))]
    try:
        return TF_CONVERTERS[node.op](ctx, node)
    except TirError:
        raise
    except Exception as e:  # a converter bug or a malformed node: name the node
        raise ModelError(f"{node_label(node)}: cannot convert: {type(e).__name__}: {e}") from e


def from_tensorflow(
    path: str | os.PathLike,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    signature: str = "serving_default",
    override_shapes: bool = True,
) -> Graph:
    """Convert a SavedModel folder (its `signature`), a frozen GraphDef .pb, or a Keras
    .keras / .h5 file to a Graph. `input_shapes` fills unknown input dims (a leading unknown
    batch dim defaults to 1); `override_shapes` False refuses changing known dims."""
    with stage("import tensorflow") as st:
        model = load_tf_model(path, signature)
        try:
            st.result = convert(model, input_shapes, override_shapes)
        except TirError as e:  # one line that names the file, as the TFLite and ONNX importers do
            raise type(e)(f"{path}: {e}") from None
    return st.result
