"""fold_qdq: QDQ matrix products and convolutions -> integer `qdense` / `qconv1x1` /
`qdwconv` (ops/qdense.py, qconv.py, qdwconv.py).

The ONNX frontend imports QuantizeLinear / DequantizeLinear as float arithmetic
(frontend/onnx_quant.py). This pass runs on that form, first among the graph passes, and finds

    DQ(x: uint8) --.
          matmul / gemm / 1x1 conv / depthwise conv --[+ bias]--[relu | clip | hard swish]--> Q(uint8)
    DQ(W: int8 constant, zero point 0, per tensor or per output column) --'

with x's and y's scale and zero point per tensor, spelled as the importer writes them:

    DQ(q)  = mul(sub(cast(q, float32), zp), scale)     (or mul(cast(q), scale) without zp)
    Q(y)   = cast(clip(add(round(div(y, scale)), zp), 0, 255), uint8)

and replaces the Q's result by one qdense node (a pointwise conv: qconv1x1, same operands; a
depthwise one: qdwconv, its padding x's zero point; R = S (Q - Z) throughout):

    qdense(x, pack(W), bias_q - x_zp * sum_k W[n, k], x_scale * w_scale[n] / y_scale)
        zero_point = y_zp, clip [max(0, Q(relu / clip min)), min(255, Q(clip max))]

`bias_q` is the int32 bias when the bias is a DQ of int32 at scale x_scale * w_scale (what
onnxruntime's quantize_static writes), else the float bias divided by that scale and rounded.
int8 activations (TFLite's full-integer models) run as uint8 = int8 + 128 with their zero
points shifted alike: an int8 input is shifted once (none between two integer ops), an int8
output shifted back. A transpose between x and its DQ (TFLite's NHWC input) moves onto q, and
`dense` (TFLite's FULLY_CONNECTED) folds like gemm with trans_b.

A relu before the Q is max(Q(y), y_zp): Q is monotone and Q(0) = y_zp. A hard swish (the op,
or x * clip(x + 3, 0, 6) / 6 spelled out) runs on the requantized value before rounding
(attribute hard_swish = y_scale, ops/qdense.py). Anything else is left
as the float path: other dtypes, a float intermediate used twice, K not a multiple of 4.

For a target whose qdense / qconv1x1 products run on ARM's sdot (signed bytes: aarch64 with
dotprod, `sdot_offset`), those ops read x - 128 (attribute x_offset = 128) and their bias
gains 128 * sum_k W[n, k] here, at compile time; qdwconv (float32 window sums) is unchanged.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tensorir.graph.graph import Graph, Value
from tensorir.ops.qconv import pack_conv_weights
from tensorir.ops.qdense import BLOCK, QUAD, offset_bias, pack_weights, sdot_offset
from tensorir.ops.qdwconv import MAX_TAPS
from tensorir.ops.registry import get_op
from tensorir.passes import add_op, replace, rewrite, single_use
from tensorir.passes.canonicalize import hard_swish_input
from tensorir.target import Target, get_target

MIN_KXK_CHANNELS = 8  # input channels from which a QDQ KxK conv runs as im2col + qconv1x1
_CONST_OPS = ("reshape", "cast", "expand", "slice", "unsqueeze")


def fold_qdq(g: Graph, target: Target | str = "host") -> bool:
    """Rewrite every matched QDQ matrix product into qdense / qconv1x1 / qdwconv for `target`;
    True if any was."""
    x_offset = sdot_offset(get_target(target))
    changed = rewrite(g, [("cast", lambda g, nid: _fold(g, nid, x_offset))])
    return rewrite(g, [("conv", lambda g, nid: _fold_float(g, nid, x_offset))]) or changed


def has_int8_convs(g: Graph) -> bool:
    """Whether the pass made integer convolutions: the pipeline then keeps activations in
    NCHW (qconv1x1 has no NCHW[x]c form; on MobileNetV2 the uint8 layout transforms around
    it cost 4x the whole int8 model)."""
    return any(g.node(nid).op in ("qconv1x1", "qdwconv") for nid in g.op_nodes())


# ---- matching --------------------------------------------------------------------------
def _node(g: Graph, v: Value, op: str) -> Any:
    node = g.node(v.node)
    return node if node.op == op else None


def const_value(g: Graph, v: Value, depth: int = 4) -> np.ndarray | None:
    """The value of `v` when it is a constant, possibly behind reshapes / casts of one."""
    node = g.node(v.node)
    if node.op == "constant":
        return node.value
    if node.op not in _CONST_OPS or depth == 0:
        return None
    args = [const_value(g, u, depth - 1) for u in g.inputs_of(v.node)]
    if any(a is None for a in args):
        return None
    return get_op(node.op).run_reference(args, node.attr)[v.index]


def dequant(g: Graph, v: Value) -> tuple[Value, np.ndarray, np.ndarray] | None:
    """(q, scale, zero point) when `v` is the importer's DequantizeLinear of integer `q`."""
    mul = _node(g, v, "mul")
    if mul is None:
        return None
    a, s = g.inputs_of(v.node)
    scale = const_value(g, s)
    if scale is None:
        return None
    zp = np.zeros((), np.int64)
    if _node(g, a, "sub") is not None:
        a, z = g.inputs_of(a.node)
        zp = const_value(g, z)
        if zp is None:
            return None
    cast = _node(g, a, "cast")
    if cast is None:
        return None
    (q,) = g.inputs_of(a.node)
    if not np.issubdtype(np.dtype(g.type_of(q).dtype), np.integer):
        return None
    return q, scale.astype(np.float32), zp.astype(np.int64)


def quant(g: Graph, nid: int) -> tuple[Value, float, int, bool] | None:
    """(y, scale, zero point as uint8, signed) when node `nid` ends the importer's uint8 or
    int8 QuantizeLinear of y (an int8 one's zero point + 128: see `_as_uint8`)."""
    node = g.node(nid)
    signed = node.attr.get("to") == "int8"
    if node.attr.get("to") != "uint8" and not signed:
        return None
    (c,) = g.inputs_of(nid)
    clip = _node(g, c, "clip")
    if clip is None or (clip.attr.get("min"), clip.attr.get("max")) != (
        (-128.0, 127.0) if signed else (0.0, 255.0)
    ):
        return None
    (r,) = g.inputs_of(c.node)
    zp = np.zeros(())
    if _node(g, r, "add") is not None:
        r, z = g.inputs_of(r.node)
        zp = const_value(g, z)
    if zp is None or zp.size != 1 or _node(g, r, "round") is None:
        return None
    (d,) = g.inputs_of(r.node)
    if _node(g, d, "div") is None:
        return None
    y, s = g.inputs_of(d.node)
    scale = const_value(g, s)
    if scale is None or scale.size != 1:
        return None
    return y, float(np.float32(scale.item())), int(zp.item()) + SIGN_SHIFT * signed, signed


# ---- int8 activations (TFLite's): the integer ops take and give uint8 = int8 + 128 -------
SIGN_SHIFT = 128


def _shift(g: Graph, v: Value, by: int, to: str) -> Value:
    wide = add_op(g, "cast", [v], {"to": "int16"})
    return add_op(g, "cast", [add_op(g, "add", [wide, g.add_const(np.array(by, np.int16))])], {"to": to})


def _as_uint8(g: Graph, q: Value) -> Value:
    """int8 q as uint8 q + 128: the uint8 value an integer op gave, when q is its `_shift` back."""
    cast = g.node(q.node)
    if cast.op == "cast" and cast.attr.get("to") == "int8":
        (a,) = g.inputs_of(q.node)
        if g.node(a.node).op == "add" and g.node(g.inputs_of(a.node)[0].node).op == "cast":
            src = g.inputs_of(g.inputs_of(a.node)[0].node)[0]
            shift = const_value(g, g.inputs_of(a.node)[1])
            if g.type_of(src).dtype == "uint8" and shift is not None and int(shift) == -SIGN_SHIFT:
                return src
    return _shift(g, q, SIGN_SHIFT, "uint8")


def _activation(g: Graph, y: Value, scale: float, zp: int) -> tuple[Value, int, int, dict[str, float], int]:
    """(x, the value before a relu / clip / hard swish; lo, hi in y's quantized domain; the
    integer op's attributes for the activation; how many of x's readers the pattern holds)."""
    lo, hi = 0, 255

    def q(r: float) -> int:
        return int(np.clip(np.rint(np.float32(r) / np.float32(scale)) + zp, 0, 255))

    node = g.node(y.node)
    if not single_use(g, y):
        return y, lo, hi, {}, 1
    x = hard_swish_input(g, y, lambda v: _scalar(g, v))
    if x is not None:
        return x, lo, hi, {"hard_swish": float(np.float32(scale))}, len(g.consumers(x))
    if node.op not in ("relu", "clip"):
        return y, lo, hi, {}, 1
    if node.op == "relu":
        lo = max(lo, zp)
    else:
        lo = max(lo, q(node.attr["min"])) if "min" in node.attr else lo
        hi = min(hi, q(node.attr["max"])) if "max" in node.attr else hi
    return g.inputs_of(y.node)[0], lo, hi, {}, 1


def _scalar(g: Graph, v: Value) -> float | None:
    c = const_value(g, v)
    return float(c.reshape(-1)[0]) if c is not None and c.size == 1 else None


def _weights(g: Graph, v: Value, kind: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(W int8 (N, K), w_scale (N,)) of a DQ'd constant operand laid out as `kind` says:
    "kn" (matmul's right operand), "nk" (gemm's with trans_b), "conv" ((Cout, C, 1, 1))."""
    dq = dequant(g, v)
    if dq is None:
        return None
    q, scale, zp = dq
    w = const_value(g, q)
    if w is None or w.dtype != np.int8 or np.any(zp) or (w.ndim != 2 and kind not in ("conv", "dw", "kxk")):
        return None
    s = np.broadcast_to(scale, w.shape)
    if kind == "kn":
        w, s = w.T, s.T
    w, s = w.reshape(w.shape[0], -1), s.reshape(w.shape[0], -1)
    if np.any(s != s[:, :1]):  # not one scale per output column / channel
        return None
    return np.ascontiguousarray(w), np.ascontiguousarray(s[:, 0])


def _bias(g: Graph, v: Value, acc_scale: np.ndarray) -> np.ndarray | None:
    """The bias in int32 units of the accumulator (scale x_scale * w_scale)."""
    dq = dequant(g, v)
    if dq is not None:
        q, scale, zp = dq
        b = const_value(g, q)
        exact = np.broadcast_to(scale, acc_scale.shape) == acc_scale
        if b is not None and b.dtype == np.int32 and not np.any(zp) and np.all(exact):
            return np.broadcast_to(b, acc_scale.shape).astype(np.int64)
        if b is not None and b.size in (1, acc_scale.size):  # another scale (TFLite's): its real value
            f = ((b.astype(np.float64) - zp) * scale).astype(np.float32)
            return np.rint(np.broadcast_to(f.reshape(-1), acc_scale.shape) / acc_scale).astype(np.int64)
    f = const_value(g, v, depth=8) if dq is None else None
    if f is None or f.size not in (1, acc_scale.size):
        return None
    return np.rint(np.broadcast_to(f.reshape(-1), acc_scale.shape) / acc_scale).astype(np.int64)


# ---- the rewrite ---------------------------------------------------------------------
def _fold(g: Graph, nid: int, x_offset: int) -> bool:
    """The Q node `nid` and the product (+ bias, activation) before it -> one integer op."""
    qy = quant(g, nid)
    if qy is None:
        return False
    y, y_scale, y_zp, signed = qy
    if not single_use(g, y):
        return False
    y, lo, hi, act, readers = _activation(g, y, y_scale, y_zp)
    bias_v = None
    if g.node(y.node).op == "add" and len(g.consumers(y)) == readers:
        (y, bias_v), readers = g.inputs_of(y.node), 1
    if len(g.consumers(y)) != readers:
        return False
    out = _integer_op(g, y, bias_v, x_offset, (y_scale, {"zero_point": y_zp, "lo": lo, "hi": hi} | act))
    if out is not None and signed:
        out = _shift(g, out, -SIGN_SHIFT, "int8")
    return out is not None and replace(g, nid, [out])


def _fold_float(g: Graph, nid: int, x_offset: int) -> bool:
    """A QDQ conv whose output is not quantized again (it feeds a residual add, or a hard
    swish read by a squeeze-excite block): the integer product, dequantized in its epilogue
    (float_out; the float ops after it fuse there)."""
    if g.node(nid).op != "conv":
        return False
    y = Value(nid, 0)
    if _anchor_kind(g, y) not in ("conv", "dw", "kxk"):
        return False
    out = _integer_op(g, y, None, x_offset, None)
    return out is not None and replace(g, nid, [out])


def _integer_op(
    g: Graph, y: Value, bias_v: Value | None, x_offset: int, requant: tuple[float, dict[str, Any]] | None
) -> Value | None:
    """The integer op computing the product `y` (+ `bias_v`) from its quantized operands,
    requantized by (y's scale, attributes), or dequantized (float_out) when `requant` is None."""
    ins = g.inputs_of(y.node)
    kind = _anchor_kind(g, y)
    if kind is None:
        return None
    x, perm = dequant(g, ins[0]), None
    if x is None and g.node(ins[0].node).op == "transpose":  # TFLite's NHWC input -> NCHW
        x, perm = dequant(g, g.inputs_of(ins[0].node)[0]), dict(g.node(ins[0].node).attr)
    wts = _weights(g, ins[1], kind)
    if (
        x is None
        or wts is None
        or g.type_of(x[0]).dtype not in ("uint8", "int8")
        or x[1].size != 1
        or x[2].size != 1
    ):
        return None
    if len(ins) == 3:
        if bias_v is not None:
            return None
        bias_v = ins[2]
    (q, x_scale, x_zp), (w, w_scale) = x, wts
    signed = g.type_of(q).dtype == "int8"
    x_zp = x_zp + SIGN_SHIFT * signed
    acc_scale = np.float32(x_scale.item()) * w_scale
    bias = np.zeros(w.shape[0], np.int64) if bias_v is None else _bias(g, bias_v, acc_scale)
    if bias is None or (w.shape[1] % QUAD and kind in ("kn", "nk")):
        return None
    bias = bias - int(x_zp.item()) * w.astype(np.int64).sum(axis=1)
    x_offset = 0 if kind == "dw" or _overflows(offset_bias(bias, w, x_offset)) else x_offset
    bias = offset_bias(bias, w, x_offset)  # a bias that overflows with the offset: none (no sdot)
    if _overflows(bias):
        return None
    if requant is None:
        mult, attrs = acc_scale.astype(np.float32), {"zero_point": 0, "lo": 0, "hi": 255, "float_out": True}
    else:
        mult, attrs = (acc_scale / np.float32(requant[0])).astype(np.float32), dict(requant[1])
    attrs |= {"x_offset": x_offset} if x_offset else {}
    if kind == "dw":  # the padding is x's zero point; the weights keep their (KH, KW) taps
        conv = g.node(y.node).attr
        attrs |= {
            "strides": tuple(conv.get("strides", (1, 1))),
            "pads": tuple(conv.get("pads", (0, 0, 0, 0))),
            "x_zero_point": int(x_zp.item()),
        }
        w = w.reshape(w.shape[0], *g.type_of(ins[1]).shape[2:])
        if w.shape[1] * w.shape[2] > MAX_TAPS:  # beyond float32's exact integer sums
            return None
    xq = _as_uint8(g, q) if signed else q  # nodes are added only once the fold is certain
    xq = xq if perm is None else add_op(g, "transpose", [xq], perm)
    if kind == "kxk":  # the windows as channels (im2col), then a pointwise product over them
        xq, w = _im2col(g, xq, w.reshape(g.type_of(ins[1]).shape), g.node(y.node).attr, int(x_zp.item()))
        kind = "conv"
    emit = {"conv": _qconv1x1, "dw": _qdwconv}.get(kind, _qdense)
    return emit(g, xq, w, bias.astype(np.int32), mult, attrs)


def _overflows(bias: np.ndarray) -> bool:
    return bool(np.any(np.abs(bias) >= 2**31))


def _anchor_kind(g: Graph, y: Value) -> str | None:
    """How the product making `y` holds its weights (see _weights), None if not foldable:
    matmul, gemm without scaling or a transposed left operand, a pointwise 2-D conv ("conv"),
    a depthwise 2-D conv ("dw")."""
    anchor, ins = g.node(y.node), g.inputs_of(y.node)
    a = anchor.attr
    if anchor.op == "matmul" and len(ins) == 2:
        return "kn"
    if anchor.op == "dense" and len(ins) == 2:  # (TFLite's FULLY_CONNECTED) W is (N, K)
        return "nk"
    if anchor.op == "gemm" and a.get("alpha", 1.0) == 1.0 and a.get("beta", 1.0) == 1.0:
        return None if a.get("trans_a", 0) else ("nk" if a.get("trans_b", 0) else "kn")
    if (
        anchor.op != "conv"
        or len(g.type_of(ins[0]).shape) != 4
        or tuple(a.get("dilations", (1, 1))) != (1, 1)
    ):
        return None
    wshape, channels = g.type_of(ins[1]).shape, g.type_of(ins[0]).shape[1]
    if a.get("group", 1) == channels == wshape[0] and wshape[1] == 1:
        return "dw"
    if a.get("group", 1) != 1:
        return None
    plain = {"strides": (1, 1), "pads": (0, 0, 0, 0)}
    pointwise = wshape[2:] == (1, 1) and all(tuple(a.get(k, v)) == v for k, v in plain.items())
    if pointwise and channels % QUAD == 0:
        return "conv"
    # a KxK window over few channels (an RGB stem) stays float: its im2col copy, 4/C bytes per
    # tap over the input, costs more than the product it feeds (ocr_cls: 35 us vs 19 us)
    return "kxk" if channels >= MIN_KXK_CHANNELS or wshape[2:] == (1, 1) else None


def _qdense(g: Graph, xq: Value, w: np.ndarray, bias: np.ndarray, mult: np.ndarray, attrs: dict) -> Value:
    """qdense on x flattened to (M, K), reshaped back to x's leading dims."""
    shape = g.type_of(xq).shape
    x2 = xq if len(shape) == 2 else add_op(g, "reshape", [xq], {"shape": (math.prod(shape[:-1]), shape[-1])})
    consts = [g.add_const(pack_weights(w)), g.add_const(bias), g.add_const(mult)]
    y = add_op(g, "qdense", [x2, *consts], {"n": w.shape[0], **attrs})
    if len(shape) == 2:
        return y
    return add_op(g, "reshape", [y], {"shape": (*shape[:-1], w.shape[0])})


def _im2col(g: Graph, xq: Value, w: np.ndarray, conv: dict, x_zp: int) -> tuple[Value, np.ndarray]:
    """x's windows as KH KW Cp channels (Cp: C rounded up to 4, the pad channels read x's zero
    point against zero weights) and W (Cout, C, KH, KW) as (Cout, KH KW Cp) to match."""
    cout, c, kh, kw = w.shape
    cp = -(-c // QUAD) * QUAD
    attrs = {
        "kernel": (kh, kw),
        "strides": tuple(conv.get("strides", (1, 1))),
        "pads": tuple(conv.get("pads", (0, 0, 0, 0))),
        "channels": cp,
        "fill": x_zp,
    }
    wide = np.zeros((cout, kh, kw, cp), np.int8)
    wide[..., :c] = w.transpose(0, 2, 3, 1)
    return add_op(g, "im2col", [xq], attrs), wide.reshape(cout, -1)


def _qconv1x1(g: Graph, xq: Value, w: np.ndarray, bias: np.ndarray, mult: np.ndarray, attrs: dict) -> Value:
    """Pixels vectorized where a map has whole vectors of them, else output channels."""
    pixels = math.prod(g.type_of(xq).shape[2:])
    vector = "channels" if pixels % BLOCK and w.shape[0] % BLOCK == 0 else "pixels"
    consts = [g.add_const(pack_conv_weights(w, vector)), g.add_const(bias), g.add_const(mult)]
    return add_op(g, "qconv1x1", [xq, *consts], {"vector": vector, **attrs})


def _qdwconv(g: Graph, xq: Value, w: np.ndarray, bias: np.ndarray, mult: np.ndarray, attrs: dict) -> Value:
    consts = [g.add_const(w.astype(np.float32)), g.add_const(bias), g.add_const(mult)]
    return add_op(g, "qdwconv", [xq, *consts], attrs)
