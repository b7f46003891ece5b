"""fold_batchnorm: inference batch_norm with constant parameters becomes cheaper ops.

With a = scale / sqrt(var + eps) and b = bias - mean * a (per channel, in float64),
batch_norm(y) = y * a + b. Three rules, tried in this order:

1. conv -> batch_norm: the conv's constant weights W (O, I/g, k...) become W * a (per
   output channel) and its bias (3rd input, created if absent) c * a + b.
2. dense -> [add(const)] -> batch_norm: w (N, K) becomes w * a[:, None] and a constant
   bias add (c * a + b) follows the dense.
3. a lone batch_norm -> mul(x, a) + add(b), with a, b shaped (C, 1, ..., 1) to broadcast.

Rules 1 and 2 need the conv/dense output (and the bias add) to have no other consumer
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
    x, w, *c = g.inputs_of(y.node)
    wv, cv = const_of(g, w), const_of(g, c[0]) if c else 0.0
    ab = _affine(g, nid)
    if ab is None or ab[0].ndim != 1 or wv is None or cv is None:
        return False
    a, b = ab
    new_w = _const(g, wv * a.reshape(-1, *(1,) * (wv.ndim - 1)), w)
    new_b = _const(g, np.asarray(cv, np.float64) * a + b, w)
    (out,) = g.add_node("conv", [x, new_w, new_b], g.node(y.node).attr, g.node(y.node).name)
    return replace(g, nid, [out])


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


RULES: list[Rule] = [
    ("batch_norm", into_conv),  # bn(conv(x, W, c)) -> conv(x, W*a, c*a + b)
    ("batch_norm", into_dense),  # bn(dense(x, w) [+ c]) -> dense(x, w*a) + (c*a + b)
    ("batch_norm", to_mul_add),  # bn(x) -> x * a + b
]
