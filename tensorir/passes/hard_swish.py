"""hard_swish: Keras's hard-swish, spelled out in arithmetic, becomes the one op.

Keras's MobileNetV3 writes hard-swish as x * (relu6(x + 3) * (1/6)), and TensorFlow freezes it
so: four elementwise ops that fusion leaves as a kernel of their own after the conv (the
add does not fuse into a conv epilogue that also needs the conv's output for the last mul),
where a TFLite export has HARD_SWISH, which fuses. Matched: mul(x, h) with h = mul(clip(add(x,
3), 0, 6), 1/6) or div(clip(add(x, 3), 0, 6), 6), operands of mul and add in either order,
constants of one element. Not bit for bit (hard_swish computes x * clip(x / 6 + 0.5, 0, 1)):
within float32 rounding. Before/After:

    %3 = add(%x, %c1) : f32[1,16,8,8]            (%c1 = 3)
    %4 = clip(%3) max=6 min=0 : f32[1,16,8,8]
    %5 = mul(%4, %c2) : f32[1,16,8,8]            (%c2 = 1/6)
    %6 = mul(%x, %5) : f32[1,16,8,8]
    ->
    %7 = hard_swish(%x) : f32[1,16,8,8]
"""

from __future__ import annotations

import numpy as np

from tensorir.graph.graph import Graph, Value
from tensorir.passes import Rule, add_op, const_of, replace, rewrite
from tensorir.passes.simplify import _producer


def hard_swish(g: Graph) -> bool:
    """Replace every spelled-out hard-swish by the op."""
    return rewrite(g, RULES)


def _scalar(g: Graph, v: Value) -> float | None:
    c = const_of(g, v)
    return float(np.asarray(c).reshape(-1)[0]) if c is not None and np.size(c) == 1 else None


def _gate_of(g: Graph, h: Value) -> Value | None:
    """x when h = relu6(x + 3) / 6 (as mul by 1/6 or div by 6), else None."""
    node = g.node(h.node)
    if node.op not in ("mul", "div"):
        return None
    ins = g.inputs_of(h.node)
    pairs = [(ins[0], ins[1])] if node.op == "div" else [(ins[0], ins[1]), (ins[1], ins[0])]
    want = 6.0 if node.op == "div" else 1.0 / 6.0
    for r, k in pairs:
        c = _scalar(g, k)
        clip = _producer(g, r, "clip")
        if c is None or abs(c - want) > 1e-6 * want or clip is None:
            continue
        at = g.node(clip).attr
        add = _producer(g, g.inputs_of(clip)[0], "add")
        if at.get("min") != 0 or at.get("max") != 6 or add is None:
            continue
        a, b = g.inputs_of(add)
        for x, three in ((a, b), (b, a)):
            if _scalar(g, three) == 3.0:
                return x
    return None


def from_parts(g: Graph, nid: int) -> bool:
    p, q = g.inputs_of(nid)
    out = g.node(nid).outputs[0]
    for x, h in ((p, q), (q, p)):
        if _gate_of(g, h) == x and g.type_of(x).shape == out.shape and g.type_of(x).dtype == out.dtype:
            return replace(g, nid, [add_op(g, "hard_swish", [x])])
    return False


RULES: list[Rule] = [("mul", from_parts)]  # x * (relu6(x + 3) / 6) -> hard_swish(x)
