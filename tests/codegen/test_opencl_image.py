"""image2d_t storage on the OpenCL backend: `Schedule.set_storage` in the loop IR, the
rendered `read_imagef`/`read_imageh` text on mobile profiles (render only: no Adreno/Mali
here), the conv template's `storage` knob, and texel reads numerically on PoCL (which has
images on the CPU)."""

from __future__ import annotations

import numpy as np
import pytest

from tensorir.codegen.opencl import render_opencl
from tensorir.codegen.opencl_image import image_extent, image_fits
from tensorir.devices import get_profile
from tensorir.errors import TirError
from tensorir.graph.types import TensorType
from tensorir.loop.ir import BinOp, Buffer, Cast, Const, For, ForKind, Load, LoopFunc, Ramp, Store, Var
from tensorir.loop.printer import to_text
from tensorir.plan import ImageParam
from tensorir.runtime.opencl_device import run_gpu_kernel
from tensorir.schedule import ScheduleError, compute, create_schedule, lower, placeholder
from tensorir.schedule.trace import verify_trace_roundtrip

GB, LT = ForKind.GPU_BLOCK, ForKind.GPU_THREAD
DENSE = [TensorType((1, 2, 8, 8, 4)), TensorType((3, 2, 3, 3, 4, 4))]
SAMPLER = "const sampler_t tir_sampler = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_NONE | CLK_FILTER_NEAREST;"


# ---- loop IR -----------------------------------------------------------------------------
def test_set_storage_marks_the_parameter():
    x, w = placeholder((2, 8), "float32", "x"), placeholder((2, 8), "float32", "w")
    y = compute((2, 8), lambda i, j: x[i, j] * w[i, j], name="y")
    s = create_schedule([y])
    before = to_text(lower(s, [x, w, y], name="k"))
    s.set_storage(w, "image")
    after = to_text(lower(s, [x, w, y], name="k"))
    assert before.splitlines()[0] == "def k(x: f32[2,8], w: f32[2,8], y: f32[2,8]):"
    assert after.splitlines()[0] == 'def k(x: f32[2,8], w: f32[2,8] "image", y: f32[2,8]):'
    assert before.splitlines()[1:] == after.splitlines()[1:]  # loads stay flat; the renderer maps them
    assert [i.kind for i in s.trace] == ["set_storage"]
    assert to_text(verify_trace_roundtrip(s, [x, w, y], name="k")) == after  # replayed through JSON
    s.set_storage(w, "buffer")
    assert to_text(lower(s, [x, w, y], name="k")) == before


def test_set_storage_errors():
    x, w = placeholder((2, 6), "float32", "x"), placeholder((3,), "float32", "w")
    y = compute((2, 6), lambda i, j: x[i, j] * w[0], name="y")
    s = create_schedule([y])
    with pytest.raises(ScheduleError, match="y is not an input"):
        s.set_storage(y, "image")
    with pytest.raises(ScheduleError, match="unknown storage 'texture'"):
        s.set_storage(x, "texture")
    for t in (x, w):  # rows of 6 elements / a 1-D tensor: no 4-lane texels
        with pytest.raises(ScheduleError, match="no rows of 4-lane texels"):
            s.set_storage(t, "image")


def test_texel_mapping_and_limits():
    assert image_extent((64, 32, 3, 3, 4, 4)) == (32 * 4 * 9, 64)  # width C*KH*KW, height M/4
    assert image_extent((16, 1, 3, 3, 1, 4)) == (9, 16)  # depthwise: KH*KW
    adreno = get_profile("adreno640")
    assert image_fits((64, 32, 3, 3, 4, 4), "float32", adreno)
    assert not image_fits((64, 512, 3, 3, 4, 4), "float32", adreno)  # 18432 > 16384 texels wide
    assert image_fits((64, 512, 3, 3, 4, 4), "float16", get_profile("mali-g76"))  # 65536 wide
    assert not image_fits((4, 4), "int32", adreno)


# ---- rendering -----------------------------------------------------------------------------
def _gather(dtype: str = "float32", shape: tuple[int, ...] = (2, 8)) -> LoopFunc:
    """B[4t:4t+4] = W[4t:4t+4] (one texel) + W[4t + 2] (a lane) + W[4t + k % 4] (a lane known
    at run time); W is 2 rows of 2 texels."""
    W, B = Buffer("W", shape, dtype, "image"), Buffer("B", (16,), dtype)
    k, t = Var("k", "int32"), Var("t")
    vec = Ramp(t * 4, Const(1), 4)
    one = Load(W, BinOp("+", BinOp("*", t, Const(4)), Const(2)))
    lane = Load(W, BinOp("+", BinOp("*", t, Const(4)), Cast("int64", BinOp("%", k, Const(4, "int32")))))
    body = Store(B, vec, BinOp("+", BinOp("+", Load(W, vec), _splat(one)), _splat(lane)))
    return LoopFunc("g", (W, B, k), For(t, Const(0), Const(4), LT, body, "local.x"))


def _splat(e):
    from tensorir.loop.ir import Broadcast

    return Broadcast(e, 4)


def test_image_param_text_on_adreno():
    k = render_opencl(_gather(), get_profile("adreno640"))
    src = k.source
    assert "    __read_only image2d_t W,\n    __global float *B_base, const ulong B_off,\n" in src
    assert "  " + SAMPLER in src
    assert "read_imagef(W, tir_sampler, (int2)(t % 2, t / 2))" in src  # float4: one texel
    assert "read_imagef(W, tir_sampler, (int2)(t % 2, t / 2)).s2" in src  # one lane: component select
    assert "static inline float tir_texel_lane_float(float4 v, int k)" in src
    assert k.images == (ImageParam(0, 2, 2, "float"),)
    assert k.params == (("W", "float32"), ("B", "float32"), ("k", "int32"))


def test_fp16_profile_reads_half_texels():
    src = render_opencl(_gather("float16"), get_profile("mali-g76")).source
    assert "#pragma OPENCL EXTENSION cl_khr_fp16 : enable" in src
    assert "read_imageh(W, tir_sampler, (int2)(t % 2, t / 2))" in src and "read_imagef" not in src
    assert "static inline half tir_texel_lane_half(half4 v, int k)" in src
    k = render_opencl(_gather("float16"), get_profile("pocl"))  # no fp16: CL_HALF_FLOAT read as float
    assert "read_imagef(W" in k.source and k.images[0].channel_type == "half"


def test_image_errors():
    with pytest.raises(TirError, match="does not fit pocl"):
        render_opencl(_gather(shape=(1, 40000)), get_profile("pocl"))
    W, B = Buffer("W", (2, 8), scope="image"), Buffer("B", (16,))
    t = Var("t")
    store = LoopFunc("s", (W, B), For(t, Const(0), Const(16), LT, Store(W, t, Load(B, t)), "local.x"))
    with pytest.raises(TirError, match="W is a read-only image"):
        render_opencl(store)


def test_texel_reads_on_pocl():
    w = np.arange(16, dtype=np.float32).reshape(2, 8)
    got, _ = run_gpu_kernel(
        render_opencl(_gather(), get_profile("pocl")), [w, np.zeros(16, np.float32), np.int32(7)]
    )
    flat = w.reshape(-1)
    want = flat + np.repeat(flat[2::4], 4) + np.repeat(flat[3::4], 4)  # k = 7: lane 3
    np.testing.assert_array_equal(got[1], want)
    np.testing.assert_array_equal(got[0], w)  # the image argument comes back unchanged
