"""TensorFlow frontend: SavedModel directories, frozen GraphDef `.pb` files and Keras `.keras` /
`.h5` files -> the graph IR (the same ops the ONNX frontend makes, so every later stage applies).

Loading needs TensorFlow, which is never imported into this process (it breaks PoCL here): the
TensorFlow child process (tf_child.py, running tf_load.py) traces a SavedModel signature or a
Keras model to a concrete function, freezes its variables to constants
(convert_variables_to_constants_v2) and sends back the frozen GraphDef's nodes as plain records
(`TFNode`: attributes decoded to Python values and numpy arrays). A GraphDef cannot be parsed
here instead: its protobuf classes live in the tensorflow package, whose import loads all of
TensorFlow. The nodes are then converted here, one by one, with the converter table of the
`tf_ops_*.py` modules:

    @tf_converter("Relu")
    def relu(ctx: TFContext, node: TFNode) -> list[Value]:
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

TFConverter = Callable[["TFContext", "TFNode"], Sequence[Value]]
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


def is_tf_model(path: str | os.PathLike) -> bool:
    """A SavedModel folder, a .pb GraphDef or a Keras .keras / .h5 file (by name)."""
    p = Path(path)
    if p.is_dir():
        return (p / "saved_model.pb").is_file() or (p / "saved_model.pbtxt").is_file()
    return p.suffix.lower() in (".pb", *KERAS_SUFFIXES)


# ---- loading (in the TensorFlow child process) ---------------------------------------------
@dataclass
class TFNode:
    """A GraphDef node as plain data: its inputs as TF writes them ('name', 'name:1', '^ctrl')
    and its attributes as Python values (tf_load.attr_value)."""

    name: str
    op: str
    input: list[str]
    attr: dict[str, Any]


@dataclass
class TFModel:
    """A frozen graph: its nodes, inputs (placeholder name, shape with None for unknown dims,
    dtype) and outputs (name, tensor name)."""

    nodes: list[TFNode]
    inputs: list[tuple[str, tuple[int | None, ...] | None, str]]
    outputs: list[tuple[str, str]]
    name: str


def load_tf_model(path: str | os.PathLike, signature: str = "serving_default") -> TFModel:
    """Read and freeze a TensorFlow model in the TensorFlow child process (tf_child.py: this
    process never imports TensorFlow); a ModelError naming the file when it cannot."""
    from tensorir.frontend import tf_child

    p = Path(path)
    if not p.exists():
        raise ModelError(f"{p}: no such file or folder")
    if p.is_dir() and not is_tf_model(p):
        raise ModelError(f"{p}: a folder that is no SavedModel (no saved_model.pb)")
    if not p.is_dir() and p.suffix.lower() not in (".pb", *KERAS_SUFFIXES):
        raise ModelError(f"{p}: not a TensorFlow model (expected a SavedModel folder, .pb, .keras or .h5)")
    return tf_child.call("load", str(p), signature)


def node_of(tensor: str) -> str:
    """'^ctrl' / 'name:1' / 'name' -> the node name."""
    return tensor.lstrip("^").split(":")[0]


def _tensor_key(tensor: str) -> tuple[str, int]:
    name, _, idx = tensor.partition(":")
    return name, int(idx) if idx else 0


# ---- converting ----------------------------------------------------------------------
def node_label(node: TFNode) -> str:
    return f"node '{node.name}' ({node.op})"


class TFContext(ImportContext):
    """State of one TF import: the graph being built and the TF tensor -> Value map."""

    def __init__(self, graph: Graph, nodes: Mapping[str, TFNode]) -> None:
        super().__init__(graph, 0, {})
        self.nodes = nodes
        self.tvalues: dict[tuple[str, int], Value] = {}

    def data_inputs(self, node: TFNode) -> list[str]:
        return [i for i in node.input if not i.startswith("^")]

    def input(self, node: TFNode, i: int) -> Value:  # type: ignore[override]
        ins = self.data_inputs(node)
        if i >= len(ins):
            raise ModelError(f"{node_label(node)}: required input {i} is missing")
        return self.tvalues[_tensor_key(ins[i])]

    def n_inputs(self, node: TFNode) -> int:
        return len(self.data_inputs(node))

    def const_input(self, node: TFNode, i: int, what: str = "") -> np.ndarray:  # type: ignore[override]
        value = self.const_value(self.input(node, i))
        if value is None:
            raise ModelError(
                f"{node_label(node)}: {what or f'input {i}'} must be a constant: "
                "tensorir compiles static shapes"
            )
        return value

    def attr(self, node: TFNode, name: str, default: Any = None) -> Any:
        """A node attribute as a Python value (str, int, float, bool, numpy dtype name, array,
        list; tf_load.attr_value), `default` when the node has none."""
        return node.attr.get(name, default)

    def add(  # type: ignore[override]
        self,
        op: str,
        inputs: Sequence[Value],
        attrs: dict[str, Any] | None = None,
        node: TFNode | None = None,
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
        node: TFNode | None = None,
    ) -> Value:
        return self.add(op, inputs, attrs, node)[0]

    def shape(self, v: Value) -> tuple[int, ...]:
        return self.type_of(v).shape


def _reachable(model: TFModel, nodes: Mapping[str, TFNode]) -> list[TFNode]:
    """The nodes the outputs depend on (data edges only), in dependency order."""
    dag = nx.DiGraph()
    todo = [node_of(t) for _, t in model.outputs]
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
                dag.add_edge(node_of(i), name)
                todo.append(node_of(i))
    try:
        return [nodes[n] for n in nx.lexicographical_topological_sort(dag)]
    except nx.NetworkXUnfeasible:
        raise ModelError("the TensorFlow graph has a cycle (control flow is not supported)") from None


def _check_supported(order: Sequence[TFNode]) -> None:
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
    nodes = {n.name: n for n in model.nodes}
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


def _convert_node(ctx: TFContext, node: TFNode, types: Mapping[str, TensorType]) -> Sequence[Value]:
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
