"""GPU template of a packed convolution with its reduction split in two launches:
`conv2d_nchwc` with `algorithm` "splitk" (dense convs, group 1).

A deep layer has few outputs and a long reduction: ResNet-18's last 3x3 convs have 7 x 7 x
512 outputs (6272 work-items of one 4-channel vector) and 4608 multiply-adds each, too few
work-items to fill a large GPU (an H100 keeps 132 x 2048 resident). Split-K cuts the input
channels into `split_k` chunks; the first launch computes one partial sum per chunk (the
direct template's register tile, conv_gpu.tile_direct, over split x outputs work-items) into
a scratch buffer of the workspace, the second adds the partials, the bias and the fused
epilogue (relu, residual add):

    conv_splitk_acc   acc[k, n, m, y, z, j]  = sum_{c in chunk k, kh, kw, ci} xp[n, c, ..] * w[m, c, .., j]
    conv_splitk_part  part[k, n, m, y, z, j] = acc[k, n, m, y, z, j]          (global scratch)
    conv_splitk_sum   sum[n, m, y, z, j]     = sum_k part[k, n, m, y, z, j]    (registers)
    conv_nchwc        y[n, m, y, z, j]       = epilogue(sum[n, m, y, z, j] + b[m, j])

The two root nests read each other's results across work-groups, so the OpenCL renderer
makes each a kernel of its own (codegen/opencl.py: launches); the in-order queue orders them.

Knobs: `split_k` (divisors of the input channel blocks among SPLITS; declared by
conv_algorithms.specialize, which puts it in the conv's attributes), the direct template's
knobs for the first launch, `sum_group` (work-group of the second). The default split is
the smallest that gives FILL work-items per compute unit (`default_split`); "splitk" is the
default algorithm where that is more than 1 (winograd_gpu.gpu_algorithm_choices).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tensorir.ops.layout import conv_nchwc_output, conv_nchwc_window
from tensorir.schedule.gpu.common import bind_flat, default_group, fuse_axes, gpu_profile, group_choices
from tensorir.schedule.schedule import Schedule, ScheduleError, Stage
from tensorir.schedule.space import knob
from tensorir.schedule.te import Tensor

ACC, PART, SUM = "conv_splitk_acc", "conv_splitk_part", "conv_splitk_sum"
SPLITS = (2, 4, 8, 16)
FILL = 256  # work-items per compute unit the default split aims for


def split_choices(in_blocks: int) -> list[int]:
    """The splits of `in_blocks` input channel blocks into equal chunks."""
    return [k for k in SPLITS if in_blocks % k == 0]


def conv_default_split(x_shape: Sequence[int], w_shape: Sequence[int], attrs: Any, profile: Any) -> int:
    """`default_split` of a conv2d_nchwc: the direct template's work-items on a scalar-SIMT
    GPU are one per output pixel x channel block, N x M/ob x OH x OW."""
    from tensorir.ops.conv import out_spatial
    from tensorir.ops.layout import conv_nchwc_attrs

    s, p, d = conv_nchwc_attrs(dict(attrs))
    oh, ow = out_spatial(tuple(x_shape[2:4]), tuple(w_shape[2:4]), s, p, d)
    return default_split(profile, x_shape[0] * w_shape[0] * oh * ow, x_shape[1])


def default_split(profile: Any, work_items: int, in_blocks: int) -> int:
    """The smallest split that gives FILL work-items per compute unit; 1 where the direct
    conv has them already, on a CPU device (PoCL), or where no split divides the input
    channel blocks."""
    want = FILL * profile.compute_units
    choices = split_choices(in_blocks)
    if profile.kind != "gpu" or work_items >= want or not choices:  # a CPU device: its cores are few
        return 1
    return next((k for k in choices if work_items * k >= want), choices[-1])


def splitk_conv_compute(
    x: Tensor, w: Tensor, b: Tensor | None, strides: Any, pads: Any, dilations: Any, split: int
) -> Tensor:
    """The stages of the module docstring (x: (N, C/ib, H, W, ib), w: (M/ob, C/ib, KH, KW, ib, ob))."""
    from tensorir.ops.nn_compute import load
    from tensorir.schedule.te import compute, reduce_axis, sum_

    xp, (oh, ow), (rkh, rkw), pos, dt = conv_nchwc_window(x, w, strides, pads, dilations)
    n, cb, _, _, ib = x.shape
    mo, _, _, _, _, ob = w.shape
    if split < 1 or cb % split:
        raise ScheduleError(f"split_k {split} does not divide the {cb} input channel blocks")
    chunk = cb // split
    rco, rci = reduce_axis(chunk, "rco"), reduce_axis(ib, "rci")

    def body(k: Any, i: Any, m: Any, y: Any, z: Any, j: Any) -> Any:
        c = k * chunk + rco
        xv = load(xp, (i, c, *pos(y, z), rci), dt)
        return sum_(xv * load(w, (m, c, rkh, rkw, rci, j), dt), axis=[rco, rkh, rkw, rci])

    acc = compute((split, n, mo, oh, ow, ob), body, name=ACC)
    part = compute(acc.shape, lambda *a: acc[a], name=PART)
    rs = reduce_axis(split, "rs")
    total = compute(
        (n, mo, oh, ow, ob), lambda i, m, y, z, j: sum_(part[rs, i, m, y, z, j], axis=[rs]), name=SUM
    )
    return conv_nchwc_output(total, b, x.dtype)


def _named(s: Schedule, suffix: str) -> Stage:
    return next(st for st in s.stages if st.name.endswith(suffix))


def schedule_splitk_gpu(s: Schedule, outputs: Sequence[Tensor], target: Any) -> None:
    """The two launches of the module docstring; conv_gpu's schedule calls it when the
    compute is the split-K one.

    func, spec = build_kernel("conv2d_nchwc", [x_type, w_type], {}, opencl_target, {"algorithm": "splitk"})
    """
    from tensorir.ops.conv_gpu import tile_direct

    acc, part, total = _named(s, ACC), _named(s, PART), _named(s, SUM)
    for st in s.stages:
        if not st.is_output and all(st is not k for k in (acc, part, total)) and not st.inlined:
            st.compute_inline()
    profile = gpu_profile(target)
    vec = tile_direct(s, part, acc, profile)  # launch 1: the partial sums
    y = next(st for st in s.stages if st.is_output)  # launch 2: their sum and the epilogue
    *outer, j = y.op.axis
    jo, jv = y.split(j, factor=vec)
    fused = fuse_axes(y, outer)
    group = knob("sum_group", group_choices(profile), default_group(profile, fused.extent))
    _, local = bind_flat(y, fused, group)
    y.unroll(jo)
    y.vectorize(jv)
    total.compute_at(y, local)
    *lead, tj = total.op.axis
    tjo, tjv = total.split(tj, factor=vec)
    total.reorder(*lead, *total.op.reduce_axis, tjo, tjv)
    total.unroll(tjo)
    total.vectorize(tjv)
