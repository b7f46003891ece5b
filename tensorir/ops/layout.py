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

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from tensorir.errors import ShapeError
from tensorir.graph.types import TensorType
from tensorir.ops.conv import Ints, conv, out_spatial, spatial_attrs
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


@register_op("layout_transform", infer=_transform_infer)
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


@register_op("conv2d_nchwc", infer=_conv_nchwc_infer)
def conv2d_nchwc(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None = None,
    strides: Ints | None = None,
    pads: Ints | None = None,
    dilations: Ints | None = None,
    group: int = 1,
) -> np.ndarray:
    depthwise = group != 1
    bias = None if b is None else b.reshape(-1)
    y = conv(unpack_array(x), unpack_weight(w, depthwise), bias, strides, pads, dilations, group)
    return pack_array(y, w.shape[-1])


def packed_shape(shape: Sequence[int], block: int) -> tuple[int, ...]:
    n, c, *sp = shape
    return (n, c // block, *sp, block)


# ---- computes and schedules ------------------------------------------------------------
MAX_PIXELS = 12  # output pixels per register tile
OC_BLOCKS = 2  # output channel blocks per register tile (dense convs share the input broadcasts)


def layout_transform_compute(x: Any, src: str, dst: str) -> Any:
    from tensorir.schedule.te import compute

    block = layout_block(dst)
    if block:
        shape = packed_shape(x.shape, block)
        return compute(shape, lambda n, co, h, w, ci: x[n, co * block + ci, h, w], name="layout_pack")
    n, co, h, w, b = x.shape
    return compute((n, co * b, h, w), lambda i, c, y, z: x[i, c // b, y, z, c % b], name="layout_unpack")


def conv2d_nchwc_compute(
    x: Any,
    w: Any,
    b: Any = None,
    strides: Ints | None = None,
    pads: Ints | None = None,
    dilations: Ints | None = None,
    group: int = 1,
) -> Any:
    from tensorir.ops.nn_compute import acc_type, const, load, pad_spatial
    from tensorir.schedule.te import cast, compute, reduce_axis, sum_

    s, p, d = conv_nchwc_attrs({"strides": strides, "pads": pads, "dilations": dilations})
    n, _, h, wd, ib = x.shape
    mo, _, kh, kw, _, ob = w.shape
    oh, ow = out_spatial((h, wd), (kh, kw), s, p, d)
    need = ((oh - 1) * s[0] + (kh - 1) * d[0] + 1, (ow - 1) * s[1] + (kw - 1) * d[1] + 1, ib)
    xp = pad_spatial(x, (p[0], p[1], 0), need, const(0, x.dtype), "conv_nchwc_pad")
    dt = acc_type(x.dtype)
    rkh, rkw = reduce_axis(kh, "rkh"), reduce_axis(kw, "rkw")

    def pos(y: Any, z: Any) -> tuple[Any, Any]:
        return y * s[0] + rkh * d[0], z * s[1] + rkw * d[1]

    if group == 1:
        rco, rci = reduce_axis(x.shape[1], "rco"), reduce_axis(ib, "rci")

        def body(i: Any, m: Any, y: Any, z: Any, j: Any) -> Any:
            xv = load(xp, (i, rco, *pos(y, z), rci), dt)
            return sum_(xv * load(w, (m, rco, rkh, rkw, rci, j), dt), axis=[rco, rkh, rkw, rci])
    else:

        def body(i: Any, m: Any, y: Any, z: Any, j: Any) -> Any:
            xv = load(xp, (i, m, *pos(y, z), j), dt)
            return sum_(xv * load(w, (m, 0, rkh, rkw, 0, j), dt), axis=[rkh, rkw])

    acc = compute((n, mo, oh, ow, ob), body, name="conv_nchwc_acc")

    def out(i: Any, m: Any, y: Any, z: Any, j: Any) -> Any:
        v = acc[i, m, y, z, j]
        return cast(v + load(b, (m, j), dt) if b is not None else v, x.dtype)

    return compute(acc.shape, out, name="conv_nchwc", dtype=x.dtype)


def schedule_conv_nchwc(s: Any, outputs: Sequence[Any], target: Any) -> None:
    """Per (image, channel block, row chunk) — the parallel loop — the accumulators of a
    row chunk; in them, runs of up to MAX_PIXELS output pixels x one channel block stay in
    registers while (input channel blocks, taps, input channels) run outside: per step one
    weight vector load, one broadcast and one FMA per pixel. The epilogue (bias, fused
    elementwise ops) is the vectorized copy-out of the chunk."""
    from tensorir.codegen.llvm_types import elem_bytes
    from tensorir.ops.nn_compute import (
        chunk_first_axis,
        fuse_all,
        inline_elementwise,
        maybe_parallel,
        pick_rows,
        pick_vector,
        schedule_pad,
        stage_named,
        work_of,
    )

    acc = next(st for st in s.stages if st.name.endswith("_acc") and st.op.reduce_axis)
    pad = stage_named(s, "conv_nchwc_pad")
    inline_elementwise(s, keep=[pad] if pad is not None else [])
    if pad is not None:
        schedule_pad(pad)
    y = next(st for st in s.stages if st.is_output)
    b, m, oh, ow, j = y.op.axis
    dtype = acc.tensor.dtype
    v = pick_vector(j.extent, target.vector_lanes(dtype))
    row_bytes = ow.extent * j.extent * elem_bytes(dtype)
    dense = len(acc.op.reduce_axis) == 4  # depthwise reduces over the taps only
    mb = OC_BLOCKS if dense and m.extent % OC_BLOCKS == 0 else 1
    mo, mi = y.split(m, factor=mb)
    so, si = y.split(oh, factor=chunk_first_axis(oh.extent, row_bytes * mb, b.extent * mo.extent))
    jo, jv = y.split(j, factor=v)
    y.reorder(b, mo, so, mi, si, ow, jo, jv)
    y.vectorize(jv)
    outer = fuse_all(y, [b, mo, so])
    maybe_parallel(y, outer, work_of(acc))
    acc.compute_at(y, outer)
    ab, am, ah, aw, aj = acc.op.axis
    ju, jw = acc.split(aj, factor=v)
    u = j.extent // v * mb  # vectors per output pixel in registers
    cap = max(1, min(MAX_PIXELS, (target.num_vector_registers - u - 2) // u))
    wo, wi = acc.split(aw, factor=pick_rows(aw.extent, cap))
    acc.reorder(ab, ah, wo, *acc.op.reduce_axis, wi, am, ju, jw)
    for axis in (wi, am, ju):
        acc.unroll(axis)
    acc.vectorize(jw)


def _register_computes() -> None:
    from tensorir.ops.registry import register_compute

    register_compute("layout_transform")(layout_transform_compute)
    register_compute("conv2d_nchwc", schedule=schedule_conv_nchwc)(conv2d_nchwc_compute)


_register_computes()
