"""The direct conv GPU template's `storage` knob: the weight as an image2d_t. Numerics on
PoCL (images on the CPU) against the numpy reference, the defaults per profile and the
rendered text on mobile profiles (render only: no Adreno/Mali here)."""

from __future__ import annotations

import numpy as np
import pytest

from tensorir.codegen.opencl import render_opencl
from tensorir.devices import get_profile
from tensorir.graph.types import TensorType
from tensorir.ops.kernel import kernel_space, op_kernel
from tensorir.ops.registry import get_op
from tensorir.plan import ImageParam
from tensorir.runtime.opencl_device import run_gpu_kernel
from tensorir.target import get_target

pytest.importorskip("pyopencl")
POCL = get_target("opencl:pocl")
DENSE = [(1, 2, 8, 8, 4), (3, 2, 3, 3, 4, 4), (3, 4)]
DW = [(1, 2, 8, 8, 4), (2, 1, 3, 3, 1, 4)]
CASES = [
    (DENSE, {"pads": (1, 1, 1, 1)}, {"storage": "image"}),
    (DENSE, {"pads": (1, 1, 1, 1)}, {"storage": "image", "vector": 1, "ow_tile": 2}),  # scalar texel lanes
    (DW, {"pads": (1, 1, 1, 1), "group": 8, "strides": (2, 2)}, {"storage": "image"}),
]


@pytest.mark.parametrize("shapes, attrs, config", CASES, ids=["dense", "dense-scalar", "depthwise"])
def test_image_weights_match_reference_on_pocl(shapes: list, attrs: dict, config: dict) -> None:
    assert get_profile("pocl").image_support
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    types = [TensorType(s) for s in shapes]
    kernel = render_opencl(op_kernel("conv2d_nchwc", types, attrs, POCL, config=config), get_profile("pocl"))
    width = shapes[1][1] * shapes[1][2] * shapes[1][3] * shapes[1][4]
    assert kernel.images == (ImageParam(1, width, shapes[1][0], "float"),)
    outs = [np.zeros(t.shape, np.float32) for t in get_op("conv2d_nchwc").infer(types, attrs)]
    got, _ = run_gpu_kernel(kernel, xs + outs, "pocl")
    (ref,) = get_op("conv2d_nchwc").run_reference(xs, attrs)
    np.testing.assert_allclose(got[len(xs)], ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("profile", ["adreno640", "mali-g76"])
def test_image_is_the_default_on_mobile_gpus(profile: str) -> None:
    types = [TensorType(s) for s in DENSE]
    func = op_kernel("conv2d_nchwc", types, {"pads": (1, 1, 1, 1)}, get_target(f"opencl:{profile}"))
    k = render_opencl(func, get_profile(profile))
    assert k.images == (ImageParam(1, 2 * 4 * 9, 3, "float"),)  # width C*KH*KW, height M/4
    assert "    __read_only image2d_t in1,\n" in k.source
    assert "read_imagef(in1, tir_sampler, (int2)(" in k.source and "in1_base" not in k.source


def test_fp16_weights_on_adreno_read_half_texels() -> None:
    types = [TensorType(s, "float16") for s in DENSE]
    func = op_kernel("conv2d_nchwc", types, {"pads": (1, 1, 1, 1)}, get_target("opencl:adreno640"))
    k = render_opencl(func, get_profile("adreno640"))
    assert k.images == (ImageParam(1, 72, 3, "half"),)
    assert "#pragma OPENCL EXTENSION cl_khr_fp16 : enable" in k.source
    assert "read_imageh(in1, tir_sampler, (int2)(" in k.source and "read_imagef" not in k.source


def test_knob_choices_and_defaults() -> None:
    types = [TensorType(s) for s in DENSE]
    assert op_kernel("conv2d_nchwc", types, {}, POCL).params[1].scope == "global"  # buffer off mobile
    assert "storage in ['buffer', 'image'] (default 'buffer')" in str(
        kernel_space("conv2d_nchwc", types, {}, POCL)
    )
    wide = [TensorType((1, 512, 3, 3, 4)), TensorType((1, 512, 3, 3, 4, 4))]  # 18432 texels > 16384
    space = kernel_space("conv2d_nchwc", wide, {}, get_target("opencl:adreno640"))
    assert "storage in ['buffer'] (default 'buffer')" in str(space)
