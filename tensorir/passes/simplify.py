"""simplify: algebraic identities on graph ops, one rule list grouped by op.

Every rule keeps the graph's result bit for bit, except `x + 0 -> x` on x = -0.0. A rule
that would change an output's shape or dtype (x * ones that broadcasts x larger, a
float constant times an int tensor) does not fire. Before/After:

    %2 = reshape(%x) shape=(6,4) : f32[6,4]
    %3 = reshape(%2) shape=(2,12) : f32[2,12]
    %4 = transpose(%3) perm=(1,0) : f32[12,2]
    %5 = transpose(%4) perm=(1,0) : f32[2,12]
    %6 = clip(%5) min=0 : f32[2,12]
    ->
    %7 = reshape(%x) shape=(2,12) : f32[2,12]
    %8 = relu(%7) : f32[2,12]
"""

from __future__ import annotations

import math

import numpy as np

from tensorir.graph.graph import Graph, Value
from tensorir.graph.types import np_dtype
from tensorir.passes import Rule, add_op, const_of, forward, replace, rewrite, single_use


def simplify(g: Graph) -> bool:
    """Apply the algebraic rules below until none fires."""
    return rewrite(g, RULES)


# ---- helpers --------------------------------------------------------------------------
def _input(g: Graph, nid: int, i: int = 0) -> Value:
    return g.inputs_of(nid)[i]


def _producer(g: Graph, v: Value, op: str) -> int | None:
    """The node making `v` if its op is `op`."""
    return v.node if g.node(v.node).op == op else None


def forward_input(g: Graph, nid: int) -> bool:
    """op(x) -> x, for ops that are the identity (identity, reshape to the same shape, ...)."""
    return forward(g, nid, _input(g, nid))


# ---- identity / reshape / transpose ---------------------------------------------------
def reshape_noop(g: Graph, nid: int) -> bool:
    """reshape(x) to x's own shape -> x"""
    if g.type_of(_input(g, nid)).shape != g.node(nid).outputs[0].shape:
        return False
    return forward_input(g, nid)


def reshape_chain(g: Graph, nid: int) -> bool:
    """reshape(reshape(x, s1), s2) -> reshape(x, s2)"""
    inner = _producer(g, _input(g, nid), "reshape")
    if inner is None:
        return False
    return replace(g, nid, [add_op(g, "reshape", [_input(g, inner)], g.node(nid).attr)])


def transpose_noop(g: Graph, nid: int) -> bool:
    """transpose(x, (0, 1, ..., n-1)) -> x"""
    perm = tuple(g.node(nid).attr["perm"])
    return perm == tuple(range(len(perm))) and forward_input(g, nid)


def transpose_chain(g: Graph, nid: int) -> bool:
    """transpose(transpose(x, p1), p2) -> transpose(x, p1[p2]) (dropped if that is the identity)"""
    inner = _producer(g, _input(g, nid), "transpose")
    if inner is None:
        return False
    p1, p2 = g.node(inner).attr["perm"], g.node(nid).attr["perm"]
    perm = tuple(p1[i] for i in p2)
    x = _input(g, inner)
    if perm != tuple(range(len(perm))):
        x = add_op(g, "transpose", [x], {"perm": perm})
    return forward(g, nid, x)


def _moves_unit_axes_only(g: Graph, nid: int) -> bool:
    """Whether transpose node nid keeps the order of its input's non-unit axes (a reshape)."""
    shape = g.type_of(_input(g, nid)).shape
    moved = [p for p in g.node(nid).attr["perm"] if shape[p] != 1]
    return moved == sorted(moved)


def reshape_then_unit_transpose(g: Graph, nid: int) -> bool:
    """transpose(reshape(x)) that moves only unit axes -> reshape(x) (so the reshapes merge):
    a pooled [1, C] vector reshaped to NHWC [1, 1, 1, C] and transposed to NCHW for a conv,
    as a squeeze-excite block in NHWC imports."""
    inner = _producer(g, _input(g, nid), "reshape")
    if inner is None or not _moves_unit_axes_only(g, nid):
        return False
    out = g.node(nid).outputs[0].shape
    return replace(g, nid, [add_op(g, "reshape", [_input(g, inner)], {"shape": tuple(out)})])


def unit_transpose_then_reshape(g: Graph, nid: int) -> bool:
    """reshape(transpose(x)) when the transpose moves only unit axes -> reshape(x): a 1x1 conv
    classifier's [1, K, 1, 1] output taken back to NHWC and flattened."""
    inner = _producer(g, _input(g, nid), "transpose")
    if inner is None or not _moves_unit_axes_only(g, inner):
        return False
    return replace(g, nid, [add_op(g, "reshape", [_input(g, inner)], g.node(nid).attr)])


# ---- arithmetic with a neutral constant -----------------------------------------------
def _drop_neutral(g: Graph, nid: int, neutral: float, sides: tuple[int, ...]) -> bool:
    """op(x, c) -> x when c is all `neutral` and the result has x's type."""
    ins = g.inputs_of(nid)
    out = g.node(nid).outputs[0]
    for side in sides:
        c, x = const_of(g, ins[side]), ins[1 - side]
        if c is not None and g.type_of(x) == out and bool(np.all(c == neutral)):
            return forward(g, nid, x)
    return False


def mul_one(g: Graph, nid: int) -> bool:
    """x * 1 -> x, 1 * x -> x"""
    return _drop_neutral(g, nid, 1, (1, 0))


def add_zero(g: Graph, nid: int) -> bool:
    """x + 0 -> x, 0 + x -> x"""
    return _drop_neutral(g, nid, 0, (1, 0))


def sub_zero(g: Graph, nid: int) -> bool:
    """x - 0 -> x"""
    return _drop_neutral(g, nid, 0, (1,))


def div_one(g: Graph, nid: int) -> bool:
    """x / 1 -> x"""
    return _drop_neutral(g, nid, 1, (1,))


def _per_last_axis(c: np.ndarray, k: int) -> np.ndarray | None:
    """c as a scalar or a [k] vector, if it only varies along the last axis (of size k)."""
    if c.size == 1:
        return c.reshape(())
    return c.reshape(k) if c.ndim >= 1 and c.shape[-1] == k == c.size else None


def binary_before_reshape(g: Graph, nid: int) -> bool:
    """op(reshape(y), c) -> reshape(op(y, c)) for a per-last-axis constant c that the
    reshape leaves in place, so a bias meets the dense/matmul that made y"""
    ins = g.inputs_of(nid)
    out = g.node(nid).outputs[0]
    for side in (1, 0):
        c, r = const_of(g, ins[side]), ins[1 - side]
        if c is None or g.node(r.node).op != "reshape" or not single_use(g, r):
            continue
        y = _input(g, r.node)
        ty = g.type_of(y)
        flat = _per_last_axis(c, out.shape[-1]) if out.ndim else None
        if flat is None or not ty.ndim or ty.shape[-1] != out.shape[-1] or g.type_of(r) != out:
            continue
        if np_dtype(ty.dtype) != c.dtype:
            continue
        k = ins[side] if flat.shape == c.shape else g.add_const(flat)
        args = [y, k] if side == 1 else [k, y]
        z = add_op(g, g.node(nid).op, args)
        return replace(g, nid, [add_op(g, "reshape", [z], {"shape": out.shape})])
    return False


# activations that move below a reshape (elementwise, one input, the input's shape)
UNARY_EW = (
    "gelu",
    "relu",
    "sigmoid",
    "tanh",
    "erf",
    "hard_swish",
    "hard_sigmoid",
    "leaky_relu",
    "elu",
    "clip",
)


def unary_before_reshape(g: Graph, nid: int) -> bool:
    """u(reshape(y)) -> reshape(u(y)) for an elementwise activation when y comes from an
    anchor (dense, matmul, conv), so it joins that anchor's epilogue (BERT's GELU between the
    FFN's 2-D dense and its 3-D reshape)"""
    r = _input(g, nid)
    if g.node(r.node).op != "reshape" or not single_use(g, r) or len(g.inputs_of(nid)) != 1:
        return False
    y = _input(g, r.node)
    if g.type_of(y).dtype != g.type_of(r).dtype or not _after_anchor(g, y):
        return False
    z = add_op(g, g.node(nid).op, [y], g.node(nid).attr)
    return replace(g, nid, [add_op(g, "reshape", [z], {"shape": g.node(nid).outputs[0].shape})])


def _after_anchor(g: Graph, v: Value, steps: int = 4) -> bool:
    """Whether v is an anchor's output (dense, matmul, conv), or reached from one through a
    short chain of single-use elementwise ops (its bias add, an activation)."""
    from tensorir.ops.registry import is_anchor, is_elementwise

    for _ in range(steps + 1):
        node = g.node(v.node)
        if is_anchor(node.op):
            return True
        ins = [u for u in g.inputs_of(v.node) if const_of(g, u) is None]
        if not is_elementwise(node.op) or len(ins) != 1 or not single_use(g, ins[0]):
            return False
        v = ins[0]
    return False


def residual_before_reshape(g: Graph, nid: int) -> bool:
    """op(reshape(y), z) -> reshape(op(y, reshape(z))) when y comes from an anchor (dense,
    matmul, conv) and z, of the output's shape, does not: the residual add joins the anchor's
    epilogue instead of running as a kernel of its own; z's reshape is a view. (Only toward
    an anchor, so the rule cannot undo itself.)"""
    ins = g.inputs_of(nid)
    out = g.node(nid).outputs[0]
    if len(ins) != 2:
        return False
    for side in (0, 1):
        r, z = ins[side], ins[1 - side]
        if g.node(r.node).op != "reshape" or not single_use(g, r) or g.type_of(r) != out:
            continue
        y = _input(g, r.node)
        if not _after_anchor(g, y) or g.type_of(z) != out or const_of(g, z) is not None:
            continue
        if _after_anchor(g, _input(g, z.node) if g.node(z.node).op == "reshape" else z):
            continue
        zr = add_op(g, "reshape", [z], {"shape": g.type_of(y).shape})
        args = [y, zr] if side == 0 else [zr, y]
        w = add_op(g, g.node(nid).op, args)
        return replace(g, nid, [add_op(g, "reshape", [w], {"shape": out.shape})])
    return False


# ---- clip / cast ------------------------------------------------------------------------
def clip_to_relu(g: Graph, nid: int) -> bool:
    """clip(x, 0, inf) -> relu(x); clip(x) with no bounds -> x"""
    at = g.node(nid).attr
    lo, hi = at.get("min"), at.get("max")
    if hi is not None and not (isinstance(hi, float) and math.isinf(hi) and hi > 0):
        return False
    if lo is None:
        return forward_input(g, nid)
    if lo != 0:
        return False
    return replace(g, nid, [add_op(g, "relu", [_input(g, nid)])])


def cast_noop(g: Graph, nid: int) -> bool:
    """cast(x, to=x.dtype) -> x (so cast(cast(x, T), T) -> cast(x, T))"""
    return g.type_of(_input(g, nid)).dtype == g.node(nid).attr["to"] and forward_input(g, nid)


def _exact(src: str, dst: str) -> bool:
    """Every value of dtype src is exactly representable in dst (numpy dtypes only)."""
    s, d = np_dtype(src), np_dtype(dst)
    if s.kind not in "biuf" or d.kind not in "biuf":
        return False
    if s.kind == "f" or d.kind == "b":
        return d.kind == "f" and np.can_cast(s, d, "safe")
    if d.kind == "f":  # an integer (or bool) fits the float's mantissa
        bits = 1 if s.kind == "b" else np.iinfo(s).bits - (s.kind == "i")
        return bits <= np.finfo(d).nmant + 1
    return np.can_cast(s, d, "safe")


def cast_chain(g: Graph, nid: int) -> bool:
    """cast(cast(x, A), B) -> cast(x, B) when A holds every value of x's dtype exactly"""
    inner = _producer(g, _input(g, nid), "cast")
    if inner is None:
        return False
    x = _input(g, inner)
    if not _exact(g.type_of(x).dtype, g.node(inner).attr["to"]):
        return False
    return replace(g, nid, [add_op(g, "cast", [x], g.node(nid).attr)])


RULES: list[Rule] = [
    ("identity", forward_input),  # identity(x) -> x
    ("reshape", reshape_noop),  # reshape(x, x.shape) -> x
    ("reshape", reshape_chain),  # reshape(reshape(x)) -> reshape(x)
    ("reshape", unit_transpose_then_reshape),  # reshape(transpose(x)), unit axes moved -> reshape(x)
    ("transpose", transpose_noop),  # transpose(x, identity perm) -> x
    ("transpose", transpose_chain),  # transpose(transpose(x)) -> transpose(x, composed)
    ("transpose", reshape_then_unit_transpose),  # transpose(reshape(x)), unit axes moved -> reshape(x)
    ("mul", mul_one),  # x * 1 -> x
    ("div", div_one),  # x / 1 -> x
    ("add", add_zero),  # x + 0 -> x
    ("sub", sub_zero),  # x - 0 -> x
    ("add", binary_before_reshape),  # reshape(y) + c -> reshape(y + c)
    ("mul", binary_before_reshape),  # reshape(y) * c -> reshape(y * c)
    ("sub", binary_before_reshape),  # reshape(y) - c -> reshape(y - c)
    ("div", binary_before_reshape),  # reshape(y) / c -> reshape(y / c)
    ("add", residual_before_reshape),  # reshape(dense(..)) + z -> reshape(dense(..) + reshape(z))
    ("mul", residual_before_reshape),  # reshape(dense(..)) * z -> reshape(dense(..) * reshape(z))
    *((op, unary_before_reshape) for op in UNARY_EW),  # u(reshape(y)) -> reshape(u(y))
    ("clip", clip_to_relu),  # clip(x, 0, inf) -> relu(x)
    ("cast", cast_noop),  # cast(x, x.dtype) -> x
    ("cast", cast_chain),  # cast(cast(x, wider), T) -> cast(x, T)
]
