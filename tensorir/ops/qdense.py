"""qdense: uint8 x int8 -> uint8 fully-connected op with int32 accumulation and a fused
requantize epilogue (the integer form of a QDQ dense / matmul, passes/fold_qdq.py).

    acc[m, n] = sum_k x[m, k] * W[n, k] + bias[n]                    (int32)
    y[m, n]   = clip(round_even(float32(acc[m, n]) * scale[n]) + zero_point, lo, hi)   (uint8)

x: uint8 (M, K), K a multiple of 4. The int8 weights W (N, K) come packed at compile time as
int32 words of four consecutive k, in blocks of 16 output columns, the layout the VNNI inner
loop reads one vector at a time (`pack_weights`):

    w[nb, kq, l] = W[16 nb + l, 4 kq : 4 kq + 4] as little-endian int8 bytes    (N/16, K/4, 16)

With attribute `x_offset` 128 (the builds for ARM's sdot, signed x signed bytes) the product
reads x - 128 (x xor 0x80 as int8) and the bias holds + 128 * sum_k W[n, k] to make up for it,
the same acc; 0 (the default) reads x as it is. `sdot_offset(target)` says which a target uses.

bias: int32 (N,) (the input zero point folded in: bias - x_zp * sum_k W[n, k]); scale:
float32 (N,) (x_scale * w_scale[n] / y_scale). Attributes: `n` (N, the packing pads it to a
multiple of 16), `zero_point` (y's), `lo` / `hi` (the clip: 0 / 255, or tighter for a fused
relu / clip). The product matches onnxruntime's QLinearMatMul / QLinearConv requantization
(float32 multiplier, round half to even).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tensorir.errors import ShapeError
from tensorir.graph.types import TensorType
from tensorir.ops.infer import Types
from tensorir.ops.registry import register_op
from tensorir.target import Target

BLOCK = 16  # output columns per packed block (one AVX-512 int32 vector)
QUAD = 4  # int8 values per int32 word (one vpdpbusd group)
X_OFFSETS = (0, 128)  # x_offset: x as uint8, or x - 128 as int8 (sdot)


def sdot_offset(target: Target) -> int:
    """The x_offset the integer ops take for `target`: 128 where their products run on ARM's
    sdot (aarch64 with dotprod, codegen/llvm_dot.py), else 0."""
    return 128 if target.kind == "llvm" and target.arch == "aarch64" and target.has_feature("dotprod") else 0


def offset_bias(bias: np.ndarray, w: np.ndarray, x_offset: int) -> np.ndarray:
    """The bias of an op reading x - x_offset: bias + x_offset * sum_k W[n, k] (int64)."""
    return bias.astype(np.int64) + x_offset * w.astype(np.int64).reshape(w.shape[0], -1).sum(axis=1)


def check_x_offset(op: str, attrs: Mapping[str, Any]) -> int:
    """The op's x_offset attribute (0 when absent), one of X_OFFSETS."""
    x_offset = int(attrs.get("x_offset", 0))
    if x_offset not in X_OFFSETS:
        raise ShapeError(f"{op} x_offset={x_offset} is not one of {X_OFFSETS}")
    return x_offset


def pack_weights(w: np.ndarray) -> np.ndarray:
    """int8 (N, K) -> int32 (ceil(N/16), K/4, 16): the layout above (zero rows pad N)."""
    n, k = w.shape
    if k % QUAD:
        raise ShapeError(f"qdense weights need K a multiple of {QUAD}, got {w.shape}")
    nb = -(-n // BLOCK)
    padded = np.zeros((nb * BLOCK, k), np.int8)
    padded[:n] = w
    blocks = padded.reshape(nb, BLOCK, k // QUAD, QUAD).transpose(0, 2, 1, 3)
    return np.ascontiguousarray(blocks).view(np.int32).reshape(nb, k // QUAD, BLOCK)


def unpack_weights(w: np.ndarray, n: int) -> np.ndarray:
    """The inverse of pack_weights: int8 (N, K)."""
    nb, kq, _ = w.shape
    blocks = np.ascontiguousarray(w).view(np.int8).reshape(nb, kq, BLOCK, QUAD)
    return blocks.transpose(0, 2, 1, 3).reshape(nb * BLOCK, kq * QUAD)[:n]


def _infer(ins: Types, attrs: dict[str, Any]) -> Types:
    if len(ins) != 4:
        raise ShapeError(f"qdense takes 4 inputs (x, w, bias, scale), got {len(ins)}")
    x, w, bias, scale = ins
    n = int(attrs["n"])
    check_x_offset("qdense", attrs)
    want = [
        ("x", x, "uint8", None),
        ("w", w, "int32", (-(-n // BLOCK), x.shape[-1] // QUAD, BLOCK)),
        ("bias", bias, "int32", (n,)),
        ("scale", scale, "float32", (n,)),
    ]
    for name, t, dtype, shape in want:
        if t.dtype != dtype or (shape is not None and t.shape != shape):
            raise ShapeError(f"qdense {name}: want {dtype}{list(shape or [])}, got {t}")
    if x.ndim != 2 or x.shape[1] % QUAD:
        raise ShapeError(f"qdense x must be (M, K) with K a multiple of {QUAD}, got {x}")
    return [TensorType((x.shape[0], n), out_dtype(attrs))]


def _flops(ins: Types, attrs: Mapping[str, Any], out: TensorType) -> int:
    return 2 * out.size * ins[0].shape[-1]


@register_op("qdense", infer=_infer, pattern="anchor", tunable=True, flops=_flops)
def qdense(
    x: np.ndarray,
    w: np.ndarray,
    bias: np.ndarray,
    scale: np.ndarray,
    n: int,
    zero_point: int,
    lo: int,
    hi: int,
    x_offset: int = 0,
    hard_swish: float = 0.0,
    float_out: bool = False,
) -> np.ndarray:
    """The integer product and the float32 requantization of the module docstring."""
    wide = unpack_weights(w, n).astype(np.int64)
    acc = (x.astype(np.int64) - x_offset) @ wide.T + bias
    return requantize_ref(acc, scale, zero_point, lo, hi, hard_swish, float_out)


def out_dtype(attrs: Mapping[str, Any]) -> str:
    """float32 for an op with `float_out` (its output dequantized: float32(acc) * scale), else uint8."""
    return "float32" if attrs.get("float_out") else "uint8"


def requantize_ref(
    acc: np.ndarray,
    scale: np.ndarray,
    zero_point: int,
    lo: int,
    hi: int,
    hard_swish: float = 0.0,
    float_out: bool = False,
) -> np.ndarray:
    """clip(round_even(act(float32(int32 acc) * scale)) + zero_point, lo, hi) as uint8, act
    the identity or, for `hard_swish` = y's scale s (not 0), hard swish in y's units:
    t -> t * clip(t * s/6 + 1/2, 0, 1), which is hard_swish(t s) / s."""
    t = acc.astype(np.int32).astype(np.float32) * scale.astype(np.float32)
    if float_out:  # the real value, no requantization
        return t
    if hard_swish:
        t = t * np.clip(t * np.float32(hard_swish / 6) + np.float32(0.5), np.float32(0), np.float32(1))
    return np.clip(np.rint(t) + np.float32(zero_point), lo, hi).astype(np.uint8)
