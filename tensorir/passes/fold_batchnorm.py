"""fold_batchnorm: inference batch_norm with constant parameters becomes cheaper ops.

With a = scale / sqrt(var + eps) and b = bias - mean * a (per channel, in float64),
batch_norm(y) = y * a + b. Three rules, tried in this order:

1. conv -> batch_norm: the conv's constant weights W (O, I/g, k...) become W * a (per
   output channel) and its bias (3rd input, created if absent) c * a + b.
2. dense -> [add(const)] -> batch_norm: w (N, K) becomes w * a[:, None] and a constant
   bias add (c * a + b) follows the dense.
3. a lone batch_norm -> mul(x, a) + add(b), with a, b shaped (C, 1, ..., 1) to broadcast.
4. conv -> mul / add by a constant that varies along the channel axis alone (or a scalar):
   into the conv's weights and bias as in rule 1. A Keras model's batch norms reach the
   graph so (TensorFlow freezes them into Mul / Add by per-channel vectors), and they
   stayed in every conv epilogue, where a TFLite export of the same model has them folded.

Rules 1, 2 and 4 need the conv/dense output (and the bias add) to have no other consumer
and the weights (and bias) to be constants. Nothing fires for non-float tensors, for
parameters that are not constants, or for batch_norm_training. Before/After:

    %5 = conv(%x, %w) pads=(1,1,1,1) : f32[1,8,6,6]
    %6 = batch_norm(%5, %s, %b, %m, %v) epsilon=1e-05 : f32[1,8,6,6]
    ->
    %9 = conv(%x, %c7, %c8) pads=(1,1,1,1) : f32[1,8,6,6]
"""

from __future__ import annotations

import numpy as np

from tensorir.graph.graph import Graph, Value
from tensorir.graph.types import np_dtype
from tensorir.passes import Rule, add_op, const_of, is_float, replace, rewrite, single_use

Affine = tuple[np.ndarray, np.ndarray]


def fold_batchnorm(g: Graph) -> bool:
    """Fold batch_norm into the conv/dense before it, else turn it into mul + add."""
    return rewrite(g, RULES)


def _affine(g: Graph, nid: int) -> Affine | None:
    """(a, b) in float64 with batch_norm(y) = y * a + b, or None if it cannot be folded."""
    x, *params = g.inputs_of(nid)
    values = [const_of(g, p) for p in params]
    if not is_float(g.type_of(x).dtype) or any(v is None for v in values):
        return None
    scale, bias, mean, var = (np.asarray(v, np.float64) for v in values)
    a = scale / np.sqrt(var + float(g.node(nid).attr.get("epsilon", 1e-5)))
    return a, bias - mean * a


def _const(g: Graph, array: np.ndarray, like: Value) -> Value:
    dtype = np_dtype(g.type_of(like).dtype)
    return g.add_const(np.asarray(array, dtype=dtype, order="C"))


def _per_channel(a: np.ndarray, ndim: int) -> np.ndarray:
    """[C] -> [C, 1, ..., 1] to broadcast against dims 1.. of an N x C x ... tensor."""
    return a.reshape(-1, *(1,) * (ndim - 2)) if a.ndim == 1 else a


# ---- 1. conv -> batch_norm --------------------------------------------------------------
def into_conv(g: Graph, nid: int) -> bool:
    y = g.inputs_of(nid)[0]
    if g.node(y.node).op != "conv" or not single_use(g, y):
        return False
    _, w, *c = g.inputs_of(y.node)
    wv, cv = const_of(g, w), const_of(g, c[0]) if c else 0.0
    ab = _affine(g, nid)
    if ab is None or ab[0].ndim != 1 or wv is None or cv is None:
        return False
    return replace(g, nid, [_scaled_conv(g, y, *ab)])


def _scaled_conv(g: Graph, y: Value, a: np.ndarray, b: np.ndarray | float) -> Value:
    """conv(x, W, c) (constant W and c) as conv(x, W*a, c*a + b), a per output channel."""
    x, w, *c = g.inputs_of(y.node)
    wv, cv = const_of(g, w), const_of(g, c[0]) if c else 0.0
    new_w = _const(g, wv * a.reshape(-1, *(1,) * (wv.ndim - 1)), w)
    new_b = _const(g, np.asarray(cv, np.float64) * a + b, w)
    (out,) = g.add_node("conv", [x, new_w, new_b], g.node(y.node).attr, g.node(y.node).name)
    return out


# ---- 2. dense -> [add bias] -> batch_norm -------------------------------------------------
def _dense_bias(g: Graph, y: Value) -> tuple[int, np.ndarray | float] | None:
    """(dense node, constant bias) when y = dense(..) or dense(..) + c, each used once."""
    node = g.node(y.node)
    if node.op == "dense" and single_use(g, y):
        return y.node, 0.0
    if node.op != "add" or not single_use(g, y):
        return None
    d, c = g.inputs_of(y.node)
    cv = const_of(g, c)
    if g.node(d.node).op != "dense" or not single_use(g, d) or cv is None:
        return None
    return d.node, cv


def into_dense(g: Graph, nid: int) -> bool:
    y = g.inputs_of(nid)[0]
    ab = _affine(g, nid)
    match = _dense_bias(g, y)
    if ab is None or match is None:
        return False
    dense, cv = match
    x, w = g.inputs_of(dense)
    wv = const_of(g, w)
    if wv is None:
        return False
    a, b = ab
    out = add_op(g, "dense", [x, _const(g, wv * a[:, None], w)])
    out = add_op(g, "add", [out, _const(g, np.asarray(cv, np.float64) * a + b, w)])
    return replace(g, nid, [out])


# ---- 3. lone batch_norm -> mul + add ------------------------------------------------------
def to_mul_add(g: Graph, nid: int) -> bool:
    x = g.inputs_of(nid)[0]
    ab = _affine(g, nid)
    if ab is None:
        return False
    nd = g.type_of(x).ndim
    a, b = (_const(g, _per_channel(p, nd), x) for p in ab)
    return replace(g, nid, [add_op(g, "add", [add_op(g, "mul", [x, a]), b])])


# ---- 4. conv -> mul / add by a per-channel constant (a batch norm imported as arithmetic) ----
def _per_out_channel(value: np.ndarray, ndim: int, channels: int) -> np.ndarray | None:
    """A constant that broadcasts against an N x C x ... conv output along C alone (or is a
    scalar), as the C values it takes; else None."""
    if value.ndim > ndim:
        return None
    shape = (1,) * (ndim - value.ndim) + value.shape
    if shape[0] != 1 or shape[1] not in (1, channels) or any(d != 1 for d in shape[2:]):
        return None
    return np.broadcast_to(np.asarray(value, np.float64).reshape(-1), (channels,))


def _conv_and_channels(g: Graph, nid: int) -> tuple[Value, np.ndarray] | None:
    """(the conv output, the other input's values per output channel) of a binary op whose
    one input is a single-use float conv with constant weights and bias, the other a constant."""
    for y, k in zip(g.inputs_of(nid), g.inputs_of(nid)[::-1], strict=True):
        if g.node(y.node).op != "conv" or not single_use(g, y) or not is_float(g.type_of(y).dtype):
            continue
        kv, (_, w, *c) = const_of(g, k), g.inputs_of(y.node)
        if kv is None or const_of(g, w) is None or (c and const_of(g, c[0]) is None):
            continue
        t = g.type_of(y)
        per = _per_out_channel(kv, t.ndim, t.shape[1])
        if per is not None:
            return y, per
    return None


def _affine_into_conv(g: Graph, nid: int, a: np.ndarray | float, b: np.ndarray | float) -> bool:
    """conv(x, W, c) -> conv(x, W*a, c*a + b) in place of node `nid`."""
    match = _conv_and_channels(g, nid)
    if match is None:
        return False
    y, per = match
    a, b = (per if p is None else p for p in (a, b))
    return replace(g, nid, [_scaled_conv(g, y, np.broadcast_to(np.asarray(a, np.float64), per.shape), b)])


def scale_into_conv(g: Graph, nid: int) -> bool:
    return _affine_into_conv(g, nid, None, 0.0)  # the constant is the scale


def shift_into_conv(g: Graph, nid: int) -> bool:
    return _affine_into_conv(g, nid, 1.0, None)  # the constant is the shift


RULES: list[Rule] = [
    ("batch_norm", into_conv),  # bn(conv(x, W, c)) -> conv(x, W*a, c*a + b)
    ("batch_norm", into_dense),  # bn(dense(x, w) [+ c]) -> dense(x, w*a) + (c*a + b)
    ("batch_norm", to_mul_add),  # bn(x) -> x * a + b
    ("mul", scale_into_conv),  # conv(x, W, c) * a -> conv(x, W*a, c*a), a per channel
    ("add", shift_into_conv),  # conv(x, W, c) + b -> conv(x, W, c + b), b per channel
]
