"""tfidf: ONNX TfIdfVectorizer over integer tokens, its reference and its loop-IR kernel.

    tfidf(x (C,) or (B, C) int, tokens (P, L) int64, sizes (P,), index (P,), weights (S,))
        -> y (S,) or (B, S) float32

The pool (the frontend's constants): entry p is the n-gram tokens[p, :sizes[p]], counted
into y[..., index[p]]. An n-gram of n tokens matches at every start s and skip distance d
with x[s + j*d] == tokens[p, j] for j < n; d runs over 1 .. max_skip_count + 1 for n >= 2 and
is 1 alone for n == 1 (onnxruntime counts a unigram once), and only n in
[min_gram_length, max_gram_length] count. mode TF gives the counts, IDF weights[i] (1 without
weights) where a count is positive, TFIDF count * weights[i].
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tensorir.errors import ShapeError
from tensorir.graph.types import TensorType
from tensorir.loop.ir import BinOp, Cast, Cmp, Const, If, LetStmt, Load, LoopFunc, Select, Store, Var
from tensorir.ops.infer import Types
from tensorir.ops.registry import register_kernel, register_op
from tensorir.ops.serial_kernel import ZERO, Regs, cpu_only, finish, get, incr, kernel_params, loop, put, seq
from tensorir.target import Target

MODES = ("TF", "IDF", "TFIDF")


def _infer(ins: Types, attrs: dict[str, Any]) -> Types:
    x, tokens, sizes, index, weights = ins
    if x.ndim not in (1, 2) or x.dtype not in ("int32", "int64"):
        raise ShapeError(f"tfidf: x must be int32 / int64 of rank 1 or 2, got {x}")
    if tokens.ndim != 2 or sizes.shape != (tokens.shape[0],) or index.shape != sizes.shape:
        raise ShapeError(f"tfidf: pool tokens {tokens}, sizes {sizes}, indexes {index} disagree")
    if attrs["mode"] not in MODES:
        raise ShapeError(f"tfidf: mode {attrs['mode']!r} is not one of {MODES}")
    size = weights.shape[0]
    return [TensorType((size,) if x.ndim == 1 else (x.shape[0], size), "float32")]


def _skips(n: int, attrs: dict[str, Any]) -> range:
    if not max(attrs["min_gram_length"], 1) <= n <= attrs["max_gram_length"]:
        return range(0)
    return range(1, 2) if n == 1 else range(1, attrs["max_skip_count"] + 2)


@register_op("tfidf", infer=_infer, pattern="opaque")
def tfidf(
    x: np.ndarray, tokens: np.ndarray, sizes: np.ndarray, index: np.ndarray, weights: np.ndarray, **attrs: Any
) -> np.ndarray:
    rows = x.reshape(1, -1) if x.ndim == 1 else x
    counts = np.zeros((rows.shape[0], weights.shape[0]), np.float64)
    for b, row in enumerate(rows):
        for p in range(tokens.shape[0]):
            n = int(sizes[p])
            for d in _skips(n, attrs):
                for s in range(len(row) - (n - 1) * d):
                    counts[b, index[p]] += all(row[s + j * d] == tokens[p, j] for j in range(n))
    mode = attrs["mode"]
    w = weights.astype(np.float64)
    y = counts if mode == "TF" else np.where(counts > 0, w, 0.0) if mode == "IDF" else counts * w
    return y.astype(np.float32).reshape((-1,) if x.ndim == 1 else y.shape)


@register_kernel("tfidf")
def tfidf_kernel(
    in_types: list[TensorType], attrs: dict[str, Any], target: Target, name: str, passes: bool = True
) -> LoopFunc:
    cpu_only("tfidf", target)
    names = ("x", "tokens", "sizes", "index", "weights", "y")
    x, tokens, sizes, index, weights, y = kernel_params(in_types, _infer(in_types, attrs), names)
    rows, width = (1, *in_types[0].shape) if in_types[0].ndim == 1 else in_types[0].shape
    pool, span = in_types[1].shape
    out = in_types[4].shape[0]
    regs = Regs()
    cnt, ok = regs.new("cnt"), regs.new("ok")
    b, p, d, s, j, o = (Var(v) for v in ("b", "p", "d", "s", "j", "o"))
    n = Var("n")
    lo, hi, skip = max(attrs["min_gram_length"], 1), attrs["max_gram_length"], attrs["max_skip_count"]
    skips = Select(Cmp("==", n, Const(1)), Const(1), Const(skip + 1))
    fits = (s + (n - 1) * d) < width
    match = seq(
        put(ok, Const(1)),
        loop(
            j,
            n,
            If(
                Cmp("!=", Cast("int64", Load(x, b * width + s + j * d)), Load(tokens, p * span + j)),
                put(ok, ZERO),
            ),
        ),
        If(Cmp("==", get(ok), Const(1)), incr(cnt)),
    )
    count_entry = seq(
        put(cnt, ZERO),
        If(BinOp("and", n >= lo, n <= hi), loop(d, skips, loop(s, width, If(fits, match)), start=Const(1))),
        Store(y, b * out + Load(index, p), Load(y, b * out + Load(index, p)) + Cast("float32", get(cnt))),
    )
    f0 = Const(0.0, "float32")
    at = b * out + o
    weighted = {
        "TF": Load(y, at),
        "IDF": Select(Load(y, at) > f0, Load(weights, o), f0),
        "TFIDF": Load(y, at) * Load(weights, o),
    }[attrs["mode"]]
    body = loop(
        b,
        rows,
        seq(
            loop(o, out, Store(y, at, f0)),
            loop(p, pool, LetStmt(n, Load(sizes, p), count_entry)),
            loop(o, out, Store(y, at, weighted)),
        ),
    )
    return finish(name, (x, tokens, sizes, index, weights, y), (), regs.wrap(body))
