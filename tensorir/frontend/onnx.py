"""ONNX frontend: an explicit converter table from ONNX op types to graph ops.

Converters live in the `onnx_*.py` modules beside this file, one per op family:

    @converter("Relu")
    def relu(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
        return ctx.add("relu", [ctx.input(node, 0)], node=node)

`ctx.opset` is the model's default-domain opset, so a converter handles attribute
changes between versions itself (e.g. Squeeze axes moved from an attribute to an
input in opset 13). Inputs that fix a static shape (Reshape's shape, Slice's starts,
...) are read with `ctx.const_input`, which folds constant subgraphs on demand and
may specialize on known graph-input values (`input_values`).
"""

from __future__ import annotations

import collections
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import google.protobuf.message
import networkx as nx
import numpy as np
import onnx
import onnx.checker
import onnx.external_data_helper
import onnx.helper
import onnx.numpy_helper

from tensorir.debug import stage
from tensorir.errors import ModelError, ShapeError, TirError, UnsupportedOpError
from tensorir.frontend.lengths import Length, add_length_outputs, follow
from tensorir.frontend.onnx_functions import expand_functions
from tensorir.frontend.structured import flat_outputs, flat_values, structured_input
from tensorir.graph.graph import Graph, Value
from tensorir.graph.types import Node, TensorType
from tensorir.ops.registry import get_op

Converter = Callable[["ImportContext", onnx.NodeProto], Sequence[Value]]
CONVERTERS: dict[str, Converter] = {}
# converters used instead when an input has a data-dependent length (Shape, Size:
# frontend/onnx_dynamic.py), whose results then depend on the run
RUNTIME_SHAPE: dict[str, Converter] = {}
_ONNX_DOMAINS = ("", "ai.onnx")


def converter(*op_types: str) -> Callable[[Converter], Converter]:
    """Register a converter for ONNX op types; ops of other domains are keyed
    "domain.OpType" (e.g. "com.microsoft.QLinearAdd"), as `op_key` spells them."""

    def deco(fn: Converter) -> Converter:
        for t in op_types:
            if t in CONVERTERS:
                raise RuntimeError(f"ONNX op {t} has two converters")
            CONVERTERS[t] = fn
        return fn

    return deco


def supported_op_types() -> set[str]:
    _load_converters()
    return set(CONVERTERS)


def _load_converters() -> None:
    from tensorir.frontend import load_converters

    load_converters("onnx_")


def node_label(node: onnx.NodeProto) -> str:
    return f"node '{node.name or node.output[0]}' ({node.op_type})"


class ImportContext:
    """State of one import: the graph being built and the ONNX-name -> Value map."""

    def __init__(self, graph: Graph, opset: int, input_values: Mapping[str, np.ndarray]) -> None:
        self.graph = graph
        self.opset = opset
        self.values: dict[str, Value] = {}
        self.input_values = dict(input_values)
        self._folded: dict[Value, np.ndarray] = {}
        self._unknown: set[int] = set()  # nodes found to depend on a run-time input
        self.lengths: dict[Value, Length] = {}  # data-dependent lengths (frontend/lengths.py)
        self.conditions: tuple[tuple[Value, bool], ...] = ()  # of the guarded region being built

    # ---- reading a node ---------------------------------------------------
    def attrs(self, node: onnx.NodeProto) -> dict[str, Any]:
        out = {}
        for a in node.attribute:
            v = onnx.helper.get_attribute_value(a)
            if isinstance(v, bytes):
                v = v.decode()
            elif isinstance(v, onnx.TensorProto):
                v = onnx.numpy_helper.to_array(v)
            elif isinstance(v, list) and v and isinstance(v[0], bytes):
                v = [x.decode() for x in v]
            out[a.name] = v
        return out

    def has_input(self, node: onnx.NodeProto, i: int) -> bool:
        return i < len(node.input) and node.input[i] != ""

    def input(self, node: onnx.NodeProto, i: int) -> Value:
        if not self.has_input(node, i):
            raise ModelError(f"{node_label(node)}: required input {i} is missing")
        return self.values[node.input[i]]

    def inputs(self, node: onnx.NodeProto) -> list[Value]:
        return [self.values[n] for n in node.input if n]

    def type_of(self, v: Value) -> TensorType:
        return self.graph.type_of(v)

    def const_input(self, node: onnx.NodeProto, i: int, what: str = "") -> np.ndarray | None:
        """Value of input i, which must be known at compile time; None if absent."""
        if not self.has_input(node, i):
            return None
        value = self.const_value(self.input(node, i))
        if value is None:
            name = what or f"input {i}"
            raise ModelError(
                f"{node_label(node)}: {name} ('{node.input[i]}') must be a constant: "
                "tensorir compiles static shapes"
            )
        return value

    def const_value(self, v: Value) -> np.ndarray | None:
        """Fold the subgraph producing v if it depends only on constants."""
        if v in self._folded:
            return self._folded[v]
        node = self.graph.node(v.node)
        if node.op == "constant":
            return node.value
        if node.op == "input":
            if node.name not in self.input_values:
                return None
            arr = np.asarray(self.input_values[node.name])
            arr.flags.writeable = False
            const = Node("constant", outputs=(TensorType.of(arr),), name=node.name, value=arr)
            self.graph.replace_node(v.node, const)
            return arr
        if v.node in self._unknown:
            return None
        args = []
        for u in self.graph.inputs_of(v.node):
            args.append(self.const_value(u))
            if args[-1] is None:  # remembered: a DAG's shared producers are walked once
                self._unknown.add(v.node)
                return None
        outs = get_op(node.op).run_reference(args, node.attr)
        for i, o in enumerate(outs):
            self._folded[Value(v.node, i)] = o
        return self._folded[v]

    def known_value(self, v: Value) -> np.ndarray | None:
        """`v`'s value when it depends on constants only (no graph input, even one whose
        value `input_values` gives): what a data-dependent op may fold at import."""
        g = self.graph
        if any(g.node(a).op == "input" for a in nx.ancestors(g.nx, v.node) | {v.node}):
            return None
        return self.const_value(v)

    def set_length(self, v: Value, axis: int, count: Value, node: onnx.NodeProto) -> None:
        """`v`'s extent along `axis` is the run-time int64 scalar `count` (its static shape
        is the upper bound)."""
        self.lengths[v] = Length(axis, count, node_label(node))

    # ---- building ----------------------------------------------------------
    def const(self, array: np.ndarray | float | int, dtype: Any = None, name: str = "") -> Value:
        return self.graph.add_const(np.asarray(array, dtype=dtype), name)

    def add(
        self,
        op: str,
        inputs: Sequence[Value],
        attrs: dict[str, Any] | None = None,
        node: onnx.NodeProto | None = None,
    ) -> list[Value]:
        name = (node.name or node.output[0]) if node is not None else ""
        try:
            return self.graph.add_node(op, inputs, attrs, name=name)
        except ShapeError as e:
            label = node_label(node) if node is not None else op
            raise ShapeError(f"{label}: {str(e).split(': ', 1)[-1]}") from None


# ---- loading ----------------------------------------------------------------
def check_model_file(path: str | os.PathLike) -> Path:
    """The model path, if it names a file (a ModelError naming it otherwise)."""
    p = Path(path)
    if not p.exists():
        raise ModelError(f"{p}: no such file")
    if p.is_dir():
        raise ModelError(f"{p}: is a directory, expected an .onnx file")
    return p


def load_model(path: str | os.PathLike) -> onnx.ModelProto:
    """Read an ONNX file (with external data); one clear error for bad files."""
    p = check_model_file(path)
    try:
        model = onnx.load(str(p), load_external_data=False)
    except (google.protobuf.message.DecodeError, RuntimeWarning, ValueError) as e:
        raise ModelError(f"{p}: not a valid ONNX model (truncated or not ONNX): {e}") from None
    if not model.graph.node and not model.graph.output:
        raise ModelError(f"{p}: not a valid ONNX model (no graph found)")
    try:
        onnx.external_data_helper.load_external_data_for_model(model, str(p.parent))
    except (OSError, ValueError, onnx.checker.ValidationError) as e:
        raise ModelError(f"{p}: cannot load external weights: {e}") from None
    return model


def _opset(model: onnx.ModelProto) -> int:
    for o in model.opset_import:
        if o.domain in _ONNX_DOMAINS:
            return o.version
    return 1


def all_nodes(g: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """The graph's nodes and those of its nodes' subgraphs (If branches, Loop/Scan bodies)."""
    for n in g.node:
        yield n
        for a in n.attribute:
            for sub in [a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs:
                yield from all_nodes(sub)


def op_key(n: onnx.NodeProto) -> str:
    """The node's key in CONVERTERS: its op type, "domain.OpType" outside the ONNX domains."""
    return n.op_type if n.domain in _ONNX_DOMAINS else f"{n.domain}.{n.op_type}"


def is_supported(n: onnx.NodeProto) -> bool:
    """A converter exists for this node's op."""
    return op_key(n) in CONVERTERS


def expand_unsupported(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with ops that lack a converter but are ONNX functions of supported ops
    replaced by their bodies (frontend/onnx_functions.py)."""
    _load_converters()
    if all(is_supported(n) for n in all_nodes(model.graph)):
        return model
    return expand_functions(model, is_supported, _opset(model))


def check_supported(model: onnx.ModelProto) -> None:
    """One error listing every unsupported op type, a node name and how many (ops that
    expand into supported ones count as supported)."""
    model = expand_unsupported(model)
    missing: dict[str, list[str]] = collections.defaultdict(list)
    for n in all_nodes(model.graph):
        if not is_supported(n):
            missing[op_key(n)].append(n.name or (n.output[0] if n.output else "?"))
    if missing:
        parts = [f"{t} x{len(ns)} (e.g. node '{ns[0]}')" for t, ns in sorted(missing.items())]
        raise UnsupportedOpError(f"unsupported ONNX ops: {', '.join(parts)}")


def _sorted_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """Nodes in dependency order; clear errors for cycles and undefined tensors."""
    g = model.graph
    known = {i.name for i in g.initializer} | {i.name for i in g.input} | {""}
    producer = {o: k for k, n in enumerate(g.node) for o in n.output if o}
    dag = nx.DiGraph()
    dag.add_nodes_from(range(len(g.node)))
    for k, n in enumerate(g.node):
        for name in n.input:
            if name in producer:
                dag.add_edge(producer[name], k)
            elif name not in known:
                raise ModelError(
                    f"{node_label(n)} reads tensor '{name}', which no initializer, graph input "
                    "or node defines (missing initializer?)"
                )
    _check_graph_outputs(g, set(producer) | known)
    try:
        order = list(nx.lexicographical_topological_sort(dag))
    except nx.NetworkXUnfeasible:
        cycle = [node_label(g.node[u]) for u, _ in nx.find_cycle(dag)]
        raise ModelError("graph has a cycle: " + " -> ".join(cycle)) from None
    return [g.node[k] for k in order]


def check_graph(model: onnx.ModelProto) -> None:
    """A ModelError naming the culprit for a malformed graph: a node input or graph output
    that nothing defines, a graph output listed twice, a cycle."""
    _sorted_nodes(model)


def _check_graph_outputs(g: onnx.GraphProto, defined: set[str]) -> None:
    seen: set[str] = set()
    for o in g.output:
        if o.name in seen:
            raise ModelError(f"graph output '{o.name}' is listed twice")
        seen.add(o.name)
        if o.name not in defined or not o.name:
            raise ModelError(
                f"graph output '{o.name}' is produced by no node (and is no initializer or graph input)"
            )


def _is_symbolic(d: onnx.TensorShapeProto.Dimension) -> bool:
    return not d.HasField("dim_value") or (d.dim_value <= 0 and bool(d.dim_param))


def shape_conflict(vi: onnx.ValueInfoProto, dims: Sequence[int]) -> str | None:
    """The input's declared shape ('[N, 4]') when `dims` changes one of its static dims or
    its rank, else None (an input without a declared shape takes any)."""
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return None
    declared = [None if _is_symbolic(d) else d.dim_value for d in tt.shape.dim]
    if len(dims) == len(declared) and all(d in (None, n) for d, n in zip(declared, dims, strict=True)):
        return None
    shown = (d.dim_param or "?" if _is_symbolic(d) else str(d.dim_value) for d in tt.shape.dim)
    return f"[{', '.join(shown)}]"


def check_input_shapes(
    model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]], override: bool = True
) -> None:
    """Every --input-shape names a model input and, unless `override`, changes no static dim."""
    inputs = {vi.name: vi for vi in model.graph.input}
    unknown = sorted(set(input_shapes) - set(inputs))
    if unknown:
        raise ModelError(f"--input-shape names '{unknown[0]}', which is not a model input")
    for name, dims in input_shapes.items():
        declared = None if override else shape_conflict(inputs[name], dims)
        if declared:
            raise ModelError(
                f"--input-shape {name}={','.join(map(str, dims))} changes input '{name}', which the model "
                f"declares as {declared}: only symbolic dims may be given (--override-shape forces it)"
            )


def _input_type(vi: onnx.ValueInfoProto, input_shapes: Mapping[str, Sequence[int]]) -> TensorType:
    if vi.type.WhichOneof("value") != "tensor_type":
        kind = vi.type.WhichOneof("value") or "untyped"
        raise ModelError(f"input '{vi.name}' is a {kind}; tensorir supports tensor inputs only")
    tt = vi.type.tensor_type
    dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type).name
    if vi.name in input_shapes:
        return TensorType(tuple(input_shapes[vi.name]), dtype)
    if not tt.HasField("shape"):
        raise ModelError(f"input '{vi.name}' has no shape; give it with --input-shape {vi.name}=...")
    dims = []
    for d in tt.shape.dim:
        if _is_symbolic(d):
            sym = d.dim_param or "?"
            raise ModelError(
                f"input '{vi.name}' has a symbolic dimension '{sym}'; give its shape with "
                f"--input-shape {vi.name}=1,... (API: input_shapes={{'{vi.name}': [...]}})"
            )
        dims.append(d.dim_value)
    return TensorType(tuple(dims), dtype)


def from_onnx(
    model: onnx.ModelProto | str | os.PathLike,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    input_values: Mapping[str, np.ndarray] | None = None,
    override_shapes: bool = True,
) -> Graph:
    """Convert an ONNX model to a Graph.

    input_shapes: static shapes for inputs with symbolic dims.
    input_values: known values of graph inputs; an input whose value fixes a
        static shape (e.g. a Reshape target) becomes a constant. Others stay inputs.
    override_shapes: False (the CLI without --override-shape): an input_shapes entry may
        only fill symbolic dims; one that changes a static dim or the rank is a ModelError.
    """
    with stage("import onnx") as st:
        st.result = _import(model, input_shapes, input_values, override_shapes)
    return st.result


def _import(
    model: onnx.ModelProto | str | os.PathLike,
    input_shapes: Mapping[str, Sequence[int]] | None,
    input_values: Mapping[str, np.ndarray] | None,
    override_shapes: bool = True,
) -> Graph:
    if not isinstance(model, onnx.ModelProto):
        model = load_model(model)
    model = expand_unsupported(model)
    check_supported(model)
    nodes = _sorted_nodes(model)
    input_shapes = dict(input_shapes or {})
    og = model.graph
    graph = Graph(og.name or "main")
    ctx = ImportContext(graph, _opset(model), flat_values(input_values or {}))
    inits = {t.name: t for t in og.initializer}
    check_input_shapes(model, input_shapes, override_shapes)
    for t in og.initializer:
        try:
            ctx.values[t.name] = graph.add_const(onnx.numpy_helper.to_array(t), t.name)
        except (OSError, ValueError) as e:
            raise ModelError(f"initializer '{t.name}': cannot read its data: {e}") from None
    for vi in og.input:
        if vi.name in inits:
            continue
        if vi.type.WhichOneof("value") == "tensor_type":
            ctx.values[vi.name] = graph.add_input(vi.name, _input_type(vi, input_shapes))
        else:  # a sequence or an optional: its shapes (or example values) fix it
            given = (input_values or {}).get(vi.name, input_shapes.get(vi.name))
            ctx.values[vi.name] = structured_input(graph, vi, given)
    for n in nodes:
        convert_node(ctx, n)
    graph.set_outputs(pair for o in og.output for pair in flat_outputs(o.name, ctx.values[o.name]))
    add_length_outputs(graph, ctx.lengths)
    prune_unused(graph)
    return graph


def convert_node(ctx: ImportContext, n: onnx.NodeProto) -> None:
    """Add node `n`'s ops to the graph and bind its outputs' names."""
    dynamic = any(ctx.values.get(name) in ctx.lengths for name in n.input if name)
    before = set(ctx.graph.nx.nodes) if dynamic else set()
    try:
        if dynamic and op_key(n) in RUNTIME_SHAPE:
            outs = RUNTIME_SHAPE[op_key(n)](ctx, n)
        else:
            outs = CONVERTERS[op_key(n)](ctx, n)
        if dynamic:
            follow(ctx.graph, ctx.lengths, [v for v in ctx.graph.nx.nodes if v not in before], node_label(n))
    except TirError:
        raise
    except Exception as e:  # a converter bug or a malformed node: name the node
        raise ModelError(f"{node_label(n)}: cannot convert: {type(e).__name__}: {e}") from e
    for name, v in zip(n.output, outs, strict=False):
        if name:
            ctx.values[name] = v


def prune_unused(graph: Graph) -> None:
    """Drop nodes no output depends on (shape computations folded at import)."""
    live: set[int] = set()
    for _, v in graph.outputs:
        live.add(v.node)
        live |= nx.ancestors(graph.nx, v.node)
    for nid in list(graph.nx.nodes):
        if nid not in live and graph.node(nid).op != "input":
            graph.remove_node(nid)
