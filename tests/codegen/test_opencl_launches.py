"""A loop function whose nests read each other's scratch becomes several launches
(codegen/opencl_launches.py): the split on readable IR, the rendered kernel's launches, their
round trip through to_dict (RPC) and the plan tables (plan.c), helper dedup across sources."""

from __future__ import annotations

from tensorir.codegen.opencl import render_opencl
from tensorir.codegen.opencl_launches import join_sources, split_launches
from tensorir.codegen.opencl_package import OpenCLPlan, plan_c
from tensorir.devices import get_profile
from tensorir.graph.types import TensorType
from tensorir.ops.kernel import build_kernel
from tensorir.plan import Arg, GpuKernel, KernelCall, Launch
from tensorir.target import get_target

POCL = get_target("opencl:pocl")
TYPES = [TensorType((1, 8, 7, 7, 4)), TensorType((8, 8, 3, 3, 4, 4)), TensorType((8, 4))]


def _func(algorithm: str):
    cfg = {"algorithm": algorithm, "split_k": 4} if algorithm == "splitk" else {"algorithm": algorithm}
    func, spec = build_kernel("conv2d_nchwc", TYPES, {"pads": (1, 1, 1, 1)}, POCL, cfg)
    assert spec.algorithm == algorithm
    return func


def _roots(text: str) -> list[str]:
    """The root statements of a printed function (lines at the body's indent)."""
    return [ln.strip() for ln in text.splitlines()[1:] if ln.startswith("  ") and not ln.startswith("   ")]


def test_split_at_the_scratch_read():
    func = _func("splitk")
    assert func.attrs["num_scratch"] == 1 and func.params[-1].name == "conv_splitk_part"
    before = str(func)
    assert [r.split(" in ")[0] for r in _roots(before)] == ["for i0_i1_i2_o_i3_i4_o_f_o", "for i_m_y_z_f_o"]
    first, second = split_launches(func)
    assert (first.name, second.name) == ("conv2d_nchwc", "conv2d_nchwc_then1")
    assert first.params == second.params == func.params
    one, two = str(first), str(second)
    assert _roots(one) == _roots(before)[:1] and _roots(two) == _roots(before)[1:]
    assert "conv_splitk_part[ramp(" in one and "= conv_splitk_acc[" in one  # writes the partial sums
    assert "+ conv_splitk_part[ramp(" in two and "conv_nchwc[ramp(" in two  # reads them, writes y
    assert "conv_nchwc[" not in one and "conv_splitk_acc" not in two  # y only in the second


def test_one_launch_without_scratch():
    func = _func("direct")
    assert split_launches(func) == [func]
    k = render_opencl(func, get_profile("pocl"))
    assert k.then == () and k.launches == (Launch(k.name, k.global_size, k.local_size),)


def test_rendered_launches_and_round_trip():
    k = render_opencl(_func("splitk"), get_profile("pocl"))
    assert [la.name for la in k.launches] == ["conv2d_nchwc", "conv2d_nchwc_then1"]
    assert k.source.count("__kernel ") == 2 and "void conv2d_nchwc_then1(" in k.source
    assert k.launches[1].global_size == (512,) and k.launches[1].local_size == (128,)  # 392 sums
    assert GpuKernel.from_dict(k.to_dict()) == k
    old = k.to_dict()
    del old["then"]  # a server's older client: one launch
    assert GpuKernel.from_dict(old).then == ()


def test_plan_tables_run_every_launch():
    k = render_opencl(_func("splitk"), get_profile("pocl"))
    args = tuple(Arg(kind, i) for kind, i in (("input", 0), ("weight", 0), ("weight", 4608), ("output", 0)))
    call = KernelCall(k.name, (*args, Arg("workspace", 0)), device="gpu")
    plan = OpenCLPlan([k], [call], input_bytes=[6272], output_bytes=[6272], workspace=25088, weights=b"")
    text = plan_c(plan, embedded=False, thread_stubs=True)
    assert '{"conv2d_nchwc", 1, {448, 0, 0}, {64, 0, 0}},' in text
    assert '{"conv2d_nchwc_then1", 1, {512, 0, 0}, {128, 0, 0}},' in text
    assert '{"conv2d_nchwc", TIR_GPU, 0, 2, 0, 5, args0},' in text  # kernel row 0, 2 launches


def test_join_sources_keeps_one_helper():
    head = "#pragma OPENCL EXTENSION cl_khr_fp16 : enable\nstatic inline float f(float x) { return x; }\n"
    joined = join_sources([head + "__kernel void a() {}", head + "__kernel void b() {}"])
    assert joined.count("static inline float f") == 1 and joined.count("#pragma") == 1
    assert "__kernel void a()" in joined and "__kernel void b()" in joined
