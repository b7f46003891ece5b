"""Packed channel layouts for CPUs: NCHW[x]c activations and the ops that run on them.

`layout_transform(x, src="NCHW", dst="NCHW16c")` packs channels into blocks of 16
(y[n, c // 16, h, w, c % 16] = x[n, c, h, w]); `dst="NCHW"` unpacks. The block divides
the channel count (the layout pass picks it so), so there is no channel padding.

`conv2d_nchwc(x, w, b?)` is a 2-D convolution on packed activations:

    x: (N, C/ib, H, W, ib)             the packed input
    w: (M/ob, C/ib, KH, KW, ib, ob)    OIHW[ib]i[ob]o, packed once at compile time
       (M/ob, 1, KH, KW, 1, ob)        depthwise (group = C = M, ib = ob)
    b: (M/ob, ob)                      the packed per-channel bias (optional)
    y: (N, M/ob, OH, OW, ob)

Attributes are conv's (`strides`, `pads`, `dilations`, 2 each / 4 pads) plus `group`
(1 or the channel count). The compute accumulates in an `_acc` stage whose innermost axis
is the channel block, so the schedule vectorizes it with contiguous weight loads and one
broadcast per input pixel (the NCHWc direct convolution of TVM's x86 conv2d_NCHWc; MNN and
MACE pack the same way). The references unpack, run `conv`, and pack again.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tensorir.errors import ShapeError
from tensorir.graph.types import TensorType
from tensorir.ops.conv import Ints, conv, out_spatial, spatial_attrs
from tensorir.ops.conv_tile import (
    default_oc_blocks,
    narrow_row_oc_blocks,
    oc_block_choices,
    pixel_oc_blocks,
    tile_pixels,
)
from tensorir.ops.infer import Types
from tensorir.ops.registry import register_op

_PACKED = re.compile(r"^NCHW(\d+)c$")


def layout_block(layout: str) -> int:
    """The channel block of a layout string: 0 for "NCHW", x for "NCHW[x]c"."""
    if layout == "NCHW":
        return 0
    m = _PACKED.match(layout)
    if not m or int(m.group(1)) < 1:
        raise ShapeError(f"unknown layout '{layout}' (want NCHW or NCHW<x>c)")
    return int(m.group(1))


# ---- array helpers (also the pass's constant packing) ---------------------------------
def pack_array(x: np.ndarray, block: int) -> np.ndarray:
    """(N, C, *sp) -> (N, C/block, *sp, block)."""
    n, c, *sp = x.shape
    y = x.reshape(n, c // block, block, *sp)
    return np.ascontiguousarray(np.moveaxis(y, 2, -1))


def unpack_array(x: np.ndarray) -> np.ndarray:
    """(N, C/b, *sp, b) -> (N, C, *sp)."""
    n, co, *sp, b = x.shape
    return np.ascontiguousarray(np.moveaxis(x, -1, 2)).reshape(n, co * b, *sp)


def pack_weight(w: np.ndarray, ib: int, ob: int, depthwise: bool) -> np.ndarray:
    """OIHW -> OIHW[ib]i[ob]o (dense) or (M/ob, 1, KH, KW, 1, ob) (depthwise)."""
    m, c, kh, kw = w.shape
    if depthwise:
        return np.ascontiguousarray(w.reshape(m // ob, ob, 1, kh, kw, 1).transpose(0, 2, 3, 4, 5, 1))
    y = w.reshape(m // ob, ob, c // ib, ib, kh, kw).transpose(0, 2, 4, 5, 3, 1)
    return np.ascontiguousarray(y)


def unpack_weight(w: np.ndarray, depthwise: bool) -> np.ndarray:
    mo, co, kh, kw, ib, ob = w.shape
    if depthwise:
        return np.ascontiguousarray(w.transpose(0, 5, 1, 2, 3, 4)).reshape(mo * ob, 1, kh, kw)
    return np.ascontiguousarray(w.transpose(0, 5, 1, 4, 2, 3)).reshape(mo * ob, co * ib, kh, kw)


# ---- layout_transform ----------------------------------------------------------------
def _transform_infer(ins: Types, attrs: dict[str, Any]) -> Types:
    x = ins[0]
    src, dst = layout_block(attrs["src"]), layout_block(attrs["dst"])
    if src == 0 and dst > 0:
        if x.ndim != 4 or x.shape[1] % dst:
            raise ShapeError(f"cannot pack {x} into {attrs['dst']}: need NCHW with C divisible by {dst}")
        n, c, h, w = x.shape
        return [TensorType((n, c // dst, h, w, dst), x.dtype)]
    if src > 0 and dst == 0:
        if x.ndim != 5 or x.shape[4] != src:
            raise ShapeError(f"input {x} is not in layout {attrs['src']}")
        n, co, h, w, b = x.shape
        return [TensorType((n, co * b, h, w), x.dtype)]
    raise ShapeError(f"layout_transform {attrs['src']} -> {attrs['dst']} is not supported")


@register_op("layout_transform", infer=_transform_infer, pattern="injective", gpu="injective")
def layout_transform(x: np.ndarray, src: str, dst: str) -> np.ndarray:
    block = layout_block(dst)
    return pack_array(x, block) if block else unpack_array(x)


# ---- conv2d_nchwc --------------------------------------------------------------------
def conv_nchwc_attrs(attrs: dict[str, Any]) -> tuple[Ints, Ints, Ints]:
    return spatial_attrs(2, attrs.get("strides"), attrs.get("pads"), attrs.get("dilations"))


def _conv_nchwc_infer(ins: Types, attrs: dict[str, Any]) -> Types:
    x, w = ins[0], ins[1]
    if x.ndim != 5 or w.ndim != 6 or w.dtype != x.dtype:
        raise ShapeError(f"conv2d_nchwc needs a 5-D input and 6-D weight of one dtype, got {x}, {w}")
    n, co, h, wd, ib = x.shape
    mo, wc, kh, kw, wib, ob = w.shape
    group = int(attrs.get("group", 1))
    if group == 1:
        ok = (wc, wib) == (co, ib)
    else:
        ok = group == co * ib == mo * ob and (wc, wib) == (1, 1) and ib == ob
    if not ok:
        raise ShapeError(f"conv2d_nchwc weight {w} does not match input {x} with group={group}")
    if len(ins) > 2 and ins[2].shape != (mo, ob):
        raise ShapeError(f"conv2d_nchwc bias {ins[2]} must have shape [{mo}, {ob}]")
    s, p, d = conv_nchwc_attrs(attrs)
    oh, ow = out_spatial((h, wd), (kh, kw), s, p, d)
    return [TensorType((n, mo, oh, ow, ob), x.dtype)]


def conv_nchwc_flops(ins: Types, attrs: Mapping[str, Any], out: TensorType) -> int:
    """w: (M/ob, C/ib, KH, KW, ib, ob), depthwise (.., 1, KH, KW, 1, ob): a dot product per output."""
    return 2 * out.size * math.prod(int(d) for d in ins[1].shape[1:5])


@register_op(
    "conv2d_nchwc",
    infer=_conv_nchwc_infer,
    pattern="anchor",
    tunable=True,
    flops=conv_nchwc_flops,
    gpu="conv_nchwc",
)
def conv2d_nchwc(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None = None,
    strides: Ints | None = None,
    pads: Ints | None = None,
    dilations: Ints | None = None,
    group: int = 1,
    split_k: int = 1,  # how a GPU kernel splits the reduction (conv_splitk_gpu.py): same result
) -> np.ndarray:
    depthwise = group != 1
    bias = None if b is None else b.reshape(-1)
    y = conv(unpack_array(x), unpack_weight(w, depthwise), bias, strides, pads, dilations, group)
    return pack_array(y, w.shape[-1])


def packed_shape(shape: Sequence[int], block: int) -> tuple[int, ...]:
    n, c, *sp = shape
    return (n, c // block, *sp, block)


# ---- computes and schedules ------------------------------------------------------------


def layout_transform_compute(x: Any, src: str, dst: str) -> Any:
    from tensorir.schedule.te import compute

    block = layout_block(dst)
    if block:
        shape = packed_shape(x.shape, block)
        return compute(shape, lambda n, co, h, w, ci: x[n, co * block + ci, h, w], name="layout_pack")
    n, co, h, w, b = x.shape
    return compute((n, co * b, h, w), lambda i, c, y, z: x[i, c // b, y, z, c % b], name="layout_unpack")


def schedule_layout_transform(s: Any, outputs: Any, target: Any) -> None:
    """Pack: rows of the output's channel block vectorized (the default movement schedule).
    Unpack (NCHW[x]c -> NCHW): a fused flat index would cost a division and a remainder per
    element; instead the loops run (n, channel block, h, w tile, c in block, w in tile), the
    block's channels unrolled and the tile of w vectorized, so every store is a contiguous
    vector and the loads stay within one (w tile x block) patch of the input."""
    import math

    from tensorir.ops.tensor_compute import schedule_movement
    from tensorir.schedule.defaults import PARALLEL_MIN_WORK, inline_injective

    inline_injective(s)
    st = s[outputs[0]]
    reads = s.reads(st)
    if len(outputs) != 1 or outputs[0].ndim != 4 or len(reads) != 1 or reads[0].ndim != 5:
        schedule_movement(s, outputs, target)  # not a lone unpack (a fused group)
        return
    b = reads[0].shape[4]
    i, c, y, z = st.op.axis
    if c.extent % b:
        schedule_movement(s, outputs, target)
        return
    co, ci = st.split(c, factor=b)
    width = math.gcd(target.vector_lanes(outputs[0].dtype), z.extent)
    if width > 1:
        zo, zi = st.split(z, factor=width) if z.extent > width else (None, z)
        if zo is not None:
            st.reorder(i, co, y, zo, ci, zi)
            outer = [i, co, y, zo]
        else:
            st.reorder(i, co, y, ci, zi)
            outer = [i, co, y]
        st.vectorize(zi)
    else:
        st.reorder(i, co, y, z, ci)
        outer = [i, co, y, z]
    if b <= 16:
        st.unroll(ci)
    fused = st.fuse(*outer)
    if math.prod(outputs[0].shape) >= PARALLEL_MIN_WORK and fused.extent > 1:
        st.parallel(fused)


def conv_nchwc_window(x: Any, w: Any, strides: Ints | None, pads: Ints | None, dilations: Ints | None) -> Any:
    """What a direct packed conv reads: (the padded input, (OH, OW), the tap reduce axes
    (rkh, rkw), pos(y, z) -> the input row and column of output (y, z) at those taps, the
    accumulator dtype)."""
    from tensorir.ops.nn_compute import acc_type, const, pad_spatial
    from tensorir.schedule.te import reduce_axis

    s, p, d = conv_nchwc_attrs({"strides": strides, "pads": pads, "dilations": dilations})
    _, _, h, wd, ib = x.shape
    _, _, kh, kw, _, _ = w.shape
    oh, ow = out_spatial((h, wd), (kh, kw), s, p, d)
    rkh, rkw = reduce_axis(kh, "rkh"), reduce_axis(kw, "rkw")
    if (kh, kw) == (1, 1) and s != (1, 1) and not any(p):
        # a strided 1x1 conv reads every s-th pixel: gathered into a dense copy first, the
        # conv reads whole cache lines and the copy is 1/s^2 of the input (named as the pad
        # stage, so the schedule places it as it places a pad: knob pad_at)
        from tensorir.schedule.te import compute

        xp = compute(
            (*x.shape[:2], oh, ow, ib),
            lambda i, c, y, z, e: x[i, c, y * s[0], z * s[1], e],
            name="conv_nchwc_pad",
        )
        return xp, (oh, ow), (rkh, rkw), lambda y, z: (y + rkh, z + rkw), acc_type(x.dtype)
    need = ((oh - 1) * s[0] + (kh - 1) * d[0] + 1, (ow - 1) * s[1] + (kw - 1) * d[1] + 1, ib)
    xp = pad_spatial(x, (p[0], p[1], 0), need, const(0, x.dtype), "conv_nchwc_pad")

    def pos(y: Any, z: Any) -> tuple[Any, Any]:
        return y * s[0] + rkh * d[0], z * s[1] + rkw * d[1]

    return xp, (oh, ow), (rkh, rkw), pos, acc_type(x.dtype)


def conv_nchwc_output(
    acc: Any,
    b: Any,
    dtype: str,
    name: str = "conv_nchwc",
    shape: Sequence[int] | None = None,
    at: Any = None,
) -> Any:
    """The conv's output stage: the accumulator plus the bias, in the input's dtype.
    `shape` and `at(i, m, y, z, j)` (the accumulator element of an output element): where
    the accumulator's blocks are not the output's (conv_wide.py)."""
    from tensorir.ops.nn_compute import acc_type, load
    from tensorir.schedule.te import cast, compute

    def out(i: Any, m: Any, y: Any, z: Any, j: Any) -> Any:
        v = acc[i, m, y, z, j] if at is None else at(i, m, y, z, j)
        return cast(v + load(b, (m, j), acc_type(dtype)) if b is not None else v, dtype)

    return compute(tuple(shape or acc.shape), out, name=name, dtype=dtype)


def direct_conv_acc(
    x: Any, w: Any, strides: Ints | None, pads: Ints | None, dilations: Ints | None, group: int
) -> Any:
    """The direct packed conv's accumulator (n, M/ob, OH, OW, ob): group 1 or depthwise."""
    from tensorir.ops.nn_compute import load
    from tensorir.schedule.te import compute, reduce_axis, sum_

    xp, (oh, ow), (rkh, rkw), pos, dt = conv_nchwc_window(x, w, strides, pads, dilations)
    n, _, _, _, ib = x.shape
    mo, _, _, _, _, ob = w.shape
    if group == 1:
        rco, rci = reduce_axis(x.shape[1], "rco"), reduce_axis(ib, "rci")

        def body(i: Any, m: Any, y: Any, z: Any, j: Any) -> Any:
            xv = load(xp, (i, rco, *pos(y, z), rci), dt)
            return sum_(xv * load(w, (m, rco, rkh, rkw, rci, j), dt), axis=[rco, rkh, rkw, rci])
    else:

        def body(i: Any, m: Any, y: Any, z: Any, j: Any) -> Any:
            xv = load(xp, (i, m, *pos(y, z), j), dt)
            return sum_(xv * load(w, (m, 0, rkh, rkw, 0, j), dt), axis=[rkh, rkw])

    return compute((n, mo, oh, ow, ob), body, name="conv_nchwc_acc")


def conv2d_nchwc_compute(
    x: Any,
    w: Any,
    b: Any = None,
    strides: Ints | None = None,
    pads: Ints | None = None,
    dilations: Ints | None = None,
    group: int = 1,
    split_k: int = 1,
) -> Any:
    from tensorir.ops.conv_algorithms import conv_algorithm

    attrs = {"strides": strides, "pads": pads, "dilations": dilations, "group": group}
    # the kernel builder pins the algorithm (conv_algorithms.specialize); a bare compute call
    # takes the analytic default
    algo = conv_algorithm(TensorType(x.shape, x.dtype), TensorType(w.shape, w.dtype), attrs)
    if algo == "im2col":
        from tensorir.schedule.algorithms.im2col import im2col_conv_nchwc_compute

        return im2col_conv_nchwc_compute(x, w, b, strides, pads, dilations, group)
    if algo == "gemm":  # 1x1 as a GEMM on the GPU (ops/conv1x1_gpu.py)
        from tensorir.ops.conv1x1_gpu import conv1x1_gemm_compute

        return conv1x1_gemm_compute(x, w, b)
    if algo == "splitk":  # the reduction split over two launches on the GPU (ops/conv_splitk_gpu.py)
        from tensorir.ops.conv_splitk_gpu import splitk_conv_compute

        return splitk_conv_compute(x, w, b, strides, pads, dilations, split_k)
    acc = direct_conv_acc(x, w, strides, pads, dilations, group)
    return conv_nchwc_output(acc, b, x.dtype)


def schedule_conv_nchwc(s: Any, outputs: Sequence[Any], target: Any, wide_tile: Any = None) -> None:
    """Per (image, channel block group, row chunk) — the parallel loop — and per register
    tile of up to MAX_PIXELS output pixels x `oc_blocks` channel blocks of one row: the
    tile's sums stay in registers while (input channel blocks, taps, input channels) run
    outside (per step one weight vector load per block, one broadcast and one FMA per
    pixel and block), then the epilogue (bias, fused elementwise ops) reads them from the
    registers and stores the output, with no accumulator buffer in between. `wide_tile(acc, registers)`:
    the accumulator vectors per tile where they are wider than the output's blocks
    (conv_wide.py)."""
    from tensorir.dtypes import elem_bytes
    from tensorir.ops.nn_compute import (
        chunk_first_axis,
        fuse_all,
        inline_elementwise,
        maybe_parallel,
        pick_vector,
        place_pad,
        stage_named,
        work_of,
    )
    from tensorir.schedule.space import knob

    if stage_named(s, "im2col_acc") is not None:
        from tensorir.schedule.algorithms.im2col import schedule_im2col_nchwc

        schedule_im2col_nchwc(s, outputs, target)
        return
    acc = next(st for st in s.stages if st.name.endswith("_acc") and st.op.reduce_axis)
    pad = stage_named(s, "conv_nchwc_pad")
    inline_elementwise(s, keep=[pad] if pad is not None else [])
    y = next(st for st in s.stages if st.is_output)
    b, m, oh, ow, j = y.op.axis
    dtype = acc.tensor.dtype
    lanes = target.vector_lanes(dtype)
    v = knob("vector", _vector_choices(j.extent, lanes), pick_vector(j.extent, lanes))
    row_bytes = ow.extent * j.extent * elem_bytes(dtype)
    dense = len(acc.op.reduce_axis) == 4  # depthwise reduces over the taps only
    wide = acc.tensor.shape[-1] // j.extent  # output blocks per accumulator block (conv_wide.py)
    if wide > 1 and wide_tile is not None:
        mb = wide * wide_tile(acc, target.num_vector_registers)
        va = acc.tensor.shape[-1]
    else:
        out_pixels = oh.extent * ow.extent
        mb_choices = oc_block_choices(m.extent, out_pixels) if dense else [1]
        regs = target.num_vector_registers
        if out_pixels == 1 and dense:
            mb_default = pixel_oc_blocks(mb_choices, m.extent)
        else:
            mb_default = default_oc_blocks(mb_choices, j.extent, lanes, regs)
            mb_default = narrow_row_oc_blocks(mb_default, mb_choices, ow.extent, max(1, j.extent // v), regs)
        mb = knob("oc_blocks", mb_choices, mb_default)
        va = v
    mo, mi = y.split(m, factor=mb)
    # rows per parallel iteration (and, with pad_at "chunk", per padded input block); the
    # sums live per register tile, so the row bytes only size the iterations' output
    chunk = chunk_first_axis(oh.extent, row_bytes * mb, b.extent * mo.extent)
    rows = knob("row_chunk", ["auto", *_divisor_choices(oh.extent)], "auto")
    chunk = chunk if rows == "auto" else rows
    so, si = y.split(oh, factor=chunk)
    jo, jv = y.split(j, factor=v)
    ab, am, ah, aw, aj = acc.op.axis
    ju, jw = acc.split(aj, factor=va)
    u = acc.tensor.shape[-1] // va * (mb // wide)  # vectors per output pixel in registers
    # NEON, one input channel per block (the RGB stem): the taps of a row are unrolled (below),
    # so each pixel also keeps about two input values of its window live (stride 2)
    arm_taps = dense and target.arch == "aarch64" and acc.op.reduce_axis[3].extent == 1
    arm_taps = arm_taps and acc.op.reduce_axis[2].extent <= 8
    pixels = tile_pixels("ow_tile", ow.extent, u, target, 2 if arm_taps else 0)
    # one register tile of sums per (row, pixels, output blocks), its epilogue straight after
    wo, wi = y.split(ow, factor=pixels)
    rows_outer = knob("outer_order", ["channels", "rows"], "channels") == "rows"
    if not rows_outer:
        y.reorder(b, mo, so, si, wo, wi, mi, jo, jv)
        outer = fuse_all(y, [b, mo, so])
    else:
        y.reorder(b, so, mo, si, wo, wi, mi, jo, jv)
        outer = fuse_all(y, [b, so, mo])
    y.unroll(wi)
    y.unroll(mi)
    y.vectorize(jv)
    maybe_parallel(y, outer, work_of(acc))
    acc.compute_at(y, wo)
    if pad is not None:
        # depthwise, or a dense conv whose register tile spans every output block (the
        # 3-channel stem): each chunk pads its own input rows once and they stay in cache;
        # other dense convs would re-pad every input block once per output block group
        place_pad(
            pad, y, outer, chunk_default=not dense or mo.extent == 1, lanes=lanes, rows_first=rows_outer
        )
    red = list(acc.op.reduce_axis)
    if dense and knob("reduce_order", ["channels_outer", "taps_outer"], "channels_outer") == "taps_outer":
        red = [red[1], red[2], red[0], red[3]]
    acc.reorder(ab, ah, *red, aw, am, ju, jw)
    register_tile_inner(acc, (aw, am, ju), jw, red, dense, arm_taps, target)
    if dense and wide == 1 and not arm_taps:  # large weights: the next group's streamed ahead
        from tensorir.ops.weight_stream import prefetch_next_group

        w = next(t for t in s.reads(acc) if len(t.shape) == 6)
        prefetch_next_group(acc, w, mb, oh.extent, wo.extent, pixels, red, target)


def register_tile_inner(
    acc: Any, unrolled: Sequence[Any], lane: Any, red: Sequence[Any], dense: bool, arm_taps: bool, target: Any
) -> None:
    """The innermost loops of a packed conv's register tile: the pixel and channel-block
    axes unrolled, the lane axis vectorized, and the innermost reduction unrolled by the
    knob `unroll_reduce` (or as NEON wants it)."""
    from tensorir.schedule.space import knob

    for axis in unrolled:
        acc.unroll(axis)
    acc.vectorize(lane)
    inner = red[-1]
    step = knob("unroll_reduce", [1, 2, 4], 1)
    if step > 1 and inner.extent % step == 0 and inner.extent > step:
        _, ri = acc.split(inner, factor=step)
        acc.unroll(ri)
    elif (
        step == 1
        and dense
        and target.arch == "aarch64"
        and 1 < inner.extent <= target.vector_lanes(acc.tensor.dtype)
    ):
        # NEON: the input channels of one pixel unrolled read one vector and feed the FMAs
        # by lane (fmla v.4s, v.4s, v.s[k]; codegen/llvm_expr.py) instead of a load each
        acc.unroll(inner)
    elif arm_taps:  # the overlapping windows of the tile's pixels share their loads
        acc.unroll(red[-2])


def _vector_choices(extent: int, lanes: int) -> list[int]:
    """Vector widths for the channel block: powers of two <= lanes dividing it (>= 4 lanes
    unless the block is narrower)."""
    out = [v for v in (4, 8, 16, 32, 64) if v <= lanes and extent % v == 0]
    if out:
        return out
    from tensorir.ops.nn_compute import pick_vector

    return [pick_vector(extent, lanes)]


def _divisor_choices(extent: int) -> list[int]:
    return [d for d in range(1, extent + 1) if extent % d == 0]


def _register_computes() -> None:
    from tensorir.ops.registry import register_compute

    register_compute("layout_transform", schedule=schedule_layout_transform)(layout_transform_compute)
    register_compute("conv2d_nchwc", schedule=schedule_conv_nchwc)(conv2d_nchwc_compute)


_register_computes()
