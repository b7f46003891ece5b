"""Operator fusion: elementwise epilogues into their producer, elementwise chains together.

Rules, after TVM's FuseOps with the mobile engines' epilogues in mind (the op traits
`pattern="anchor"` / `"elementwise"` in each op's registration, tensorir/ops/registry.py):
- an *anchor* (conv, conv2d_nchwc, conv_transpose, dense, matmul, gemm, avg_pool, the
  global pools; not max_pool) absorbs the chain of elementwise ops that follows it (bias
  add, BN scale/shift, activation, residual add), one consumer at a time, while the chain
  keeps the anchor's output shape and each link has a single consumer and is not a graph
  output;
- a run of elementwise ops with single consumers becomes one injective kernel.

Each group of two or more ops becomes one `fused` node (tensorir/ops/fused.py):

    %5 = conv(%x, %w, %b) ...            %9 = fused(%x, %w, %b, %skip) body=conv+add+relu
    %6 = add(%5, %skip)          ->
    %7 = relu(%6)
"""

from __future__ import annotations

from tensorir.graph.graph import Graph, Value
from tensorir.ops.fused import FusedBody, Step
from tensorir.ops.registry import is_anchor, is_elementwise


def _single_use(g: Graph, v: Value, outputs: set[Value]) -> int | None:
    """The one consumer of v, if it has exactly one and is not a graph output."""
    users = g.consumers(v)
    if v in outputs or len(users) != 1 or len(g.node(v.node).outputs) != 1:
        return None
    if g.guards and (v in g.guard_flags() or g.guards.get(users[0][0]) != g.guards.get(v.node)):
        return None  # a guard reads v from memory; or the two run under different conditions
    return users[0][0]


def _grow(g: Graph, start: int, outputs: set[Value], taken: set[int]) -> list[int]:
    """start and the elementwise chain after it that keeps start's output type."""
    group = [start]
    out_type = g.node(start).outputs[0]
    while True:
        nxt = _single_use(g, Value(group[-1]), outputs)
        if nxt is None or nxt in taken or not is_elementwise(g.node(nxt).op):
            return group
        t = g.node(nxt).outputs[0]
        if t.shape != out_type.shape:
            return group
        group.append(nxt)


def _body(g: Graph, group: list[int]) -> tuple[FusedBody, list[Value]]:
    """The fused body of `group` and its external inputs, in first-use order."""
    members = {nid: k for k, nid in enumerate(group)}
    externals: list[Value] = []
    raw = []
    for nid in group:
        args = []
        for v in g.inputs_of(nid):
            if v.node in members:
                args.append(("step", members[v.node]))
            else:
                if v not in externals:
                    externals.append(v)
                args.append(("in", externals.index(v)))
        raw.append((g.node(nid), args))
    n = len(externals)
    steps = tuple(
        Step(node.op, node.attrs, tuple(i if kind == "in" else n + i for kind, i in args))
        for node, args in raw
    )
    anchor = 0 if is_anchor(g.node(group[0]).op) else None
    return FusedBody(steps, n, anchor), externals


def _replace(g: Graph, group: list[int]) -> None:
    body, externals = _body(g, group)
    names = [g.node(n).name for n in group if g.node(n).name]
    (out,) = g.add_node("fused", externals, {"body": body}, name=names[-1] if names else "")
    if group[0] in g.guards:  # the members share it (_single_use)
        g.guards[out.node] = g.guards[group[0]]
    g.replace_uses(Value(group[-1]), out)
    for nid in reversed(group):
        g.remove_node(nid)


def fuse_ops(g: Graph) -> bool:
    """Replace every fusible group by one `fused` node; True if anything changed."""
    outputs = {v for _, v in g.outputs}
    taken: set[int] = set()
    groups = []
    order = g.op_nodes()
    for phase in ("anchors", "chains"):
        for nid in order:
            op = g.node(nid).op
            starts = is_anchor(op) if phase == "anchors" else is_elementwise(op)
            if nid in taken or not starts:
                continue
            group = _grow(g, nid, outputs, taken)
            if len(group) > 1:
                groups.append(group)
                taken.update(group)
    for group in groups:
        _replace(g, group)
    return bool(groups)
