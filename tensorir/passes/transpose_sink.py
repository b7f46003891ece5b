"""transpose_sink: move transposes down through the ops that commute with them, so that the
pairs a channels-last (NHWC) model leaves between layers meet and cancel (simplify's
transpose_chain), and the layout pass sees NCHW convolution chains with nothing between.

The TensorFlow frontend imports an NHWC Conv2D as transpose(NHWC->NCHW) -> conv ->
transpose(NCHW->NHWC); the bias add, batch norm (mul + add), activation, zero pad and
residual add after it run in NHWC. Rules, each keeping results bit for bit:

- elementwise(transpose(x, p), c, ...) -> transpose(elementwise(x, c', ...), p), when every
  other input is a transpose with the same p, a constant (c' = c permuted back) or a scalar;
- pad(transpose(x, p)) -> transpose(pad(x, pads permuted back), p);
- reduce_*(transpose(x, p), axes) -> reduce_*(x, p[axes]) (+ a transpose of the kept axes
  if they come out in another order; none for NHWC global pooling);
- concat(transpose(x_i, p), axis) -> transpose(concat(x_i, p[axis]), p); slice likewise;
- conv(pad(x, zeros on the spatial axes)) -> conv(x) with the pads added to its own;
- reduce_mean / reduce_max over (2, 3) of a 4-D tensor -> global_avg_pool / global_max_pool
  (+ reshape), the forms the layout pass packs.

Before/After (MobileNet's conv -> batch norm -> relu6 -> conv in NHWC):

    %3 = conv(%2, %w) : f32[1,8,8,8]
    %4 = transpose(%3) perm=(0,2,3,1) : f32[1,8,8,8]
    %5 = clip(%4) max=6 min=0 : f32[1,8,8,8]
    %6 = transpose(%5) perm=(0,3,1,2) : f32[1,8,8,8]
    %7 = conv(%6, %w2) : ...
    ->
    %8 = clip(%3) max=6 min=0 : f32[1,8,8,8]
    %7 = conv(%8, %w2) : ...
"""

from __future__ import annotations

import numpy as np

from tensorir.graph.graph import Graph, Value
from tensorir.ops.registry import is_elementwise
from tensorir.passes import Rule, add_op, const_of, replace, rewrite

REDUCTIONS = ("reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod")
GLOBAL_POOL = {"reduce_mean": "global_avg_pool", "reduce_max": "global_max_pool"}


def transpose_sink(g: Graph) -> bool:
    """Apply the rules above until none fires (elementwise ops by trait, so every op node
    is tried)."""
    rules = list(RULES)
    for nid in g.op_nodes():
        op = g.node(nid).op
        if is_elementwise(op) and (op, sink_elementwise) not in rules:
            rules.append((op, sink_elementwise))
    return rewrite(g, rules)


def _transposed(g: Graph, v: Value) -> tuple[Value, tuple[int, ...]] | None:
    """(x, p) when v = transpose(x, p)."""
    node = g.node(v.node)
    if node.op != "transpose":
        return None
    return g.inputs_of(v.node)[0], tuple(node.attr["perm"])


def _inverse(perm: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argsort(perm))


def _first_perm(g: Graph, ins: list[Value]) -> tuple[int, ...] | None:
    for v in ins:
        t = _transposed(g, v)
        if t is not None:
            return t[1]
    return None


def _can_back(g: Graph, v: Value, perm: tuple[int, ...]) -> bool:
    """Whether v is a transpose by perm or a constant of rank <= len(perm)."""
    t = _transposed(g, v)
    if t is not None:
        return t[1] == perm
    c = const_of(g, v)
    return c is not None and c.ndim <= len(perm)


def _back(g: Graph, v: Value, perm: tuple[int, ...]) -> Value:
    """The operand that, transposed by perm, gives v (_can_back holds): x of transpose(x, perm),
    a constant permuted back, a scalar as it is."""
    t = _transposed(g, v)
    if t is not None:
        return t[0]
    c = const_of(g, v)
    assert c is not None
    if c.size == 1 and c.ndim == 0:
        return v
    full = c.reshape((1,) * (len(perm) - c.ndim) + c.shape)
    return g.add_const(np.ascontiguousarray(full.transpose(_inverse(perm))))


def sink_elementwise(g: Graph, nid: int) -> bool:
    node = g.node(nid)
    ins = g.inputs_of(nid)
    perm = _first_perm(g, ins)
    if perm is None or len(node.outputs) != 1 or node.outputs[0].ndim != len(perm):
        return False
    if any(g.type_of(v).ndim != len(perm) for v in ins if _transposed(g, v) is not None):
        return False
    if not all(_can_back(g, v, perm) for v in ins):
        return False
    args = [_back(g, v, perm) for v in ins]
    y = add_op(g, node.op, args, node.attr)
    return replace(g, nid, [add_op(g, "transpose", [y], {"perm": perm})])


def sink_pad(g: Graph, nid: int) -> bool:
    node = g.node(nid)
    ins = g.inputs_of(nid)
    t = _transposed(g, ins[0])
    if t is None or len(ins) != 1:
        return False
    x, perm = t
    r, pads = len(perm), node.attr["pads"]
    inv = _inverse(perm)
    new = tuple(pads[inv[j]] for j in range(r)) + tuple(pads[r + inv[j]] for j in range(r))
    y = add_op(g, "pad", [x], {**node.attr, "pads": new})
    return replace(g, nid, [add_op(g, "transpose", [y], {"perm": perm})])


def sink_reduce(g: Graph, nid: int) -> bool:
    node = g.node(nid)
    t = _transposed(g, g.inputs_of(nid)[0])
    axes = node.attr.get("axes")
    if t is None or axes is None:
        return False
    x, perm = t
    keep = int(node.attr.get("keepdims", 1))
    new_axes = tuple(sorted(perm[a] for a in axes))
    y = add_op(g, node.op, [x], {**node.attr, "axes": new_axes})
    if keep:
        return replace(g, nid, [add_op(g, "transpose", [y], {"perm": perm})])
    kept = [perm[i] for i in range(len(perm)) if i not in axes]
    order = sorted(kept)
    q = tuple(order.index(v) for v in kept)
    if q != tuple(range(len(q))):
        y = add_op(g, "transpose", [y], {"perm": q})
    return replace(g, nid, [y])


def sink_concat(g: Graph, nid: int) -> bool:
    ins = g.inputs_of(nid)
    ts = [_transposed(g, v) for v in ins]
    if any(t is None for t in ts) or len({t[1] for t in ts}) != 1:  # type: ignore[index]
        return False
    perm = ts[0][1]  # type: ignore[index]
    axis = perm[g.node(nid).attr["axis"]]
    y = add_op(g, "concat", [t[0] for t in ts], {"axis": axis})  # type: ignore[index]
    return replace(g, nid, [add_op(g, "transpose", [y], {"perm": perm})])


def sink_slice(g: Graph, nid: int) -> bool:
    t = _transposed(g, g.inputs_of(nid)[0])
    if t is None:
        return False
    x, perm = t
    a = g.node(nid).attr
    rows = sorted(zip((perm[ax] for ax in a["axes"]), a["starts"], a["ends"], a["steps"], strict=True))
    attrs = {k: tuple(r[i] for r in rows) for i, k in enumerate(("axes", "starts", "ends", "steps"))}
    y = add_op(g, "slice", [x], attrs)
    return replace(g, nid, [add_op(g, "transpose", [y], {"perm": perm})])


def pad_into_conv(g: Graph, nid: int) -> bool:
    """conv(pad(x)) -> conv(x) with larger pads, for a zero pad of the spatial axes only."""
    node = g.node(nid)
    ins = g.inputs_of(nid)
    p = g.node(ins[0].node)
    if p.op != "pad" or p.attr.get("mode", "constant") != "constant" or p.attr.get("value", 0) != 0:
        return False
    r = g.type_of(ins[0]).ndim
    pads = p.attr["pads"]
    if any(pads[i] or pads[r + i] for i in (0, 1)) or min(pads) < 0:
        return False
    nsp = r - 2
    own = node.attr.get("pads") or (0,) * (2 * nsp)
    merged = tuple(own[i] + pads[2 + i] for i in range(nsp)) + tuple(
        own[nsp + i] + pads[r + 2 + i] for i in range(nsp)
    )
    x = g.inputs_of(ins[0].node)[0]
    return replace(g, nid, [add_op(g, "conv", [x, *ins[1:]], {**node.attr, "pads": merged})])


def global_pool(g: Graph, nid: int) -> bool:
    """reduce_mean / reduce_max over (2, 3) of N x C x H x W -> the global pool."""
    node = g.node(nid)
    (x,) = g.inputs_of(nid)
    t = g.type_of(x)
    if t.ndim != 4 or tuple(node.attr.get("axes") or ()) != (2, 3):
        return False
    y = add_op(g, GLOBAL_POOL[node.op], [x])
    if not node.attr.get("keepdims", 1):
        y = add_op(g, "reshape", [y], {"shape": t.shape[:2]})
    return replace(g, nid, [y])


RULES: list[Rule] = [
    ("pad", sink_pad),
    *((op, sink_reduce) for op in REDUCTIONS),
    ("concat", sink_concat),
    ("slice", sink_slice),
    ("conv", pad_into_conv),
    ("reduce_mean", global_pool),
    ("reduce_max", global_pool),
]
