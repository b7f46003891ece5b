"""qconv1x1: the integer form of a QDQ pointwise convolution (1x1 kernel, stride 1, no
padding, one group) on NCHW activations (passes/fold_qdq.py), p a pixel (h, w):

    acc[b, o, p] = sum_c x[b, c, p] * W[o, c] + bias[o]                       (int32)
    y[b, o, p]   = clip(round_even(float32(acc[b, o, p]) * scale[o]) + zero_point, lo, hi)

x: uint8 (N, C, H, W), C a multiple of 4; y: uint8 (N, Cout, H, W). W int8 (Cout, C) comes
packed as int32 words of four consecutive input channels (`pack_conv_weights`), laid out for
the axis the kernel vectorizes (attribute `vector`): "pixels" (H x W a multiple of 16): (Cout,
C/4), one word per output channel broadcast against 16 pixels of four channels (one vpdpbusd);
"channels" (7x7, 14x14 maps): qdense's (Cout/16, C/4, 16) blocks, the four channels of one
pixel broadcast against 16 output channels. bias / scale / zero_point /
lo / hi / x_offset as in qdense (ops/qdense.py), per output channel.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tensorir.errors import ShapeError
from tensorir.graph.types import TensorType
from tensorir.ops.infer import Types
from tensorir.ops.qdense import (
    BLOCK,
    QUAD,
    check_x_offset,
    out_dtype,
    pack_weights,
    requantize_ref,
    unpack_weights,
)
from tensorir.ops.registry import register_op

VECTOR = ("pixels", "channels")


def pack_conv_weights(w: np.ndarray, vector: str) -> np.ndarray:
    """int8 (Cout, C) -> int32 words of four consecutive channels: (Cout, C/4) for
    vector="pixels"; qdense's (Cout/16, C/4, 16) blocks for vector="channels"."""
    if w.shape[1] % QUAD:
        raise ShapeError(f"qconv1x1 weights need C a multiple of {QUAD}, got {w.shape}")
    if vector == "channels":
        return pack_weights(w)
    return np.ascontiguousarray(w, np.int8).view(np.int32)


def _infer(ins: Types, attrs: dict[str, Any]) -> Types:
    if len(ins) != 4:
        raise ShapeError(f"qconv1x1 takes 4 inputs (x, w, bias, scale), got {len(ins)}")
    x, w, bias, scale = ins
    if x.dtype != "uint8" or x.ndim != 4 or x.shape[1] % QUAD:
        raise ShapeError(f"qconv1x1 x must be uint8 (N, C, H, W) with C a multiple of {QUAD}, got {x}")
    if attrs["vector"] not in VECTOR:
        raise ShapeError(f"qconv1x1 vector={attrs['vector']!r} is not one of {VECTOR}")
    check_x_offset("qconv1x1", attrs)
    cout, cq = bias.shape[0], x.shape[1] // QUAD
    wshape = (-(-cout // BLOCK), cq, BLOCK) if attrs["vector"] == "channels" else (cout, cq)
    want = [("w", w, "int32", wshape), ("bias", bias, "int32", (cout,)), ("scale", scale, "float32", (cout,))]
    for name, t, dtype, shape in want:
        if t.dtype != dtype or t.shape != shape:
            raise ShapeError(f"qconv1x1 {name}: want {dtype}{list(shape)}, got {t}")
    return [TensorType((x.shape[0], cout, *x.shape[2:]), out_dtype(attrs))]


def _flops(ins: Types, attrs: Mapping[str, Any], out: TensorType) -> int:
    return 2 * out.size * ins[0].shape[1]


@register_op("qconv1x1", infer=_infer, pattern="anchor", tunable=True, flops=_flops)
def qconv1x1(
    x: np.ndarray,
    w: np.ndarray,
    bias: np.ndarray,
    scale: np.ndarray,
    *,
    vector: str,
    zero_point: int,
    lo: int,
    hi: int,
    x_offset: int = 0,
    hard_swish: float = 0.0,
    float_out: bool = False,
) -> np.ndarray:
    cout = bias.shape[0]
    if vector == "channels":
        wide = unpack_weights(w, cout).astype(np.int64)
    else:
        wide = np.ascontiguousarray(w).view(np.int8).astype(np.int64)  # (Cout, C)
    acc = np.einsum("oc,nchw->nohw", wide, x.astype(np.int64) - x_offset) + bias[:, None, None]
    return requantize_ref(acc, scale[:, None, None], zero_point, lo, hi, hard_swish, float_out)
