"""conv1d_lift: 1-D convolutions and pools as 2-D ones of unit height, so they take the packed
layout and the 2-D conv and pool schedules (direct, im2col, the tuner's knobs), as MNN's converter
and TVM's CPU conv1d do; the reshapes that add and drop the unit axis then sink through the
elementwise ops and slices between the convs, where they meet and cancel (simplify's
reshape chain), so a 1-D conv chain stays 4-D, and packed, from its first conv to its last.

Before, a rank-3 `conv` had only the generic loop nest: Silero VAD's STFT conv (258 filters
of 256 taps, stride 128) ran at 10 GFLOP/s and the whole model at 2.8x onnxruntime.

- conv(x: [N,C,L], w: [M,C/g,K], b) -> reshape(conv(reshape(x, [N,C,1,L]), w', b), [N,M,Lo]),
  w' = w with a unit axis at 2 (a constant reshaped here, a run-time weight by a reshape op);
  strides (s,) -> (1,s), pads (p0,p1) -> (0,p0,0,p1), dilations (d,) -> (1,d).
- max_pool / avg_pool / global_*_pool of a rank-3 x: likewise (kernel_shape (k,) -> (1,k)),
  every output reshaped back (max_pool's flat indices are the same numbers).
- elementwise(drop2(y), ...) -> drop2(elementwise(y, ...)), where drop2(y) is a reshape of a
  4-D y with y.shape[2] == 1 that drops that axis, when every other input is drop2 of a
  value of y's shape, a rank-3 value of the output's shape (lifted by a reshape, a view) or
  a constant of rank <= 3 (given the unit axis at compile time);
- slice(drop2(y), axes) -> drop2(slice(y, axes moved past the unit axis)).

Before/After (conv -> relu -> conv, 1-D; then simplify drops the reshape pair between them):

    %3 = conv(%x, %c1, %c2) dilations=(1,) group=1 pads=(1,1) strides=(1,) : f32[1,8,16]
    %4 = relu(%3) : f32[1,8,16]
    %6 = conv(%4, %c5) dilations=(1,) group=1 pads=(1,1) strides=(2,) : f32[1,6,8]
    ->
    %7 = reshape(%x) shape=(1,4,1,16) : f32[1,4,1,16]
    %9 = conv(%7, %c8, %c2) dilations=(1,1) group=1 pads=(0,1,0,1) strides=(1,1) : f32[1,8,1,16]
    %11 = relu(%9) : f32[1,8,1,16]
    %15 = conv(%11, %c14) dilations=(1,1) group=1 pads=(0,1,0,1) strides=(1,2) : f32[1,6,1,8]
    %16 = reshape(%15) shape=(1,6,8) : f32[1,6,8]
"""

from __future__ import annotations

import numpy as np

from tensorir.graph.graph import Graph, Value
from tensorir.ops.registry import is_elementwise
from tensorir.passes import Rule, add_op, const_of, replace, rewrite


def conv1d_lift(g: Graph) -> bool:
    """Lift 1-D convs to 2-D and sink the unit-axis reshapes (elementwise ops by trait)."""
    rules: list[Rule] = list(RULES)
    for nid in g.op_nodes():
        op = g.node(nid).op
        if is_elementwise(op) and (op, sink_elementwise) not in rules:
            rules.append((op, sink_elementwise))
    return rewrite(g, rules)


def _unit2(shape: tuple[int, ...]) -> tuple[int, ...]:
    """shape (rank 3) with a unit axis inserted at 2."""
    return (*shape[:2], 1, *shape[2:])


def _reshaped(g: Graph, v: Value, shape: tuple[int, ...]) -> Value:
    c = const_of(g, v)
    if c is not None:
        return g.add_const(np.ascontiguousarray(c.reshape(shape)))
    return add_op(g, "reshape", [v], {"shape": shape})


def lift_conv(g: Graph, nid: int) -> bool:
    node = g.node(nid)
    ins = g.inputs_of(nid)
    x, w = ins[0], ins[1]
    tx, tw = g.type_of(x), g.type_of(w)
    if tx.ndim != 3 or tw.ndim != 3 or len(node.outputs) != 1:
        return False
    attrs = _window_2d({"strides": (1,), "dilations": (1,), "pads": (0, 0), **node.attr})
    x4 = _reshaped(g, x, _unit2(tx.shape))
    w4 = _reshaped(g, w, _unit2(tw.shape))
    y4 = add_op(g, "conv", [x4, w4, *ins[2:]], attrs)
    return replace(g, nid, [add_op(g, "reshape", [y4], {"shape": node.outputs[0].shape})])


def _window_2d(attrs: dict) -> dict:
    """1-D window attributes for (H=1, W): kernel_shape, strides, dilations (a,) -> (1, a);
    pads (b, e) -> (0, b, 0, e); absent or None ones stay so."""
    out = dict(attrs)
    for key in ("kernel_shape", "strides", "dilations", "pads"):
        v = out.get(key)
        if v is not None:
            v = tuple(int(a) for a in v)
            out[key] = (0, v[0], 0, v[1]) if key == "pads" else (1, *v)
    return out


def lift_pool(g: Graph, nid: int) -> bool:
    """A 1-D max / avg / global pool as the 2-D one over (1, L); max_pool's flat indices are
    the same numbers with or without the unit axis."""
    node = g.node(nid)
    (x,) = g.inputs_of(nid)
    tx = g.type_of(x)
    if tx.ndim != 3:
        return False
    outs = g.add_node(node.op, [_reshaped(g, x, _unit2(tx.shape))], _window_2d(node.attr))
    return replace(
        g,
        nid,
        [add_op(g, "reshape", [y], {"shape": t.shape}) for y, t in zip(outs, node.outputs, strict=True)],
    )


def _dropped(g: Graph, v: Value) -> Value | None:
    """y when v = reshape(y) drops the unit axis 2 of a 4-D y."""
    node = g.node(v.node)
    if node.op != "reshape":
        return None
    y = g.inputs_of(v.node)[0]
    ty, tv = g.type_of(y), g.type_of(v)
    if ty.ndim == 4 and ty.shape[2] == 1 and tv.shape == ty.shape[:2] + ty.shape[3:]:
        return y
    return None


def _can_lift(g: Graph, v: Value, shape3: tuple[int, ...]) -> bool:
    c = const_of(g, v)
    if c is not None:
        return c.ndim <= 3
    return _dropped(g, v) is not None or g.type_of(v).shape == shape3


def _lifted(g: Graph, v: Value, shape3: tuple[int, ...]) -> Value:
    """The operand that stands for v (`_can_lift`) beside 4-D values: y of drop2(y), a
    constant given the unit axis, a rank-3 value of `shape3` reshaped (a view)."""
    y = _dropped(g, v)
    if y is not None:
        return y
    c = const_of(g, v)
    if c is None:
        return add_op(g, "reshape", [v], {"shape": _unit2(shape3)})
    if c.ndim == 0:
        return v
    return g.add_const(np.ascontiguousarray(c.reshape(_unit2((1,) * (3 - c.ndim) + c.shape))))


def sink_elementwise(g: Graph, nid: int) -> bool:
    node = g.node(nid)
    ins = g.inputs_of(nid)
    if len(node.outputs) != 1 or node.outputs[0].ndim != 3:
        return False
    shape3 = node.outputs[0].shape
    if not any(_dropped(g, v) is not None for v in ins):
        return False
    if not all(_can_lift(g, v, shape3) for v in ins):
        return False
    y = add_op(g, node.op, [_lifted(g, v, shape3) for v in ins], node.attr)
    return replace(g, nid, [add_op(g, "reshape", [y], {"shape": shape3})])


def sink_slice(g: Graph, nid: int) -> bool:
    node = g.node(nid)
    ins = g.inputs_of(nid)
    y = _dropped(g, ins[0])
    if y is None or len(ins) != 1 or "axes" not in node.attr:
        return False
    axes = tuple(int(a) % 3 for a in node.attr["axes"])
    moved = tuple(a + (a >= 2) for a in axes)
    z = add_op(g, "slice", [y], {**node.attr, "axes": moved})
    return replace(g, nid, [add_op(g, "reshape", [z], {"shape": node.outputs[0].shape})])


RULES: list[Rule] = [
    ("conv", lift_conv),  # conv 1-D -> reshape(conv 2-D of unit height)
    *((op, lift_pool) for op in ("max_pool", "avg_pool", "global_max_pool", "global_avg_pool")),
    ("slice", sink_slice),  # slice(drop2(y)) -> drop2(slice(y))
]
