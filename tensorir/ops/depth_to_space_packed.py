"""depth_to_space (mode DCR) on packed NCHW[x]c tensors: the pixel shuffle without leaving the
layout (passes/layout.py rewrites a DCR depth_to_space of a packed value into it).

DCR reads output channel c of the sub-pixel (i, j) from input channel (i*k + j)*C + c, so the
output's channel blocks are runs of whole input blocks (the output block `block` divides the
input's, C divides into it):

    y[n, co, k*h + i, k*w + j, ci] = x[n, q // ib, h, w, q % ib + ci]
        q = (i*k + j)*C + co*block                        (x: ib channels per block)

One vector per output block: contiguous reads and writes. Packed, the upsampling heads that
convt_unshuffle makes (a 1x1 conv, then the shuffle) need no layout transform on either side:
PP-OCRv4's detector lost three (unpack, NCHW shuffle, repack: 1.0 of 11.1 ms).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from tensorir.errors import ShapeError
from tensorir.graph.types import TensorType
from tensorir.ops.infer import Types
from tensorir.ops.registry import register_compute, register_op

OP = "depth_to_space_packed"


def _infer(ins: Types, attrs: dict[str, Any]) -> Types:
    x, k, ob = ins[0], int(attrs["blocksize"]), int(attrs["block"])
    if x.ndim != 5 or k < 1 or ob < 1:
        raise ShapeError(f"{OP} needs a packed (N, C/b, H, W, b) input and blocksize >= 1, got {x}")
    n, cb, h, w, ib = x.shape
    if (cb * ib) % (k * k) or ((cb * ib) // (k * k)) % ob or ib % ob:
        raise ShapeError(f"{OP}: {cb * ib} channels in blocks of {ib} do not shuffle by {k} into {ob}s")
    return [TensorType((n, cb * ib // (k * k) // ob, h * k, w * k, ob), x.dtype)]


@register_op(OP, infer=_infer, pattern="injective", gpu="injective")
def depth_to_space_packed(x: np.ndarray, blocksize: int, block: int) -> np.ndarray:
    """Unpack, depth_to_space DCR, pack in blocks of `block`."""
    from tensorir.ops.layout import pack_array, unpack_array
    from tensorir.ops.tensor import depth_to_space

    return pack_array(depth_to_space(unpack_array(x), blocksize, "DCR"), block)


def depth_to_space_packed_compute(x: Any, blocksize: int, block: int) -> Any:
    from tensorir.schedule.te import compute

    n, cb, h, w, ib = x.shape
    k, ob = blocksize, block
    c = cb * ib // (k * k)

    def body(i: Any, co: Any, y: Any, z: Any, ci: Any) -> Any:
        q = ((y % k) * k + z % k) * c + co * ob  # the block's first input channel
        return x[i, q // ib, y // k, z // k, q % ib + ci]

    return compute((n, c // ob, h * k, w * k, ob), body, name=OP)


def schedule_depth_to_space_packed(s: Any, outputs: Sequence[Any], target: Any) -> None:
    """Rows (image, block, row of input pixels) in parallel; per input pixel its k x k
    sub-pixels unrolled, so the source index is one add per vector (a fused flat loop
    recomputed y // k, z % k, ... per vector: 0.41 ms for PP-OCR's 2.4 MB shuffle)."""
    from tensorir.ops.nn_compute import fuse_all, inline_elementwise, maybe_parallel, pick_vector

    inline_elementwise(s)
    st = next(x for x in s.stages if x.is_output)
    i, co, y, z, ci = st.op.axis
    k = int(st.tensor.shape[2] // st.op.input_tensors()[0].shape[2])
    yo, yi = st.split(y, factor=k)
    zo, zi = st.split(z, factor=k)
    st.reorder(i, co, yo, yi, zo, zi, ci)
    st.unroll(yi)
    st.unroll(zi)
    if ci.extent > 1:
        _, cv = st.split(ci, factor=pick_vector(ci.extent, target.vector_lanes(st.tensor.dtype)))
        st.vectorize(cv)
    outer = fuse_all(st, [i, co, yo])
    maybe_parallel(st, outer, math.prod(st.tensor.shape))


register_compute(OP, schedule=schedule_depth_to_space_packed)(depth_to_space_packed_compute)
