"""cse: common-subexpression elimination.

Two op nodes with the same op, attributes and inputs compute the same values, so the
later one is replaced by the earlier. Constants are merged by value (dtype, shape and
bytes) when they are at most MAX_CONST_BYTES; larger ones (weights) are never compared.
Nodes are visited in topological order, so merging producers first lets their
consumers merge in the same sweep. Before/After:

    %2 = reshape(%x) shape=(4,2) : f32[4,2]
    %3 = reshape(%x) shape=(4,2) : f32[4,2]
    %4 = add(%2, %3) : f32[4,2]
    ->
    %2 = reshape(%x) shape=(4,2) : f32[4,2]
    %4 = add(%2, %2) : f32[4,2]
"""

from __future__ import annotations

from collections.abc import Hashable

from tensorir.graph.graph import Graph, Value
from tensorir.passes import replace

MAX_CONST_BYTES = 16 * 1024


def cse(g: Graph) -> bool:
    """Merge duplicate nodes and small duplicate constants; True if any was merged."""
    seen: dict[Hashable, int] = {}
    changed = False
    for nid in g.topo_order():
        key = _key(g, nid) if nid in g.nx else None
        if key is None:
            continue
        first = seen.setdefault(key, nid)
        if first != nid:
            n_out = len(g.node(nid).outputs)
            changed = replace(g, nid, [Value(first, i) for i in range(n_out)])
    return changed


def _key(g: Graph, nid: int) -> Hashable | None:
    """What makes two nodes interchangeable; None for nodes never merged."""
    node = g.node(nid)
    if node.op == "input":
        return None
    if node.op == "constant":
        v = node.value
        if v is None or v.nbytes > MAX_CONST_BYTES:
            return None
        return ("constant", v.dtype.name, v.shape, v.tobytes())
    key = (node.op, node.attrs, tuple(g.inputs_of(nid)), g.guards.get(nid, ()))  # not across branches
    try:
        hash(key)
    except TypeError:  # an attribute holding an array
        return None
    return key
