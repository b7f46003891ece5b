"""One level of Strassen for a 1x1 convolution on packed activations: the `algorithm`
"strassen" of a `conv2d_nchwc` with kernel 1x1, stride 1, no padding, one group and a
constant weight, as the op `conv2d_strassen_nchwc`:

    x:  (N, C/ib, H, W, ib)     the packed input
    b7: (7, C/2, M/2)           the seven B operands in B's (K, N) layout: dense_strassen's
                                weight_transform of the weight as a dense's (M, C) matrix,
                                transposed, formed at compile time (`weight_transform`); B's
                                rows contiguous, so the product packs its column panels with
                                vector loads (dense's (N/2, K/2) layout would gather them)
    b:  (M/ob, ob)              the packed bias (optional)
    y:  (N, M/ob, H, W, ob)     = conv2d_nchwc(x, w, b); attribute `ob`

As a matrix product A (P x C) @ B (C x M), P = N*H*W pixels: A's row half qi is the image rows
half qi (H even), row i of the half the pixel (n, qi*H/2 + hh, w) with i = (n*H/2 + hh)*W + w,
and A's column k = input channel k, read through the packed index x[n, k // ib, ., ., k % ib]
(C/2 a multiple of ib: a column half is whole channel blocks). The output's column half is
M/2 output channels, whole blocks of ob. The kernel is dense_strassen's three stages on these
accessors (x7 from the packed input, the batched product, the C combination written in the
packed output layout with the bias and any fused epilogue). The default is dense's measured
rule on (m = P, n = M, k = C): `dense_strassen.strassen_default`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tensorir.errors import ShapeError
from tensorir.graph.types import TensorType
from tensorir.ops import dense_strassen as st
from tensorir.ops.registry import register_compute, register_op

OP = "conv2d_strassen_nchwc"


def eligible(x_shape: Sequence[int], w_shape: Sequence[int], attrs: Mapping[str, Any]) -> bool:
    """A 1x1, stride 1, unpadded, one-group packed conv with even H and an even number of
    input and output channel blocks (each half whole blocks)."""
    from tensorir.ops.layout import conv_nchwc_attrs

    if len(x_shape) != 5 or len(w_shape) != 6 or int(attrs.get("group", 1)) != 1:
        return False
    s, p, _ = conv_nchwc_attrs(dict(attrs))
    one = tuple(w_shape[2:4]) == (1, 1) and tuple(s) == (1, 1) and not any(p)
    return one and x_shape[2] % 2 == 0 and x_shape[1] % 2 == 0 and w_shape[0] % 2 == 0


def product_shape(x_shape: Sequence[int], w_shape: Sequence[int]) -> tuple[int, int, int]:
    """(m, n, k) of the conv as a matrix product: pixels, output and input channels."""
    n, cb, h, w, ib = x_shape
    return n * h * w, w_shape[0] * w_shape[5], cb * ib


def is_default(x_shape: Sequence[int], w_shape: Sequence[int]) -> bool:
    """dense's measured rule on the conv's product (module docstring)."""
    m, n, k = product_shape(x_shape, w_shape)
    return st.strassen_default(m, n, k)


def weight_transform(w_packed: np.ndarray) -> np.ndarray:
    """conv2d_nchwc's packed 1x1 weight (M/ob, C/ib, 1, 1, ib, ob) -> b7 (7, C/2, M/2)."""
    from tensorir.ops.layout import unpack_weight

    w = unpack_weight(w_packed, False)
    bt = st.weight_transform(w.reshape(w.shape[0], w.shape[1]))
    return np.ascontiguousarray(bt.transpose(0, 2, 1))


def _infer(ins: list[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
    if len(ins) not in (2, 3):
        raise ShapeError(f"{OP} takes (x, b7) or (x, b7, b), got {len(ins)} inputs")
    x, b7 = ins[0], ins[1]
    ob = int(attrs.get("ob", 0))
    if x.ndim != 5 or b7.ndim != 3 or b7.shape[0] != 7 or ob < 1:
        raise ShapeError(f"{OP}: x must be (N, C/ib, H, W, ib), b7 (7, C/2, M/2) and ob given, got {x}, {b7}")
    n, cb, h, w, ib = x.shape
    if h % 2 or cb % 2 or 2 * b7.shape[1] != cb * ib or b7.shape[2] % ob:
        raise ShapeError(f"{OP}: {x} and {b7} (ob={ob}) need even H, C/ib and (M/2)/ob whole")
    mo = 2 * b7.shape[2] // ob
    if len(ins) == 3 and ins[2].shape != (mo, ob):
        raise ShapeError(f"{OP}: bias {ins[2]} must be [{mo}, {ob}]")
    return [TensorType((n, mo, h, w, ob), x.dtype)]


def _rows(x: np.ndarray) -> np.ndarray:
    """Unpacked (N, C, H, W) -> A (P, C) in the kernel's row order (module docstring)."""
    n, c, h, w = x.shape
    return x.reshape(n, c, 2, h // 2, w).transpose(2, 0, 3, 4, 1).reshape(-1, c)


@register_op(OP, infer=_infer, pattern="opaque")
def conv2d_strassen_nchwc(
    x: np.ndarray, b7: np.ndarray, b: np.ndarray | None = None, ob: int = 16
) -> np.ndarray:
    """numpy: unpack x, dense_strassen's reference on the rows, bias, pack."""
    from tensorir.ops.layout import pack_array, unpack_array

    xu = unpack_array(x)
    n, _, h, w = xu.shape
    y = st.dense_strassen(_rows(xu), b7.transpose(0, 2, 1)).astype(np.float64)
    y = y.reshape(2, n, h // 2, w, -1).transpose(1, 4, 0, 2, 3).reshape(n, -1, h, w)
    if b is not None:
        y = y + b.reshape(1, -1, 1, 1)
    return pack_array(y.astype(x.dtype), int(ob))


def conv_strassen_compute(x: Any, b7: Any, b: Any = None, ob: int = 16) -> Any:
    """dense_strassen's stages with the packed accessors of the module docstring."""
    from tensorir.ops.nn_compute import acc_type, load
    from tensorir.schedule.te import cast

    n, cb, h, w, ib = x.shape
    h2, kb2, m2 = h // 2, cb // 2, b7.shape[2]
    nb2, dt = m2 // int(ob), acc_type(x.dtype)

    def a(q: st.Quad, p: Any, k: Any) -> Any:
        c = q[1] * kb2 + k // ib
        return load(x, (p // (h2 * w), c, q[0] * h2 + p // w % h2, p % w, k % ib), dt)

    xs = st.operand_stage(st.A_TERMS, a, (7, n * h2 * w, kb2 * ib), "strassen_x", ("p", "k"))
    p = st.product_stage(xs, b7, False, ())

    def locate(i: Any, mb: Any, y: Any, z: Any, j: Any) -> Any:
        return (), y // h2, mb // nb2, (i * h2 + y % h2) * w + z, mb % nb2 * int(ob) + j

    def finish(v: Any, i: Any, mb: Any, y: Any, z: Any, j: Any) -> Any:
        return cast(v + load(b, (mb, j), dt) if b is not None else v, x.dtype)

    return st.combine_stage(p, (n, 2 * nb2, h, w, int(ob)), locate, finish, OP, x.dtype)


def schedule_conv_strassen(s: Any, outputs: Sequence[Any], target: Any) -> None:
    """x7 and the product as dense's (x7 vectorized within an input channel block); the
    output per (image, row of the upper half) (parallel): for each output channel block of
    the left half and pixel of the row, the four quadrants unrolled (their selects fold
    away), the channel block vectorized, with the bias and fused epilogue."""
    from tensorir.ops.nn_compute import fuse_all, maybe_parallel, pick_vector, stage_named

    xs = stage_named(s, "strassen_x")
    x = next(t for t in xs.op.input_tensors() if t.ndim == 5)
    st.schedule_products(s, target, a_block=x.shape[-1])
    y = next(stg for stg in s.stages if stg.is_output)
    yn, mb, yh, yw, mi = y.op.axis
    qh, hh = y.split(yh, factor=yh.extent // 2)
    qm, mbi = y.split(mb, factor=mb.extent // 2)
    mo, mv = y.split(mi, factor=pick_vector(mi.extent, target.vector_lanes(y.tensor.dtype)))
    y.reorder(yn, hh, mbi, yw, qh, qm, mo, mv)
    y.unroll(qh)
    y.unroll(qm)
    y.vectorize(mv)
    maybe_parallel(y, fuse_all(y, [yn, hh]), int(np.prod(y.tensor.shape)))


register_compute(OP, schedule=schedule_conv_strassen)(conv_strassen_compute)
