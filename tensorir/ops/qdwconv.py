"""qdwconv: the integer form of a QDQ depthwise 2-D convolution (one group per channel, any
kernel, strides, pads; dilation 1) on NCHW activations (passes/fold_qdq.py):

    acc[b, c, o] = sum_taps xp[b, c, o*s + tap] * w[c, tap] + bias[c]          (int32)
    y[b, c, o]   = clip(round_even(float32(acc[b, c, o]) * scale[c]) + zero_point, lo, hi)

xp is x padded with `x_zero_point` (the quantized zero, so the padding adds nothing once the
bias carries - x_zp * sum_taps w[c, tap], as for qdense). x: uint8 (N, C, H, W); w: the int8
weights as float32 integers, (C, KH, KW), at most MAX_TAPS taps, so the kernel's sums are
exact float32 FMAs (qdwconv_compute.py; no reduction over channels for a dot-product
instruction to use); bias int32 / scale float32 (C,); `zero_point` / `lo` / `hi` as in qdense
(ops/qdense.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tensorir.errors import ShapeError
from tensorir.graph.types import TensorType
from tensorir.ops.conv import conv, out_spatial
from tensorir.ops.infer import Types
from tensorir.ops.qdense import out_dtype, requantize_ref
from tensorir.ops.registry import register_op

MAX_TAPS = 2**24 // (255 * 128)  # taps whose uint8 x int8 sum float32 holds exactly (514)


def _infer(ins: Types, attrs: dict[str, Any]) -> Types:
    if len(ins) != 4:
        raise ShapeError(f"qdwconv takes 4 inputs (x, w, bias, scale), got {len(ins)}")
    x, w, bias, scale = ins
    if x.dtype != "uint8" or x.ndim != 4:
        raise ShapeError(f"qdwconv x must be uint8 (N, C, H, W), got {x}")
    c = x.shape[1]
    if w.ndim == 3 and w.shape[1] * w.shape[2] > MAX_TAPS:
        raise ShapeError(f"qdwconv: {w.shape[1]}x{w.shape[2]} taps exceed {MAX_TAPS}, float32 sums lose bits")
    want = [
        ("w", w, "float32", (c, *w.shape[1:])),
        ("bias", bias, "int32", (c,)),
        ("scale", scale, "float32", (c,)),
    ]
    for name, t, dtype, shape in want:
        if t.dtype != dtype or t.shape != shape or (name == "w" and t.ndim != 3):
            raise ShapeError(f"qdwconv {name}: want {dtype}{list(shape)}, got {t}")
    out = out_spatial(x.shape[2:], w.shape[1:], attrs["strides"], attrs["pads"], (1, 1))
    return [TensorType((x.shape[0], c, *out), out_dtype(attrs))]


def _flops(ins: Types, attrs: Mapping[str, Any], out: TensorType) -> int:
    return 2 * out.size * int(np.prod(ins[1].shape[1:]))


@register_op("qdwconv", infer=_infer, pattern="anchor", tunable=True, flops=_flops)
def qdwconv(
    x: np.ndarray,
    w: np.ndarray,
    bias: np.ndarray,
    scale: np.ndarray,
    *,
    strides: Sequence[int],
    pads: Sequence[int],
    x_zero_point: int,
    zero_point: int,
    lo: int,
    hi: int,
    hard_swish: float = 0.0,
    float_out: bool = False,
) -> np.ndarray:
    """The integer sum in float64 (exact: |acc| < 2^31 < 2^53), then the requantization:
    sum xp * w = sum (xp - x_zp) * w + x_zp * sum w, and xp - x_zp is x - x_zp padded with 0."""
    c = x.shape[1]
    xc = x.astype(np.float64) - x_zero_point
    acc = np.rint(conv(xc, w.astype(np.float64)[:, None], None, strides, pads, (1, 1), c)).astype(np.int64)
    acc += (x_zero_point * w.astype(np.int64).sum(axis=(1, 2)) + bias)[:, None, None]
    return requantize_ref(acc, scale[:, None, None], zero_point, lo, hi, hard_swish, float_out)
