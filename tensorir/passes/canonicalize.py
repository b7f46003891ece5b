"""canonicalize: rewrite ops into the few forms later passes and schedules know.

- `gemm` -> `dense(x, w)` (+ `add` bias): w is (N, K) row-major, as TVM's nn.dense.
  trans_a/trans_b become compile-time transposes of constant operands, or explicit
  `transpose` ops otherwise; alpha is folded into a constant operand (or a `mul` after
  the dense), beta into a constant bias (or a `mul` on it). Integer gemm with alpha != 1
  or beta not in {0, 1} is left alone (its reference rounds a float product).
- `matmul(a, W)` with a constant 2-D W -> `dense(a, W.T)`; an `a` of rank != 2 is
  reshaped to (M, K) before and the result back after.
- `sub(x, c)` -> `add(x, -c)` and `div(x, c)` -> `mul(x, 1/c)` for a constant float c.
  `sub(c, x)` and integer division are left alone.
- `x * clip(x + 3, 0, 6) / 6` (Paddle's hard swish) -> `hard_swish(x)` (rounding may differ
  in the last bit).
- `x * 0.5 * (1 + erf(x / sqrt(2)))` (the exact GELU written out) -> `gelu(x)`
  (passes/gelu_spelled.py).
- `pow(x, 2)` -> `mul(x, x)` for float x (Silero VAD's STFT magnitude).
- `identity` is removed (the ONNX frontend turns inference-mode Dropout into identity).

Flatten-like reshapes are left alone. Before/After:

    %3 = gemm(%x, %w, %b) alpha=1 beta=1 trans_a=0 trans_b=1 : f32[1,10]
    ->
    %5 = dense(%x, %w) : f32[1,10]
    %6 = add(%5, %b) : f32[1,10]
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np

from tensorir.graph.graph import Graph, Value
from tensorir.graph.types import np_dtype
from tensorir.passes import Rule, add_op, const_of, is_float, replace, rewrite
from tensorir.passes.gelu_spelled import gelu_input
from tensorir.passes.simplify import forward_input


def canonicalize(g: Graph) -> bool:
    """Rewrite gemm/matmul to dense, sub/div by constants to add/mul; drop identities."""
    return rewrite(g, RULES)


# ---- gemm -> dense ------------------------------------------------------------------
def _const(g: Graph, array: np.ndarray, dtype: str, name: str = "") -> Value:
    return g.add_const(np.asarray(array, dtype=np_dtype(dtype), order="C"), name)


def _operand(g: Graph, v: Value, transpose: bool, scale: float, dtype: str) -> Value:
    """v (transposed and scaled as asked): folded into one new constant when v is constant."""
    value = const_of(g, v)
    if value is None:
        return add_op(g, "transpose", [v], {"perm": (1, 0)}) if transpose else v
    if not transpose and scale == 1:
        return v
    array = value.T if transpose else value
    if scale != 1:
        array = array.astype(np.float64) * scale
    return _const(g, array, dtype, g.node(v.node).name)


def gemm_to_dense(g: Graph, nid: int) -> bool:
    node = g.node(nid)
    at = node.attr
    a, b, *rest = g.inputs_of(nid)
    dtype = node.outputs[0].dtype
    alpha, beta = float(at.get("alpha", 1.0)), float(at.get("beta", 1.0))
    if not is_float(dtype) and (alpha != 1 or (rest and beta not in (0, 1))):
        return False
    # alpha goes into the constant weights, else a constant x, else a mul after the dense
    w_scale = alpha if const_of(g, b) is not None else 1.0
    x_scale = alpha if w_scale == 1 and const_of(g, a) is not None else 1.0
    x = _operand(g, a, bool(at.get("trans_a", 0)), x_scale, dtype)
    w = _operand(g, b, not at.get("trans_b", 0), w_scale, dtype)
    y = add_op(g, "dense", [x, w])
    if alpha != 1 and w_scale == 1 and x_scale == 1:
        y = add_op(g, "mul", [y, _const(g, alpha, dtype)])
    if rest and beta != 0:
        c = rest[0]
        if beta != 1 and const_of(g, c) is not None:
            c = _operand(g, c, False, beta, dtype)
        elif beta != 1:
            c = add_op(g, "mul", [c, _const(g, beta, dtype)])
        y = add_op(g, "add", [y, c])
    return replace(g, nid, [y])


# ---- matmul with constant weights -> dense ------------------------------------------
def matmul_to_dense(g: Graph, nid: int) -> bool:
    a, b = g.inputs_of(nid)
    w = const_of(g, b)
    if w is None or w.ndim != 2:
        return False
    k = w.shape[0]
    out_shape = g.node(nid).outputs[0].shape
    x = a
    if g.type_of(a).ndim != 2:
        m = math.prod(g.type_of(a).shape[:-1])
        x = add_op(g, "reshape", [a], {"shape": (m, k)})
    y = add_op(g, "dense", [x, g.add_const(np.asarray(w.T, order="C"), g.node(b.node).name)])
    if g.type_of(y).shape != out_shape:
        y = add_op(g, "reshape", [y], {"shape": out_shape})
    return replace(g, nid, [y])


# ---- sub / div by a constant --------------------------------------------------------
def _float_const_rhs(g: Graph, nid: int) -> tuple[Value, np.ndarray] | None:
    a, b = g.inputs_of(nid)
    c = const_of(g, b)
    if c is None or not is_float(c.dtype.name) or not is_float(g.node(nid).outputs[0].dtype):
        return None
    return a, c


def sub_to_add(g: Graph, nid: int) -> bool:
    """x - c -> x + (-c)"""
    match = _float_const_rhs(g, nid)
    if match is None:
        return False
    a, c = match
    return replace(g, nid, [add_op(g, "add", [a, g.add_const(-c)])])


def div_to_mul(g: Graph, nid: int) -> bool:
    """x / c -> x * (1/c); x / 0 and x * inf agree (inf, or nan for x = 0)."""
    match = _float_const_rhs(g, nid)
    if match is None:
        return False
    a, c = match
    with np.errstate(divide="ignore"):  # in the result's dtype: an f16 c must not round 1/c
        inv = (1.0 / c.astype(np.float64)).astype(np_dtype(g.node(nid).outputs[0].dtype))
    return replace(g, nid, [add_op(g, "mul", [a, g.add_const(inv)])])


# ---- hard swish spelled out ------------------------------------------------------------
Scalar = Callable[[Value], "float | None"]


def hard_swish_input(g: Graph, y: Value, scalar: Scalar) -> Value | None:
    """x when y is hard_swish(x): the op, or x * clip(x + 3, 0, 6) / 6 as Paddle's exporter
    writes it (the / 6 a div or a mul by 1/6; x read only by the add and the mul);
    `scalar(v)` is v's value when it is a one-element constant."""
    node = g.node(y.node)
    if node.op == "hard_swish":
        return g.inputs_of(y.node)[0]
    if node.op not in ("div", "mul") or len(g.inputs_of(y.node)) != 2:
        return None
    m, six = g.inputs_of(y.node)
    k = scalar(six)
    if k is None or k == 0 or not math.isclose(k if node.op == "div" else 1 / k, 6.0, rel_tol=1e-6):
        return None
    if g.node(m.node).op != "mul" or len(g.consumers(m)) != 1:
        return None
    for x, c in itertools.permutations(g.inputs_of(m.node)):
        clip = g.node(c.node)
        if clip.op != "clip" or (clip.attr.get("min"), clip.attr.get("max")) != (0.0, 6.0):
            continue
        (a,) = g.inputs_of(c.node)
        if g.node(a.node).op != "add" or len(g.consumers(a)) != 1 or len(g.consumers(c)) != 1:
            continue
        u, three = g.inputs_of(a.node)
        if len(g.consumers(x)) == 2 and u == x and scalar(three) == 3.0:
            return x
    return None


def _scalar_const(g: Graph, v: Value) -> float | None:
    c = const_of(g, v)
    return float(c.reshape(-1)[0]) if c is not None and c.size == 1 and is_float(c.dtype.name) else None


def hard_swish_spelled(g: Graph, nid: int) -> bool:
    """x * clip(x + 3, 0, 6) * (1/6) -> hard_swish(x): one op, so the chain (which reads x
    twice) fuses into the conv before it."""
    x = hard_swish_input(g, Value(nid, 0), lambda v: _scalar_const(g, v))
    if x is None or g.node(nid).op == "hard_swish" or not is_float(g.type_of(x).dtype):
        return False
    return replace(g, nid, [add_op(g, "hard_swish", [x])])


def gelu_spelled(g: Graph, nid: int) -> bool:
    """x * 0.5 * (1 + erf(x / sqrt(2))) -> gelu(x) (passes/gelu_spelled.py): one op, so it
    fuses into the dense before it."""
    x = gelu_input(g, Value(nid, 0), lambda v: _scalar_const(g, v))
    if x is None or not is_float(g.type_of(x).dtype) or g.type_of(x) != g.node(nid).outputs[0]:
        return False
    return replace(g, nid, [add_op(g, "gelu", [x], {"approximate": "none"})])


def pow_square(g: Graph, nid: int) -> bool:
    """pow(x, 2) -> x * x (a multiply, not a call to powf, and one that fuses): both are the
    correctly rounded square."""
    x, e = g.inputs_of(nid)
    if _scalar_const(g, e) != 2.0 or not is_float(g.type_of(x).dtype):
        return False
    if g.type_of(x) != g.node(nid).outputs[0]:  # a 2 of higher rank broadcasts x larger
        return False
    return replace(g, nid, [add_op(g, "mul", [x, x])])


RULES: list[Rule] = [
    ("gemm", gemm_to_dense),  # gemm(a, b, c) -> dense(a', w) + c'
    ("matmul", matmul_to_dense),  # matmul(x, W) -> [reshape] dense(x, W.T) [reshape]
    ("sub", sub_to_add),  # x - c -> x + (-c)
    ("div", div_to_mul),  # x / c -> x * (1/c)
    ("mul", hard_swish_spelled),  # x * clip(x + 3, 0, 6) * (1/6) -> hard_swish(x)
    ("mul", gelu_spelled),  # x * 0.5 * (1 + erf(x / sqrt(2))) -> gelu(x)
    ("pow", pow_square),  # pow(x, 2) -> x * x
    ("identity", forward_input),  # identity(x) -> x
]
