"""GPU template of the packed direct convolution `conv2d_nchwc` (dense and depthwise).

Each work-item computes a register tile: `ow_tile` adjacent output pixels x `oc_blocks`
output channel blocks x one vector of the channel block (float4 on NCHW4c), the
accumulators private (`conv_nchwc_acc` computed at the local.x loop), the reduction over
input channel blocks x kh x kw (x the input block, unrolled) outside the tile. Work-items
are (image, channel block group, row, pixel group) fused, adjacent work-items on adjacent
pixels; the padded input and the epilogue (bias, relu, residual add) are inlined:

    for f_o in gpu_block(0, 196, "group.x"):
      for f_i in gpu_thread(0, 64, "local.x"):
        acc = allocate(f32[1,1,1,4,4], "local")
        for rco, rkh, rkw: for rci (unrolled): acc[ramp(p*4, 1, 4)] += broadcast(x[..]) * w[ramp(..)]
        y[ramp(..)] = max(acc[ramp(..)] + b[ramp(..)], 0)

Knobs: `vector`, `ow_tile`, `oc_blocks`, `work_group`, `unroll_rci`, `storage`.
Winograd F(2,3)/F(4,3) has its own template (ops/winograd_gpu.py), a tuning choice only: it lost
to this one on an H100. Split-K (ops/conv_splitk_gpu.py) runs this tile over chunks of the input
channels (`tile_direct` on its partial sums) where the outputs alone would not fill the device.
Im2col has no GPU template.

`storage` ("buffer" | "image") is how the kernel reads the weight (M/4, C/4, KH, KW, 4, 4):
a `__global` buffer, or an image2d_t of width C*KH*KW and height M/4 texels whose texel
holds the 4 output channels of one (input channel, tap), so the inner loop's float4 weight
load is one `read_imagef` (codegen/opencl_image.py; depthwise (M/4, 1, KH, KW, 1, 4): width
KH*KW). "image" is a choice only where the profile has images and the texture fits its
image2d limits; it is the default there on mobile GPUs (profile kind "gpu", vendor Qualcomm
or ARM: Adreno, Mali), "buffer" everywhere else (PoCL, desktop GPUs).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import tensorir.ops.layout  # noqa: F401  (the op and its compute register first)
from tensorir.codegen.opencl_image import image_fits
from tensorir.ops.registry import NoScheduleError, register_schedule
from tensorir.schedule.gpu.common import bind_flat, default_group, gpu_profile, group_choices
from tensorir.schedule.gpu.injective import VECTOR
from tensorir.schedule.schedule import Schedule, Stage
from tensorir.schedule.space import knob
from tensorir.schedule.te import PlaceholderOp, Tensor

MAX_PIXELS = 8  # output pixels per work-item
MOBILE_VENDORS = ("qualcomm", "arm")  # "image" is the default storage on their GPUs


def _inline(s: Schedule) -> None:
    for st in s.stages:
        if not st.is_output and not st.op.reduce_axis and not st.inlined:
            st.compute_inline()


def _tile_acc(acc: Stage, vec: int, dense: bool, unroll: bool = True) -> None:
    """acc per work-item: reductions outside, the (blocks, pixels, lanes) tile inside
    (axes (..., image, block, row, pixel, lane); a split-K conv leads with its split)."""
    *lead, am, ah, aw, aj = acc.op.axis
    ajo, ajv = acc.split(aj, factor=vec)
    red = list(acc.op.reduce_axis)
    acc.reorder(*lead, ah, *red, am, aw, ajo, ajv)
    if dense and knob("unroll_rci", [False, True], unroll):
        acc.unroll(red[-1])  # the input channels of one block: 4 loads, 4 x tile FMAs
    for axis in (am, aw, ajo):
        acc.unroll(axis)
    acc.vectorize(ajv)


def _storage(s: Schedule, acc: Stage, profile: Any) -> None:
    """The `storage` knob: the weight as a buffer or an image2d (module docstring)."""
    w = next((t for t in acc.op.input_tensors() if isinstance(t.op, PlaceholderOp) and t.ndim == 6), None)
    fits = w is not None and image_fits(w.shape, w.dtype, profile)
    vendor = (profile.vendor.split() or [""])[0].lower()
    mobile = profile.kind == "gpu" and vendor in MOBILE_VENDORS
    choices = ["buffer", "image"] if fits else ["buffer"]
    if knob("storage", choices, "image" if fits and mobile else "buffer") == "image":
        s.set_storage(w, "image")


def _scalar_simt(profile: Any) -> bool:
    """A GPU whose work-items are scalar lanes of a wide SIMT unit (the profile prefers float
    vectors of width 1, e.g. NVIDIA): float4 per work-item buys nothing there, parallelism does."""
    return profile.kind == "gpu" and profile.preferred_vector_width_float <= 1


def _taps(acc: Stage) -> int:
    """KH x KW of the convolution (1 for a 1x1)."""
    red = acc.op.reduce_axis
    return red[-3].extent * red[-2].extent if len(red) == 4 else red[-2].extent * red[-1].extent


def _default_pixels(profile, rows: int, width: int) -> int:
    """Pixels per work-item: as many as 4 (register reuse of each weight vector) while the
    work-items still fill the device (128 per compute unit); small late layers get 1."""
    for p in (4, 2):
        if p <= width and rows * -(-width // p) >= 128 * profile.compute_units:
            return p
    return 1


@register_schedule("conv2d_nchwc", "opencl")
def schedule_conv_nchwc_gpu(s: Schedule, outputs: Sequence[Tensor], target: Any) -> None:
    """The register-tiled direct convolution (module docstring).

    func = op_kernel("conv2d_nchwc", [x_type, w_type], attrs, opencl_target, config={"ow_tile": 4})
    """
    if any(st.name.endswith("im2col_acc") for st in s.stages):
        raise NoScheduleError("conv2d_nchwc: im2col has no GPU template (use direct)")
    if any(st.name.endswith("conv1x1_acc") for st in s.stages):  # algorithm "gemm"
        from tensorir.ops.conv1x1_gpu import schedule_conv1x1_gpu

        return schedule_conv1x1_gpu(s, outputs, target)
    if any(st.name.endswith("conv_splitk_acc") for st in s.stages):  # algorithm "splitk"
        from tensorir.ops.conv_splitk_gpu import schedule_splitk_gpu

        return schedule_splitk_gpu(s, outputs, target)
    acc = next(st for st in s.stages if st.name.endswith("_acc") and st.op.reduce_axis)
    _inline(s)
    tile_direct(s, next(st for st in s.stages if st.is_output), acc, gpu_profile(target))


def tile_direct(s: Schedule, y: Stage, acc: Stage, profile: Any) -> int:
    """The register-tiled direct template on `y` (axes (..., block, row, pixel, lane): the
    leading ones fused into the work-items) with `acc` computed per work-item. Returns the
    vector width it chose."""
    *lead, m, oh, ow, j = y.op.axis
    dense = len(acc.op.reduce_axis) == 4
    lanes = VECTOR if j.extent % VECTOR == 0 else 1
    simt = _scalar_simt(profile) and _taps(acc) > 1
    vec = knob("vector", sorted({1, lanes}), 1 if simt else lanes)
    blocks = [d for d in (1, 2, 4) if m.extent % d == 0] if dense else [1]
    mb = knob("oc_blocks", blocks, 1)
    choices = [p for p in (1, 2, 4, 8) if p <= max(ow.extent, 1)]
    outer = math.prod(a.extent for a in lead)
    rows = outer * m.extent // mb * oh.extent
    pixels = knob("ow_tile", choices, 1 if simt else _default_pixels(profile, rows, ow.extent))
    mo, mi = y.split(m, factor=mb)
    wo, wi = y.split(ow, factor=pixels)
    jo, jv = y.split(j, factor=vec)
    y.reorder(*lead, mo, oh, wo, mi, wi, jo, jv)
    fused = y.fuse(*lead, mo, oh, wo)
    # the choices must not depend on other knobs (a sampled config is checked against them)
    most = outer * m.extent * oh.extent * ow.extent
    want = 32 if simt else 64
    group = knob("work_group", group_choices(profile, most), default_group(profile, fused.extent, want))
    _, local = bind_flat(y, fused, group)
    for axis in (mi, wi, jo):
        y.unroll(axis)
    y.vectorize(jv)
    acc.compute_at(y, local)
    _tile_acc(acc, vec, dense, unroll=not simt)
    _storage(s, acc, profile)
    return vec
