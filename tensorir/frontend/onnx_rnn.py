"""Converters for ONNX's recurrent ops: LSTM, GRU, RNN (opset 7 onward, `layout` from 14).

A recurrent node becomes two kernels (see ops/rnn.py):

    xproj = dense(X as (steps, input), W as (dirs*G*H, input)) + biases   one GEMM, every step
    Y, Y_h[, Y_c] = recurrence(xproj, R^T, h0[, c0][, lens][, P][, Rbh])  the loop over time

R^T is a transpose of R, folded at compile time when R is a constant. Biases: Wb + Rb is added
to the projection, except GRU's Rbh under linear_before_reset, which the reset gate multiplies
(it goes to the recurrence). Absent initial states are zeros; absent or constant full-length
sequence lengths mean no masking.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx

from tensorir.errors import ModelError
from tensorir.frontend.onnx import ImportContext, converter, node_label
from tensorir.graph.graph import Value
from tensorir.ops.rnn import ACTIVATIONS, DEFAULT_ACTS, GATES, NUM_ACTS, Act, state_shape
from tensorir.ops.tensor import normalize_slice

DIRECTIONS = {"forward": ("forward",), "reverse": ("reverse",), "bidirectional": ("forward", "reverse")}


def _activations(
    node: onnx.NodeProto, attrs: dict[str, Any], cell: str, dirs: int
) -> tuple[tuple[Act, ...], ...]:
    """Per direction, the (name, alpha, beta) of each activation; alphas and betas are
    consumed in order by the activations that use them (as onnxruntime does)."""
    n = NUM_ACTS[cell]
    names = list(attrs.get("activations") or DEFAULT_ACTS[cell] * dirs)
    if len(names) != n * dirs:
        raise ModelError(f"{node_label(node)}: {len(names)} activations, expected {n * dirs}")
    alphas, betas = list(attrs.get("activation_alpha") or []), list(attrs.get("activation_beta") or [])
    canon = {k.lower(): k for k in ACTIVATIONS}
    out: list[Act] = []
    for name in names:
        key = canon.get(str(name).lower())
        if key is None:
            raise ModelError(f"{node_label(node)}: unknown activation '{name}'")
        uses_a, uses_b, alpha, beta = ACTIVATIONS[key]
        if uses_a and alphas:
            alpha = float(alphas.pop(0))
        if uses_b and betas:
            beta = float(betas.pop(0))
        out.append((key, float(alpha), float(beta)))
    return tuple(tuple(out[d * n : (d + 1) * n]) for d in range(dirs))


def _slice(ctx: ImportContext, node: onnx.NodeProto, v: Value, axis: int, start: int, end: int) -> Value:
    attrs = normalize_slice(ctx.type_of(v).shape, [start], [end], [axis])
    return ctx.add("slice", [v], attrs, node=node)[0]


def _reshape(ctx: ImportContext, node: onnx.NodeProto, v: Value, shape: tuple[int, ...]) -> Value:
    return ctx.add("reshape", [v], {"shape": shape}, node=node)[0]


def _projection(ctx: ImportContext, node: onnx.NodeProto, cell: str, lbr: int) -> tuple[Value, Value | None]:
    """(xproj, rbh): X W^T plus the biases added outside the recurrence, (seq|batch, batch|seq,
    dirs, G*H); GRU's Rbh apart under linear_before_reset (None without a bias)."""
    x, w = ctx.input(node, 0), ctx.input(node, 1)
    a, b, inp = ctx.type_of(x).shape
    dirs, gh, _ = ctx.type_of(w).shape
    flat_x = _reshape(ctx, node, x, (a * b, inp))
    (xp,) = ctx.add("dense", [flat_x, _reshape(ctx, node, w, (dirs * gh, inp))], node=node)
    rbh = None
    if ctx.has_input(node, 3):
        bias = ctx.input(node, 3)
        wb, rb = _slice(ctx, node, bias, 1, 0, gh), _slice(ctx, node, bias, 1, gh, 2 * gh)
        if cell == "gru" and lbr:
            hidden = gh // 3
            rbh = _slice(ctx, node, rb, 1, 2 * hidden, gh)
            zeros = ctx.const(np.zeros((dirs, hidden), ctx.type_of(rb).dtype))
            zr = _slice(ctx, node, rb, 1, 0, 2 * hidden)
            (rb,) = ctx.add("concat", [zr, zeros], {"axis": 1}, node=node)
        (total,) = ctx.add("add", [wb, rb], node=node)
        (xp,) = ctx.add("add", [xp, _reshape(ctx, node, total, (dirs * gh,))], node=node)
    return _reshape(ctx, node, xp, (a, b, dirs, gh)), rbh


def _state(ctx: ImportContext, node: onnx.NodeProto, i: int, shape: tuple[int, ...], dtype: str) -> Value:
    if ctx.has_input(node, i):
        return ctx.input(node, i)
    return ctx.const(np.zeros(shape, dtype))


def _lens(ctx: ImportContext, node: onnx.NodeProto, seq: int) -> Value | None:
    """The sequence lengths as int32, or None when absent or a constant of full lengths."""
    if not ctx.has_input(node, 4):
        return None
    v = ctx.input(node, 4)
    producer = ctx.graph.node(v.node)
    if producer.op == "constant" and np.all(np.asarray(producer.value) == seq):
        return None
    if ctx.type_of(v).dtype != "int32":
        (v,) = ctx.add("cast", [v], {"to": "int32"}, node=node)
    return v


@converter("LSTM", "GRU", "RNN")
def recurrent(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    cell = node.op_type.lower()
    attrs = ctx.attrs(node)
    direction = str(attrs.get("direction", "forward"))
    if direction not in DIRECTIONS:
        raise ModelError(f"{node_label(node)}: unknown direction '{direction}'")
    layout = int(attrs.get("layout", 0))
    lbr = int(attrs.get("linear_before_reset", 0)) if cell == "gru" else 0
    x, r = ctx.input(node, 0), ctx.input(node, 2)
    xt, rtype = ctx.type_of(x), ctx.type_of(r)
    if xt.ndim != 3 or rtype.ndim != 3 or ctx.type_of(ctx.input(node, 1)).ndim != 3:
        raise ModelError(f"{node_label(node)}: X, W and R must be 3-D, X is {list(xt.shape)}")
    dirs, gh, hidden = rtype.shape
    if dirs != len(DIRECTIONS[direction]) or gh != GATES[cell] * hidden:
        raise ModelError(f"{node_label(node)}: R is {list(rtype.shape)} for direction '{direction}'")
    seq, batch = (xt.shape[1], xt.shape[0]) if layout else xt.shape[:2]
    xproj, rbh = _projection(ctx, node, cell, lbr)
    (rt,) = ctx.add("transpose", [r], {"perm": (0, 2, 1)}, node=node)
    shape = state_shape(layout, dirs, batch, hidden)
    ins = [xproj, rt, _state(ctx, node, 5, shape, xt.dtype)]
    if cell == "lstm":
        ins.append(_state(ctx, node, 6, shape, xt.dtype))
    lens = _lens(ctx, node, seq)
    peep = cell == "lstm" and ctx.has_input(node, 7)
    ins += [v for v in (lens, ctx.input(node, 7) if peep else None, rbh) if v is not None]
    clip = attrs.get("clip")
    out = {
        "cell": cell,
        "layout": layout,
        "directions": DIRECTIONS[direction],
        "acts": _activations(node, attrs, cell, dirs),
        "clip": None if clip is None else float(clip),
        "lens": lens is not None,
        "peepholes": peep,
        "rbh": rbh is not None,
        "linear_before_reset": lbr,
        "input_forget": int(attrs.get("input_forget", 0)) if cell == "lstm" else 0,
    }
    if math.prod(xt.shape) == 0:
        raise ModelError(f"{node_label(node)}: empty input {list(xt.shape)}")
    return ctx.add("recurrence", ins, out, node=node)
