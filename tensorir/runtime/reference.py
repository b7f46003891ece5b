"""Run a graph with the numpy reference of every op: the oracle for compiled code."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tensorir.errors import InputError, TirError
from tensorir.graph.graph import Graph, Value
from tensorir.graph.types import TensorType, np_dtype
from tensorir.ops.registry import get_op


def check_inputs(g: Graph, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Match named inputs to the graph's inputs; one clear error for any mismatch."""
    expected = {g.node(n).name: g.node(n).outputs[0] for n in g.graph_inputs()}
    unknown = sorted(set(inputs) - set(expected))
    if unknown:
        raise InputError(f"unknown input {unknown[0]!r}; the model's inputs are {sorted(expected)}")
    missing = sorted(set(expected) - set(inputs))
    if missing:
        raise InputError(f"missing input {missing[0]!r}; the model's inputs are {sorted(expected)}")
    out = {}
    for name, t in expected.items():
        a = np.asarray(inputs[name])
        if tuple(a.shape) != t.shape:
            raise InputError(f"input {name!r} has shape {list(a.shape)}, the model expects {list(t.shape)}")
        if a.dtype != np_dtype(t.dtype):
            if not np.can_cast(a.dtype, np_dtype(t.dtype), "same_kind"):
                raise InputError(f"input {name!r} has dtype {a.dtype}, the model expects {t.dtype}")
            a = a.astype(np_dtype(t.dtype))
        out[name] = a
    return out


def run_node(g: Graph, nid: int, args: list[np.ndarray]) -> list[np.ndarray]:
    node = g.node(nid)
    outs = get_op(node.op).run_reference(args, node.attr)
    for i, (o, t) in enumerate(zip(outs, node.outputs, strict=True)):
        if TensorType.of(o) != TensorType(t.shape, t.dtype):
            raise TirError(
                f"reference of node '{node.name or nid}' ({node.op}) output {i} gave "
                f"{TensorType.of(o)}, shape inference said {t}"
            )
    return outs


def run_reference(g: Graph, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """Execute `g` on numpy arrays; returns outputs in graph output order."""
    feeds = check_inputs(g, inputs)
    values: dict[Value, np.ndarray] = {}
    for nid in g.topo_order():
        node = g.node(nid)
        if node.op == "input":
            values[Value(nid)] = feeds[node.name]
        elif node.op == "constant":
            values[Value(nid)] = node.value
        else:
            args = [values[v] for v in g.inputs_of(nid)]
            for i, o in enumerate(run_node(g, nid, args)):
                values[Value(nid, i)] = o
    return [values[v] for _, v in g.outputs]
