"""Small computations, their numpy references, and a checker that runs lowered IR
through the interpreter."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from tensorir.loop.interp import run
from tensorir.loop.ir import LoopFunc
from tensorir.loop.printer import to_text
from tensorir.schedule import (
    Schedule,
    Tensor,
    all_,
    compute,
    if_then_else,
    lower,
    placeholder,
    reduce_axis,
    sum_,
    verify_trace_roundtrip,
)


def matmul(m: int = 8, k: int = 8, n: int = 8) -> tuple[Tensor, Tensor, Tensor]:
    A = placeholder((m, k), "float32", "A")
    B = placeholder((k, n), "float32", "B")
    r = reduce_axis(k, "k")
    C = compute((m, n), lambda i, j: sum_(A[i, r] * B[r, j], axis=r), name="C")
    return A, B, C


def conv2d(n: int = 1, ci: int = 3, hw: int = 6, co: int = 4, kk: int = 3, pad: int = 1):
    """NCHW conv, stride 1, with a separate padding stage P."""
    X = placeholder((n, ci, hw, hw), "float32", "X")
    W = placeholder((co, ci, kk, kk), "float32", "W")
    e = hw + 2 * pad

    def padded(b, c, h, w):
        inside = all_(h >= pad, h < hw + pad, w >= pad, w < hw + pad)
        return if_then_else(inside, X[b, c, h - pad, w - pad], 0.0)

    P = compute((n, ci, e, e), padded, name="P")
    rc, rh, rw = reduce_axis(ci, "rc"), reduce_axis(kk, "rh"), reduce_axis(kk, "rw")
    o = e - kk + 1
    Y = compute(
        (n, co, o, o),
        lambda b, f, y, x: sum_(P[b, rc, y + rh, x + rw] * W[f, rc, rh, rw], axis=[rc, rh, rw]),
        name="Y",
    )
    return X, W, P, Y


def conv2d_ref(x: np.ndarray, w: np.ndarray, pad: int) -> np.ndarray:
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    kk = w.shape[2]
    oh, ow = xp.shape[2] - kk + 1, xp.shape[3] - kk + 1
    out = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for i in range(oh):
        for j in range(ow):
            out[:, :, i, j] = np.einsum("nchw,ochw->no", xp[:, :, i : i + kk, j : j + kk], w)
    return out


def random_inputs(tensors: Sequence[Tensor], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(t.shape).astype(t.dtype) for t in tensors]


def execute(func: LoopFunc, inputs: Sequence[np.ndarray], outputs: Sequence[Tensor]) -> list[np.ndarray]:
    outs = [np.zeros(t.shape, t.dtype) for t in outputs]
    run(func, [*inputs, *outs])
    return outs


def check(
    s: Schedule,
    inputs: Sequence[Tensor],
    outputs: Sequence[Tensor],
    ref: Callable[..., np.ndarray | Sequence[np.ndarray]],
    atol: float = 1e-4,
    roundtrip: bool = True,
) -> str:
    """Lower, run on random inputs, compare the last output with `ref(*inputs)`; also check the
    trace round-trip. Returns the printed IR."""
    args = [*inputs, *outputs]
    func = verify_trace_roundtrip(s, args) if roundtrip else lower(s, args)
    data = random_inputs(inputs)
    got = execute(func, data, outputs)[-1]
    np.testing.assert_allclose(got, ref(*data), atol=atol, rtol=1e-4)
    return to_text(func)


def body(text: str) -> str:
    """Printed IR without the `def` line, dedented by one level (for readable expectations)."""
    lines = text.splitlines()[1:]
    return "\n".join(line[2:] for line in lines)
