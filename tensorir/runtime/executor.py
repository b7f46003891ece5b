"""Run a graph node by node with compiled kernels (one kernel per op node).

This is the compiled counterpart of `reference.run_reference`: same inputs, same
outputs, every op through its compute definition, schedule and the target's backend. Whole-model
artifacts (fused groups, planned memory) are built elsewhere; this executor is the
straightforward path the per-op tests and the ONNX backend use.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from tensorir.backends import get_backend
from tensorir.graph.graph import Graph, Value
from tensorir.graph.types import np_dtype
from tensorir.ops.kernel import op_kernel, scratch_arrays
from tensorir.runtime.reference import check_inputs
from tensorir.target import Target, get_target


class CompiledGraph:
    """Every op node of `graph` compiled for a target whose backend can run kernels here."""

    def __init__(self, graph: Graph, target: Target | str = "host") -> None:
        self.graph = graph
        self.target = get_target(target)
        self.kernels: dict[int, Callable[..., None]] = {}
        backend = get_backend(self.target)
        self.scratch: dict[int, list[np.ndarray]] = {}
        for nid in graph.op_nodes():
            node = graph.node(nid)
            in_types = [graph.type_of(v) for v in graph.inputs_of(nid)]
            func = op_kernel(node.op, in_types, node.attr, self.target, name=node.op)
            self.kernels[nid] = backend.jit(func, self.target)
            self.scratch[nid] = scratch_arrays(func)

    def run(self, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        g = self.graph
        feeds = check_inputs(g, inputs)
        values: dict[Value, np.ndarray] = {}
        for nid in g.topo_order():
            node = g.node(nid)
            if node.op == "input":
                values[Value(nid)] = np.require(feeds[node.name], requirements="C")  # keeps 0-d shapes
            elif node.op == "constant":
                values[Value(nid)] = np.require(node.value, requirements="C")
            else:
                args = [values[v] for v in g.inputs_of(nid)]
                outs = [np.empty(t.shape, np_dtype(t.dtype)) for t in node.outputs]
                self.kernels[nid](*args, *outs, *self.scratch[nid])
                for i, o in enumerate(outs):
                    values[Value(nid, i)] = o
        return [values[v] for _, v in g.outputs]
