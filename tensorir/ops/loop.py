"""loop: a block of ops the generated entry runs again and again, a count known only at run time.

An ONNX Loop whose trip count M is a constant is unrolled at import (frontend/onnx_control.py);
one whose M is computed at run time (or absent, with a run-time condition) becomes one `loop`
node whose body is a graph of its own (`LoopBody`):

    loop(trip, cond, c_1..c_n, x_1..x_m) body=<graph> -> c_1'..c_n'

    body graph inputs   iter (int64 scalar), cond (bool scalar), c_1..c_n, x_1..x_m
    body graph outputs  cond' (bool scalar), c_1'..c_n' (each of c_k's type)

Iteration i (from 0) runs while i < trip and cond holds; the body's outputs become the next
iteration's `cond` and carried values c_k. The x_j are values of the enclosing graph the body
reads (captured by name, as ONNX scoping allows). The result is the carried values after the
last iteration (the initial ones when none runs).

The body is compiled as a model of its own (compiler_loop.py) and its kernels are called
inside a loop of the LLVM entry (codegen/entry.py); the reference below runs it with numpy.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from tensorir.errors import ShapeError
from tensorir.graph.types import TensorType
from tensorir.ops.infer import Types
from tensorir.ops.registry import register_op

_ids = itertools.count()


class LoopBody:
    """A `loop` node's body graph: an attribute compared by identity (two loops are never
    one node), printed as `body<k>`; graph/printer.py prints the graph under the node."""

    def __init__(self, graph: Any) -> None:
        self.graph = graph
        self.key = next(_ids)

    def __repr__(self) -> str:
        return f"body{self.key}"

    def carried_types(self) -> list[TensorType]:
        """The types of the body's carried outputs (after cond')."""
        return [self.graph.type_of(v) for _, v in self.graph.outputs[1:]]


def _infer_loop(ins: Types, attrs: dict[str, Any]) -> Types:
    body: LoopBody = attrs["body"]
    n = len(body.carried_types())
    if ins[0] != TensorType((), "int64") or ins[1] != TensorType((), "bool"):
        raise ShapeError(
            f"loop: trip count and condition must be int64 and bool scalars, got {ins[0]}, {ins[1]}"
        )
    carried = [TensorType(t.shape, t.dtype) for t in ins[2 : 2 + n]]
    if carried != body.carried_types():
        raise ShapeError(f"loop: the body turns carried values {carried} into {body.carried_types()}")
    return carried


@register_op("loop", infer=_infer_loop, pattern="opaque")
def loop(trip: np.ndarray, cond: np.ndarray, *values: np.ndarray, body: LoopBody) -> tuple[np.ndarray, ...]:
    from tensorir.runtime.reference import run_reference

    g = body.graph
    n = len(g.outputs) - 1
    carried, captured = list(values[:n]), list(values[n:])
    names = [g.node(nid).name for nid in g.graph_inputs()]
    go = bool(cond)
    for i in range(int(trip)):
        if not go:
            break
        feeds = [np.array(i, np.int64), np.array(go), *carried, *captured]
        outs = run_reference(g, dict(zip(names, feeds, strict=True)))
        go, carried = bool(outs[0]), outs[1:]
    return tuple(np.asarray(c) for c in carried)
