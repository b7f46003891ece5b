"""A dense whose constant weight is packed into column panels at compile time: how a CPU
runs the `direct` algorithm of a dense (x: (M, K) @ w: (N, K)^T) outside the GEMV form.

The register-blocked product (matmul_compute.py) streams B one NR-column panel (K x NR) per
column block. Packed in the kernel, each panel row gathers NR weights that lie K apart in
w's (N, K) rows, once per (column block, row chunk): BERT's FFN-down kernel (128 x 1024 ->
256) took 0.53 ms with it, 0.26 ms without. Packed once at compile time, the kernel reads
each panel contiguously and the pack stage is gone:

    panels[p, k, c] = w[p * NR + c, k]          (ceil(N / NR), K, NR), zero past N
    acc[i, j] = sum_k x[i, k] * panels[j // NR, k, j % NR]     j < ceil(N / NR) * NR
    dense[i, j] = acc[i, j]                                     j < N

NR is the register tile's width (v lanes x `gemm_col_vectors`), so the tile's columns are
one panel: `panel_width` reads that knob when the algorithm is chosen (conv_algorithms.py),
and the schedule takes NR from the op's attribute instead of reading it again.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from tensorir.errors import ShapeError
from tensorir.graph.types import TensorType
from tensorir.ops.registry import register_compute, register_op

OP = "dense_packed"


def eligible(x_shape: Sequence[int], dtype: str) -> bool:
    """A float dense that does not take dense's GEMV form (one or two rows, read along k:
    the plain (N, K) layout is the one it wants)."""
    from tensorir.ops.dense_compute import is_gemv

    return len(x_shape) == 2 and not is_gemv(*x_shape) and dtype in ("float32", "float16")


def panel_width(target: Any, dtype: str, rows: int, cols: int) -> int:
    """NR: the register tile's columns, full vectors (of the accumulator's dtype) x the
    `gemm_col_vectors` knob. The panels are padded, so NR need not divide N (1000 classes:
    16 lanes, not 8)."""
    from tensorir.ops.nn_compute import acc_type, register_tile
    from tensorir.schedule.space import knob

    lanes = target.vector_lanes(acc_type(dtype))
    v = min(lanes, 1 << (cols - 1).bit_length())
    _, _, want = register_tile(target, acc_type(dtype), rows, lanes * 64)  # an unconstrained row
    padded = -(-cols // v) * v
    u = max(1, min(want, padded // v))
    choices = [d for d in range(1, 9) if d == 1 or (d - 1) * v < padded]
    return v * knob("gemm_col_vectors", choices, u)


def pack_panels(w: np.ndarray, nr: int) -> np.ndarray:
    """w (N, K) -> panels (ceil(N / nr), K, nr), zero-padded past N."""
    n, k = w.shape
    p = -(-n // nr)
    padded = np.zeros((p * nr, k), w.dtype)
    padded[:n] = w
    return np.ascontiguousarray(padded.reshape(p, nr, k).transpose(0, 2, 1))


def panel_transform(nr: int) -> Any:
    """The compile-time weight transform for NR = nr (one packed copy per constant and nr)."""
    transform = functools.partial(pack_panels, nr=nr)
    transform.key = f"panels{nr}"  # type: ignore[attr-defined]
    return transform


def _infer(ins: list[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
    if len(ins) != 2:
        raise ShapeError(f"{OP} takes (x, panels), got {len(ins)} inputs")
    x, w = ins
    n = int(attrs["n"])
    if x.ndim != 2 or w.ndim != 3 or w.shape[1] != x.shape[1] or not 0 < n <= w.shape[0] * w.shape[2]:
        raise ShapeError(f"{OP}: x must be (M, K) and panels (P, K, NR), P * NR >= n = {n}; got {x}, {w}")
    return [TensorType((x.shape[0], n), x.dtype)]


@register_op(OP, infer=_infer, pattern="opaque")
def dense_packed(x: np.ndarray, w: np.ndarray, n: int) -> np.ndarray:
    """y = x @ w0^T, where w = pack_panels(w0, NR)."""
    from tensorir.ops.dense import dense

    p, k, nr = w.shape
    return dense(x, w.transpose(0, 2, 1).reshape(p * nr, k)[:n])


def dense_packed_compute(x: Any, w: Any, n: int) -> Any:
    from tensorir.ops.nn_compute import acc_type, load
    from tensorir.schedule.te import compute, reduce_axis, sum_

    (m, kdim), (p, _, nr) = x.shape, w.shape
    dt = acc_type(x.dtype)
    bt = compute((p * nr, kdim), lambda j, k: w[j // nr, k, j % nr], name="dense_packed_bt")
    k = reduce_axis(kdim, "k")

    def acc_body(i: Any, j: Any) -> Any:
        return sum_(load(x, (i, k), dt) * load(bt, (j, k), dt), axis=k)

    acc = compute((m, p * nr), acc_body, name="dense_packed_acc")
    return compute((m, n), lambda i, j: load(acc, (i, j), x.dtype), name="dense")


def schedule_dense_packed(s: Any, outputs: Sequence[Any], target: Any) -> None:
    """matmul_compute's register-blocked product, NR columns (one panel) per tile, no pack stage."""
    from tensorir.ops.matmul_compute import schedule_matmul_block
    from tensorir.ops.nn_compute import inline_elementwise, stage_named

    acc, bt = stage_named(s, "dense_packed_acc"), stage_named(s, "dense_packed_bt")
    inline_elementwise(s, keep=[bt])
    y = next(st for st in s.stages if st.is_output)
    i, j = y.op.axis
    (panels,) = bt.op.input_tensors()
    schedule_matmul_block(s, y, ((), i, j), acc, bt, target, pack_b=False, panel=panels.shape[2])


register_compute(OP, schedule=schedule_dense_packed)(dense_packed_compute)
