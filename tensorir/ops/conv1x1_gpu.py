"""GPU template of a 1x1 convolution as a GEMM: `conv2d_nchwc` with `algorithm` "gemm".

A 1x1, stride-1, group-1 conv on NCHW4c is, per image, the product [HW pixels x C] x [C x M].
The compute (`conv1x1_gemm_compute`, chosen by conv2d_nchwc's compute when the algorithm is
"gemm") views the pixels as one flat axis p = h * W + w:

    conv1x1_x    xf[n, cb, ci, p]   = x[n, cb, p // W, p % W, ci]      (staged in shared memory)
    conv1x1_acc  acc[n, mb, p, co]  = sum_{cb, ci} xf[n, cb, ci, p] * w[mb, cb, 0, 0, ci, co]
    conv_nchwc   y[n, mb, h, w, co] = acc[n, mb, h * W + w, co] + b[mb, co]   (epilogue inlined)

A work-group owns TP = threads_p * c1_pixels pixels x TM = threads_m * c1_oc_blocks output
channel blocks of one image; per chunk of `tile_k` input channel blocks it stages the
activation tile (tile_k x 4 x TP, one float4 of input channels per (block, pixel) per
cooperative step, stored channel-major so that adjacent work-items read adjacent words) and
the weight tile (TM x tile_k x 4 x 4) in shared memory between barriers; each work-item
accumulates c1_pixels adjacent pixels x c1_oc_blocks float4 channel vectors in registers, and
the store applies bias and the fused epilogue (relu / clip, residual add):

    for n in gpu_block(0, N, "group.z"):
      for mg in gpu_block(0, M/4 / TM, "group.y"): for pg in gpu_block(0, HW / TP, "group.x"):
      for ty in gpu_thread(0, threads_m, "local.y"): for tx in gpu_thread(0, threads_p, "local.x"):
        acc = allocate(f32[c1_oc_blocks, c1_pixels, 4], "local")
        for ko in range(C/4 / tile_k):
          barrier; xf_sh[kc, ci, pp] = x[n, ko*tile_k + kc, ..] (cooperative, float4 per step)
                   w_sh[mm, kc, ci, :] = w[mg*TM + mm, ko*tile_k + kc, 0, 0, ci, :] (cooperative); barrier
          for kc, ci: for rm, rp (unrolled):
            acc[rm, rp, ramp] += broadcast(xf_sh[kc, ci, p]) * w_sh[m, kc, ci, ramp]
        for rm, rp (unrolled): y[n, m, p // W, p % W, ramp] = epilogue(acc[rm, rp, ramp] + b[m, ramp])

Knobs: `threads_p`, `threads_m` (the work-group shape), `c1_pixels`, `c1_oc_blocks` (the
register tile), `tile_k` (a divisor of C/4); pixel and channel tails are guarded. Defaults from
the device profile: 16 x 8 work-items of 4 pixels x 2 channel vectors, tile_k up to 8 (32
input channels); where that gives fewer work-groups than compute units, the register tile
and then threads_m shrink (down to 64 work-items), inside the work-group and local-memory
limits. The algorithm choice is `winograd_gpu.gpu_algorithm_choices`; "gemm" is
a tuning choice there (direct stays the default), `TIR_GPU_CONV_ALGORITHM=gemm` forces it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tensorir.ops.registry import NoScheduleError
from tensorir.schedule.gpu.common import fuse_axes, gpu_profile
from tensorir.schedule.schedule import Schedule, Stage
from tensorir.schedule.space import knob
from tensorir.schedule.te import IterVar, Tensor

ACC = "conv1x1_acc"
XF = "conv1x1_x"
THREADS_P = (4, 8, 16, 32, 64)
THREADS_M = (1, 2, 4, 8, 16)
PIXELS = (1, 2, 4, 8)
OC_BLOCKS = (1, 2, 4)
TILE_K = (1, 2, 3, 4, 6, 8, 12, 16)
MIN_GROUP = 64  # work-items per group the defaults keep


def gemm_eligible(x_shape: Sequence[int], w_shape: Sequence[int], attrs: dict[str, Any]) -> bool:
    """A 1x1, stride-1, unpadded, group-1 conv on 4-channel blocks (the GEMM view applies)."""
    from tensorir.ops.layout import conv_nchwc_attrs

    s, p, _ = conv_nchwc_attrs(dict(attrs))
    return (
        int(attrs.get("group", 1)) == 1
        and tuple(w_shape[2:4]) == (1, 1)
        and tuple(s) == (1, 1)
        and not any(p)
        and x_shape[4] == 4
        and tuple(w_shape[4:]) == (4, 4)
    )


def conv1x1_gemm_compute(x: Any, w: Any, b: Any = None) -> Any:
    """The stages of the module docstring (x: (N, C/4, H, W, 4), w: (M/4, C/4, 1, 1, 4, 4))."""
    from tensorir.ops.nn_compute import acc_type, load
    from tensorir.schedule.te import cast, compute, reduce_axis, sum_

    n, cb, h, wd, ib = x.shape
    mo, _, _, _, _, ob = w.shape
    dt = acc_type(x.dtype)
    xf = compute((n, cb, ib, h * wd), lambda i, c, r, p: load(x, (i, c, p // wd, p % wd, r), dt), name=XF)
    rc, ri = reduce_axis(cb, "rc"), reduce_axis(ib, "ri")
    acc = compute(
        (n, mo, h * wd, ob),
        lambda i, m, p, j: sum_(xf[i, rc, ri, p] * load(w, (m, rc, 0, 0, ri, j), dt), axis=[rc, ri]),
        name=ACC,
    )

    def out(i: Any, m: Any, y: Any, z: Any, j: Any) -> Any:
        v = acc[i, m, y * wd + z, j]
        return cast(v + load(b, (m, j), dt) if b is not None else v, x.dtype)

    return compute((n, mo, h, wd, ob), out, name="conv_nchwc", dtype=x.dtype)


class _Plan:
    """The knob values (module docstring), made to fit the device."""

    def __init__(self, profile: Any, n: int, pixels: int, mo: int, cb: int) -> None:
        limit = min(profile.max_work_group_size, profile.max_work_item_sizes[0])
        want = profile.compute_units  # work-groups to fill the device

        def groups(tp: int, tm: int) -> int:
            return n * -(-pixels // tp) * -(-mo // tm)

        # the register tile, then the group, shrunk while the groups do not fill the device;
        # a group keeps MIN_GROUP work-items (two 32-wide SIMT warps)
        rp, rm, tx, ty = 4, 2, 16, 8
        while groups(tx * rp, ty * rm) < want and (rp > 1 or rm > 1 or tx * ty > MIN_GROUP):
            if rp > 1:
                rp //= 2
            elif rm > 1:
                rm //= 2
            else:
                ty //= 2
        while tx * ty > limit and ty > 1:
            ty //= 2
        self.rp = knob("c1_pixels", PIXELS, rp)
        self.rm = knob("c1_oc_blocks", OC_BLOCKS, rm)
        self.tx = knob("threads_p", THREADS_P, tx)
        self.ty = knob("threads_m", THREADS_M, ty)
        while self.tx * self.ty > limit and self.ty > 1:  # a sampled shape past the limit
            self.ty //= 2
        while self.tx * self.ty > limit and self.tx > 1:
            self.tx //= 2
        tks = [t for t in TILE_K if cb % t == 0]  # a k tail would need guards in the reduction
        self.tk = knob("tile_k", tks, max(t for t in tks if t <= 8))
        room = profile.local_mem_bytes // 4
        while self._floats() > room and self.tk > 1:
            self.tk = max(t for t in tks if t < self.tk)
        if self._floats() > room:
            raise NoScheduleError(f"{ACC}: the tiles need more local memory than the device has")

    def _floats(self) -> int:
        return self.tk * 4 * (self.tx * self.rp + self.ty * self.rm * 4)


def _named(s: Schedule, suffix: str) -> Stage:
    return next(st for st in s.stages if st.name.endswith(suffix))


def _coop(st: Stage, axes: list[IterVar], ty: int, tx: int) -> None:
    """Spread the flattened `axes` over the (local.y ty, local.x tx) work-items; the loops
    after them stay inside each work-item."""
    flat = fuse_axes(st, axes)
    _, inner = st.split(flat, factor=ty * tx)
    fy, fx = st.split(inner, factor=tx)
    st.bind(fy, "local.y")
    st.bind(fx, "local.x")


def schedule_conv1x1_gpu(s: Schedule, outputs: Sequence[Tensor], target: Any) -> None:
    """The shared-memory tiled 1x1 conv (module docstring); conv_gpu's schedule calls it
    when the compute is the GEMM one.

    func, spec = build_kernel("conv2d_nchwc", [x_type, w_type], {}, opencl_target, {"algorithm": "gemm"})
    """
    acc, xf = _named(s, ACC), _named(s, XF)
    for st in s.stages:
        if not st.is_output and st is not acc and st is not xf and not st.inlined:
            st.compute_inline()
    y = next(st for st in s.stages if st.is_output)
    n, m, h, w, j = y.op.axis
    cb = xf.op.axis[1].extent
    plan = _Plan(gpu_profile(target), n.extent, h.extent * w.extent, m.extent, cb)
    p = y.fuse(h, w)
    pg, pi = y.split(p, factor=plan.tx * plan.rp)
    tx, rp = y.split(pi, factor=plan.rp)
    mg, mi = y.split(m, factor=plan.ty * plan.rm)
    ty, rm = y.split(mi, factor=plan.rm)
    y.reorder(n, mg, pg, ty, tx, rm, rp, j)
    for ax, tag in ((n, "group.z"), (mg, "group.y"), (pg, "group.x"), (ty, "local.y"), (tx, "local.x")):
        y.bind(ax, tag)
    y.unroll(rm)
    y.unroll(rp)
    y.vectorize(j)
    acc.compute_at(y, tx)
    an, am, ap, aj = acc.op.axis
    rc, ri = acc.op.reduce_axis
    ko, ki = acc.split(rc, factor=plan.tk)
    acc.reorder(an, ko, ki, ri, am, ap, aj)
    acc.unroll(am)
    acc.unroll(ap)
    acc.vectorize(aj)
    xf.scope = "shared"
    xf.compute_at(acc, ko)
    xn, xc, xr, xp = xf.op.axis
    xf.reorder(xn, xc, xp, xr)
    _coop(xf, [xn, xc, xp], plan.ty, plan.tx)
    xf.unroll(xr)
    wt = next(t for t in acc.op.input_tensors() if t is not xf.tensor)
    w_sh = s[s.cache_read(wt, "shared", [acc])]
    w_sh.compute_at(acc, ko)
    *wa, wj = w_sh.op.axis
    _coop(w_sh, wa, plan.ty, plan.tx)
    w_sh.vectorize(wj)
