"""A GEMV whose constant weight is interleaved by row blocks at compile time: how a CPU runs
a dense of one or two rows (dense_compute.is_gemv) whose weight is a constant.

dense's GEMV form reads R weight rows at once, each along k (dense_compute.py): R streams of
K floats. A classifier head's rows are short (MobileNetV2's 1280 floats: 80 cache lines), so
every R rows start R new streams that the hardware prefetcher has to find again. Its weights
come from memory in the model (the 32 MB L3 is shared with other tenants and the model's
14 MB do not stay in it between runs), and there MobileNetV2's 1280 -> 1000 head read 18 GB/s
on a Zen 4 core (0.28 ms) where 8 rows of 640 KB each read 32 GB/s and a 64 MB reduction 26.
Interleaved once at compile time, the R rows of a block lie side by side, L lanes at a time:

    blocks[p, ko, r, l] = w[p * R + r, ko * L + l]       (ceil(N / R), K / L, R, L), zero past N
    part[i, j, l] = sum_ko x[i, ko * L + l] * blocks[j // R, ko, j % R, l]
    dense[i, j] = sum_l part[i, j, l]                     j < N

so the kernel reads the whole weight as one stream, R x L contiguous floats per k step. R is
the `gemv_rows` knob, read when the kernel is chosen (conv_algorithms.py) since the weight's
layout depends on it; L is dense_compute.GEMV_LANES. From memory (12 weight copies in turn,
one thread, Zen 4), plain -> interleaved: 1280 -> 1000 0.346 -> 0.262 ms, 2048 -> 1000 0.448
-> 0.356, 1024 -> 1000 0.283 -> 0.184; two threads 0.223 -> 0.207, 0.346 -> 0.315, 0.235 ->
0.205. A software prefetch 2-32 KB ahead on top (Stage.prefetch) was no faster (1280: 0.226
without, 0.226-0.275 with; 2048: 0.396 against 0.425-0.535): the hardware prefetcher follows
one stream well.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from tensorir.errors import ShapeError
from tensorir.graph.types import TensorType
from tensorir.ops.registry import register_compute, register_op

OP = "dense_gemv"


def eligible(x_shape: Sequence[int], dtype: str) -> bool:
    """A float dense in dense's GEMV form (one or two rows, K a multiple of GEMV_LANES)."""
    from tensorir.ops.dense_compute import is_gemv

    return len(x_shape) == 2 and is_gemv(*x_shape) and dtype in ("float32", "float16")


def interleave_rows(w: np.ndarray, rows: int, lanes: int) -> np.ndarray:
    """w (N, K) -> blocks (ceil(N / rows), K / lanes, rows, lanes), zero past N."""
    n, k = w.shape
    p = -(-n // rows)
    padded = np.zeros((p * rows, k), w.dtype)
    padded[:n] = w
    return np.ascontiguousarray(padded.reshape(p, rows, k // lanes, lanes).transpose(0, 2, 1, 3))


def row_transform(rows: int, lanes: int) -> Any:
    """The compile-time weight transform for R = rows (one interleaved copy per constant and R)."""
    transform = functools.partial(interleave_rows, rows=rows, lanes=lanes)
    transform.key = f"gemv_rows{rows}x{lanes}"  # type: ignore[attr-defined]
    return transform


def _infer(ins: list[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
    if len(ins) != 2:
        raise ShapeError(f"{OP} takes (x, blocks), got {len(ins)} inputs")
    x, w = ins
    n = int(attrs["n"])
    ok = x.ndim == 2 and w.ndim == 4 and w.shape[1] * w.shape[3] == x.shape[1]
    if not ok or not 0 < n <= w.shape[0] * w.shape[2]:
        raise ShapeError(f"{OP}: x must be (M, K), blocks (P, K / L, R, L), P * R >= n = {n}; got {x}, {w}")
    return [TensorType((x.shape[0], n), x.dtype)]


@register_op(OP, infer=_infer, pattern="opaque")
def dense_gemv(x: np.ndarray, w: np.ndarray, n: int) -> np.ndarray:
    """y = x @ w0^T, where w = interleave_rows(w0, R, L)."""
    from tensorir.ops.dense import dense

    p, kb, r, lanes = w.shape
    return dense(x, w.transpose(0, 2, 1, 3).reshape(p * r, kb * lanes)[:n])


def dense_gemv_compute(x: Any, w: Any, n: int) -> Any:
    from tensorir.ops.dense_compute import gemv_stages
    from tensorir.ops.nn_compute import load

    p, _, r, _ = w.shape
    return gemv_stages(x, n, p * r, lambda j, ko, lane, dt: load(w, (j // r, ko, j % r, lane), dt))


def schedule_dense_gemv(s: Any, outputs: Sequence[Any], target: Any) -> None:
    """dense's GEMV schedule with R rows per step, R the blocks' own (no knob read again)."""
    from tensorir.ops.dense_compute import schedule_gemv
    from tensorir.ops.nn_compute import stage_named

    part = stage_named(s, "dense_part")
    blocks = next(t for t in part.op.input_tensors() if len(t.shape) == 4)
    schedule_gemv(s, part, blocks.shape[2], target)


register_compute(OP, schedule=schedule_dense_gemv)(dense_gemv_compute)
