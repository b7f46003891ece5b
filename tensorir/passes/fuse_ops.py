"""Operator fusion: elementwise epilogues into their producer, elementwise chains together.

Rules, after TVM's FuseOps with the mobile engines' epilogues in mind (the op traits
`pattern="anchor"` / `"elementwise"` in each op's registration, tensorir/ops/registry.py):
- an *anchor* (conv, conv2d_nchwc, conv_transpose, dense, matmul, gemm, avg_pool, the
  global pools; not max_pool) absorbs the chain of elementwise ops that follows it (bias
  add, BN scale/shift, activation, residual add), one consumer at a time, while the chain
  keeps the anchor's output shape and every op but the last is read only inside the group
  and is not a graph output (so SiLU's diamond, x * sigmoid(x), joins whole: on OpenCL
  targets; on CPUs an anchor takes a plain chain, each link read once);
- a run of elementwise ops read only inside it (diamonds included) becomes one injective
  kernel.

Each group of two or more ops becomes one `fused` node (tensorir/ops/fused.py):

    %5 = conv(%x, %w, %b) ...            %9 = fused(%x, %w, %b, %skip) body=conv+add+relu
    %6 = add(%5, %skip)          ->
    %7 = relu(%6)
"""

from __future__ import annotations

from tensorir.graph.graph import Graph, Value
from tensorir.ops.fused import FusedBody, Step
from tensorir.ops.registry import is_anchor, is_elementwise


def _fusible(g: Graph, nid: int, outputs: set[Value]) -> bool:
    """nid's one output may be read inside a kernel: it is not a graph output and no guard
    reads it from memory."""
    v = Value(nid)
    return v not in outputs and len(g.node(nid).outputs) == 1 and not (g.guards and v in g.guard_flags())


def _outside_users(g: Graph, group: list[int]) -> set[int]:
    """The nodes outside `group` that read a member's output."""
    members = set(group)
    return {u for m in group for u, _ in g.consumers(Value(m))} - members


def _closed(g: Graph, group: list[int], outputs: set[Value], chain: bool = False) -> bool:
    """Only the last member is read outside the group (it is the fused node's one output);
    `chain`: and every member but the last has exactly one reader."""
    members = set(group)
    return all(
        _fusible(g, m, outputs)
        and all(u in members for u, _ in g.consumers(Value(m)))
        and not (chain and len(g.consumers(Value(m))) != 1)
        for m in group[:-1]
    )


def _grow(
    g: Graph, start: int, outputs: set[Value], taken: set[int], rank: dict[int, int], chain: bool = False
) -> list[int]:
    """start and the elementwise ops after it that keep start's output type, up to the largest
    group that is closed (every member but the last read only inside it).

    The ops join in dependency order: the earliest node that reads a member is the next
    candidate, so a diamond (x -> sigmoid, x -> mul(x, sigmoid): SiLU) joins whole, and a
    candidate never reads a value computed from a member outside the group (that value's
    first outside reader would have come first). `chain`: no diamonds, each member read
    once (what an anchor takes on CPUs: fuse_ops)."""
    group, best = [start], [start]
    out_type = g.node(start).outputs[0]
    guard = g.guards.get(start) if g.guards else None
    while len(group) < 16:
        if not _fusible(g, group[-1], outputs):
            break
        users = _outside_users(g, group)
        if not users:
            break
        nxt = min(users, key=rank.__getitem__)
        node = g.node(nxt)
        if nxt in taken or not is_elementwise(node.op) or node.outputs[0].shape != out_type.shape:
            break
        if g.guards and g.guards.get(nxt) != guard:
            break  # the two run under different conditions
        group.append(nxt)
        if _closed(g, group, outputs, chain):
            best = list(group)
    return best


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
    if group[0] in g.guards:  # the members share it (_grow)
        g.guards[out.node] = g.guards[group[0]]
    g.replace_uses(Value(group[-1]), out)
    for nid in reversed(group):
        g.remove_node(nid)


def fuse_ops(g: Graph, anchor_diamonds: bool = True) -> bool:
    """Replace every fusible group by one `fused` node; True if anything changed.

    `anchor_diamonds` False: an anchor takes a plain chain (each link read once), as on CPUs,
    where a SiLU in a conv's epilogue measured no faster than its own kernel (ddddocr's
    detector 1.01x, YOLOv8n 0.99x the time, 1 and 2 threads) and an LSTM captcha reader ran
    4% slower; on OpenCL it saves a launch and a round trip per SiLU (YOLOv8n on PoCL: 0.91x)."""
    outputs = {v for _, v in g.outputs}
    taken: set[int] = set()
    groups = []
    order = g.op_nodes()
    rank = {nid: k for k, nid in enumerate(order)}  # readers of op outputs are ops
    for phase in ("anchors", "chains"):
        for nid in order:
            op = g.node(nid).op
            starts = is_anchor(op) if phase == "anchors" else is_elementwise(op)
            if nid in taken or not starts:
                continue
            chain = phase == "anchors" and not anchor_diamonds
            group = _grow(g, nid, outputs, taken, rank, chain)
            if len(group) > 1:
                groups.append(group)
                taken.update(group)
    for group in groups:
        _replace(g, group)
    return bool(groups)
