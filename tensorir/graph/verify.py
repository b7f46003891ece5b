"""Graph verifier: structural and type invariants every pass must keep."""

from __future__ import annotations

import networkx as nx

from tensorir.errors import ModelError
from tensorir.graph.graph import Graph
from tensorir.graph.types import TensorType


def verify(g: Graph) -> None:
    """Raise ModelError naming the first node that breaks an invariant."""
    from tensorir.ops.registry import get_op

    if not nx.is_directed_acyclic_graph(g.nx):
        cycle = nx.find_cycle(g.nx)
        names = [g.node(u).name or str(u) for u, *_ in cycle]
        raise ModelError(f"graph '{g.name}' has a cycle through nodes {names}")
    for nid in g.nx.nodes:
        node = g.node(nid)
        label = f"node '{node.name or nid}' ({node.op})"
        inputs = g.inputs_of(nid)
        slots = sorted(d["dst"] for *_, d in g.nx.in_edges(nid, data=True))
        if slots != list(range(len(slots))):
            raise ModelError(f"{label}: input slots {slots} are not 0..n-1")
        for v in inputs:
            if v.index >= len(g.node(v.node).outputs):
                raise ModelError(f"{label}: reads output {v.index} of a node with fewer outputs")
        if node.op == "input":
            if inputs:
                raise ModelError(f"{label}: an input node has inputs")
            continue
        if node.op == "constant":
            if node.value is None or TensorType.of(node.value) != node.outputs[0]:
                raise ModelError(f"{label}: constant value does not match its type")
            continue
        expected = get_op(node.op).infer([g.type_of(v) for v in inputs], node.attr)
        stored = [TensorType(t.shape, t.dtype) for t in node.outputs]
        if list(expected) != stored:
            raise ModelError(f"{label}: stored types {stored} differ from inferred {expected}")
    for name, v in g.outputs:
        if v.node not in g.nx or v.index >= len(g.node(v.node).outputs):
            raise ModelError(f"graph output '{name}' refers to a missing tensor")
