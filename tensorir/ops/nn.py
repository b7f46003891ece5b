"""Dense linear algebra and activations over an axis: gemm, matmul, einsum, softmax, dropout.

Convolutions live in conv.py, pooling in pool.py, normalizations in norm.py.
Float references compute in float32 (float64 stays float64) and return the input
dtype; integer matmul/gemm keep integer arithmetic.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

import numpy as np

from tensorir.errors import ShapeError
from tensorir.graph.types import TensorType
from tensorir.ops.conv import acc_dtype
from tensorir.ops.infer import Types, broadcast_shapes, normalize_axis
from tensorir.ops.registry import per_output, register_op


def _wide(x: np.ndarray) -> np.ndarray:
    """Float inputs in their compute dtype; integers as they are."""
    if np.issubdtype(x.dtype, np.integer):
        return x
    return x.astype(acc_dtype(x.dtype), copy=False)


def _same_dtype(ins: Types, what: str) -> str:
    dts = {t.dtype for t in ins}
    if len(dts) > 1:
        raise ShapeError(f"{what} inputs must share one dtype, got {', '.join(str(t) for t in ins)}")
    return ins[0].dtype


# ---- gemm / matmul ----------------------------------------------------------------
def _gemm_infer(ins: Types, attrs: dict[str, Any]) -> Types:
    a, b = ins[0], ins[1]
    if a.ndim != 2 or b.ndim != 2:
        raise ShapeError(f"gemm operands must be matrices, got {a} and {b}")
    m, ka = a.shape[::-1] if attrs.get("trans_a", 0) else a.shape
    kb, n = b.shape[::-1] if attrs.get("trans_b", 0) else b.shape
    if ka != kb:
        raise ShapeError(f"gemm inner dims differ: A' is [{m},{ka}], B' is [{kb},{n}]")
    if len(ins) > 2 and broadcast_shapes(ins[2].shape, (m, n)) != (m, n):
        raise ShapeError(f"gemm bias {ins[2]} does not broadcast to [{m},{n}]")
    return [TensorType((m, n), _same_dtype(ins, "gemm"))]


def _gemm_flops(ins: Types, attrs: Mapping[str, Any], out: TensorType) -> int:
    k = ins[0].shape[0] if attrs.get("trans_a") else ins[0].shape[-1]
    return 2 * out.size * k


@register_op("gemm", infer=_gemm_infer, pattern="anchor", tunable=True, flops=_gemm_flops, gpu="gemm")
def gemm(
    a: np.ndarray,
    b: np.ndarray,
    c: np.ndarray | None = None,
    alpha: float = 1.0,
    beta: float = 1.0,
    trans_a: int = 0,
    trans_b: int = 0,
) -> np.ndarray:
    aw, bw = _wide(a), _wide(b)
    y = np.matmul(aw.T if trans_a else aw, bw.T if trans_b else bw)
    if alpha != 1:
        y = y * alpha
    if c is not None and beta != 0:
        y = y + (_wide(c) * beta if beta != 1 else _wide(c))
    return np.asarray(y).astype(a.dtype)


def matmul_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """numpy.matmul's result shape (1-D operands promoted, then the promoted axis dropped)."""
    if not a or not b:
        raise ShapeError("matmul operands must have rank >= 1")
    a2, b2 = (1, *a) if len(a) == 1 else a, (*b, 1) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise ShapeError(f"matmul inner dims differ: {list(a)} @ {list(b)}")
    out = (*broadcast_shapes(a2[:-2], b2[:-2]), a2[-2], b2[-1])
    if len(b) == 1:
        out = out[:-1]
    if len(a) == 1:
        out = out[:-2] + out[-1:] if len(b) > 1 else out[:-1]
    return out


def _matmul_infer(ins: Types, attrs: dict[str, Any]) -> Types:
    return [TensorType(matmul_shape(ins[0].shape, ins[1].shape), _same_dtype(ins, "matmul"))]


def _matmul_flops(ins: Types, attrs: Mapping[str, Any], out: TensorType) -> int:
    return 2 * out.size * ins[0].shape[-1]


@register_op("matmul", infer=_matmul_infer, pattern="anchor", tunable=True, flops=_matmul_flops, gpu="gemm")
def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.asarray(np.matmul(_wide(a), _wide(b))).astype(a.dtype)


# ---- einsum ---------------------------------------------------------------------
def _einsum_bind(terms: list[str], shapes: list[tuple[int, ...]]) -> tuple[dict[str, int], tuple[int, ...]]:
    """Sizes of each subscript letter and the broadcast ellipsis shape."""
    sizes: dict[str, int] = {}
    ell: tuple[int, ...] = ()
    for term, shape in zip(terms, shapes, strict=True):
        letters = term.replace("...", "")
        if not letters.isalpha() and letters:
            raise ShapeError(f"einsum term '{term}' has characters other than letters and '...'")
        if "..." in term:
            ne, at = len(shape) - len(letters), term.index("...")
            if ne < 0:
                raise ShapeError(f"einsum term '{term}' has more subscripts than rank {len(shape)}")
            ell = broadcast_shapes(ell, shape[at : at + ne])
            shape = shape[:at] + shape[at + ne :]
        elif len(letters) != len(shape):
            raise ShapeError(f"einsum term '{term}' has {len(letters)} subscripts for rank {len(shape)}")
        for ch, dim in zip(letters, shape, strict=True):
            old = sizes.setdefault(ch, dim)
            if old != dim and 1 not in (old, dim):
                raise ShapeError(f"einsum subscript '{ch}' is both {old} and {dim}")
            sizes[ch] = max(old, dim)
    return sizes, ell


def einsum_shape(equation: str, shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise ShapeError(f"einsum '{equation}' has {len(terms)} operands, got {len(shapes)} inputs")
    sizes, ell = _einsum_bind(terms, shapes)
    if not arrow:
        counts = Counter(lhs.replace("...", "").replace(",", ""))
        rhs = ("..." if "..." in lhs else "") + "".join(sorted(c for c, k in counts.items() if k == 1))
    before, has_ell, after = rhs.partition("...")
    unknown = sorted(set(before + after) - set(sizes))
    if unknown:
        raise ShapeError(f"einsum output subscript '{unknown[0]}' is not in any input")
    return (*(sizes[c] for c in before), *(ell if has_ell else ()), *(sizes[c] for c in after))


def _einsum_infer(ins: Types, attrs: dict[str, Any]) -> Types:
    shape = einsum_shape(attrs["equation"], [t.shape for t in ins])
    return [TensorType(shape, _same_dtype(ins, "einsum"))]


def _einsum_flops(ins: Types, attrs: Mapping[str, Any], out: TensorType) -> int:
    """The largest operand times the output elements per its element (a rough count)."""
    largest = max(t.size for t in ins)
    return 2 * largest * max(1, out.size // largest)


@register_op("einsum", infer=_einsum_infer, pattern="reduction", flops=_einsum_flops, gpu="rows")
def einsum(*xs: np.ndarray, equation: str) -> np.ndarray:
    y = np.einsum(equation, *(_wide(x) for x in xs), optimize=len(xs) > 1)
    return np.asarray(y).astype(xs[0].dtype)


# ---- softmax --------------------------------------------------------------------
def _axis_infer(ins: Types, attrs: dict[str, Any]) -> Types:
    x = ins[0]
    normalize_axis(int(attrs.get("axis", -1)), x.ndim)
    return [TensorType(x.shape, x.dtype)]


@register_op("softmax", infer=_axis_infer, pattern="reduction", flops=per_output(5), gpu="rows")
def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    v = _wide(x)
    e = np.exp(v - v.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)


@register_op("log_softmax", infer=_axis_infer, pattern="reduction", flops=per_output(5), gpu="rows")
def log_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    v = _wide(x)
    shifted = v - v.max(axis=axis, keepdims=True)
    with np.errstate(divide="ignore"):
        return (shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))).astype(x.dtype)


# ---- dropout (training mode) ----------------------------------------------------
def _dropout_infer(ins: Types, attrs: dict[str, Any]) -> Types:
    ratio = float(attrs.get("ratio", 0.5))
    if not 0 <= ratio < 1:
        raise ShapeError(f"dropout ratio {ratio} must be in [0, 1)")
    x = ins[0]
    return [TensorType(x.shape, x.dtype), TensorType(x.shape, "bool")]


@register_op("dropout", infer=_dropout_infer, pattern="opaque")
def dropout(x: np.ndarray, ratio: float = 0.5, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Training-mode dropout; the mask is numpy's RandomState(seed), as ONNX's reference."""
    mask = np.random.RandomState(seed).uniform(0.0, 1.0, x.shape) >= ratio
    y = mask * _wide(x) * (1.0 / (1.0 - ratio))
    return np.asarray(y).astype(x.dtype), mask
