"""Operation counts per graph node (a multiply-add counts as 2 FLOPs).

Each op's count is its `flops` trait, declared where the op is registered (conv.py,
nn.py, pool.py, ...; default one per output element): `tensorir.ops.registry.op_flops`.
"""

from __future__ import annotations

from tensorir.graph.graph import Graph


def node_flops(g: Graph, nid: int) -> int:
    """The FLOPs of node `nid` (0 for inputs and constants)."""
    from tensorir.ops.registry import op_flops

    node = g.node(nid)
    ins = [g.type_of(v) for v in g.inputs_of(nid)]
    out = node.outputs[0] if node.outputs else None
    if node.op in ("input", "constant") or out is None:
        return 0

    return op_flops(node.op, ins, node.attr, out)


def graph_flops(g: Graph) -> int:
    """The FLOPs of all op nodes of `g`."""
    return sum(node_flops(g, n) for n in g.op_nodes())
