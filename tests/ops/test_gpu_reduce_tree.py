"""Work-group (tree) reductions in the GPU rows template (`reduce_threads`): PoCL against the
numpy references for the default knobs, forced tree sizes and random configs; the rendered
__local array, barriers and tree; the default rule on several device profiles.

Tolerances: outputs compared with rtol 1e-4, atol 1e-5 (float32 sums re-associated by the
tree); argmax exactly."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

from tensorir.devices import get_profile
from tensorir.graph.types import TensorType
from tensorir.ops.kernel import kernel_space, op_kernel
from tensorir.ops.registry import get_op
from tensorir.schedule.gpu.rows import default_reduce_threads, reduce_thread_choices
from tensorir.target import get_target

GPU = dataclasses.replace(get_target("host"), kind="opencl")

CASES = {
    "softmax1000": ("softmax", [(4, 1000)], {"axis": -1}),
    "softmax6625": ("softmax", [(2, 6625)], {"axis": -1}),
    "log_softmax": ("log_softmax", [(3, 1000)], {"axis": -1}),
    "layer_norm": ("layer_norm", [(4, 768), (768,), (768,)], {"axis": -1}),
    "reduce_mean": ("reduce_mean", [(1, 512, 7, 7)], {"axes": (2, 3), "keepdims": 1}),
    "global_avg_pool": ("global_avg_pool", [(1, 512, 7, 7)], {}),
    "instance_norm": ("instance_norm", [(1, 8, 16, 16), (8,), (8,)], {}),
    "reduce_max": ("reduce_max", [(2, 300)], {"axes": (1,), "keepdims": 0}),
    "argmax": ("argmax", [(2, 300)], {"axis": 1, "keepdims": 1}),
}


def _types(shapes: list) -> list[TensorType]:
    return [TensorType(s) for s in shapes]


def _check(op: str, shapes: list, attrs: dict, config: dict | None) -> None:
    pytest.importorskip("pyopencl")
    from tensorir.codegen.opencl import render_opencl
    from tensorir.runtime.opencl_device import run_gpu_kernel

    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    types = _types(shapes)
    func = op_kernel(op, types, attrs, GPU, config=config)
    outs = [np.zeros(t.shape, t.dtype) for t in get_op(op).infer(types, attrs)]
    got, _ = run_gpu_kernel(render_opencl(func, get_profile("pocl")), xs + outs, "pocl")
    for g, r in zip(got[len(xs) :], get_op(op).run_reference(xs, attrs), strict=False):
        if g.dtype.kind == "f":
            np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5, err_msg=f"{op} {config}")
        else:
            np.testing.assert_array_equal(g, r, err_msg=f"{op} {config}")


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("threads", [None, 1, 8, 32])
def test_tree_sizes_match_reference(case: str, threads: int | None) -> None:
    op, shapes, attrs = CASES[case]
    _check(op, shapes, attrs, None if threads is None else {"reduce_threads": threads})


@pytest.mark.parametrize("case", ["softmax6625", "layer_norm", "reduce_mean", "global_avg_pool"])
def test_random_configs_match_reference(case: str) -> None:
    op, shapes, attrs = CASES[case]
    space = kernel_space(op, _types(shapes), attrs, GPU)
    rng = random.Random(3)
    for _ in range(3):
        _check(op, shapes, attrs, space.sample(rng))


def test_render_shows_local_array_barriers_and_tree() -> None:
    from tensorir.codegen.opencl import render_opencl

    func = op_kernel("softmax", _types([(2, 1000)]), {"axis": -1}, GPU, config={"reduce_threads": 64})
    k = render_opencl(func, get_profile("pocl"))
    assert (k.local_size, k.global_size) == ((64,), (128,))  # a work-group per row
    src = k.source
    assert "__local float softmax_max_red[64];" in src and "__local float softmax_sum_red[64];" in src
    assert "  softmax_max_red[i1_i] = softmax_max_rf[0];\n  barrier(CLK_LOCAL_MEM_FENCE);\n" in src
    assert (
        "  if (i1_i < 32) {\n"
        "    softmax_max_red[i1_i] = tir_fmax_float(softmax_max_red[i1_i], softmax_max_red[i1_i + 32]);\n"
        "  }\n"
        "  barrier(CLK_LOCAL_MEM_FENCE);\n"
    ) in src
    assert "softmax_sum_red[i1_i] = softmax_sum_red[i1_i] + softmax_sum_red[i1_i + 1];" in src
    assert src.count("barrier(CLK_LOCAL_MEM_FENCE);") == 2 * (1 + 6 + 1)  # two reductions of 64


def test_default_rule_follows_rows_length_and_profile() -> None:
    pocl, nvidia, mali = get_profile("pocl"), get_profile("nvidia"), get_profile("mali-g76")
    assert reduce_thread_choices(pocl, 49) == [1, 8, 16, 32]
    assert reduce_thread_choices(mali, 6625) == [1, 8, 16, 32, 64, 128, 256]
    assert default_reduce_threads(pocl, 4, 1000) == 128  # few long rows: a group per row
    assert default_reduce_threads(pocl, 2, 6625) == 256
    assert default_reduce_threads(pocl, 512, 49) == 1  # 512 rows fill PoCL's 2 compute units
    assert default_reduce_threads(nvidia, 512, 49) == 8  # ... not 132 of them; 49 elements: 8
    assert default_reduce_threads(nvidia, 128, 768) == 128  # BERT's layer norm
    assert default_reduce_threads(pocl, 6, 10) == 1  # short rows stay serial
    space = kernel_space("softmax", _types([(4, 1000)]), {"axis": -1}, GPU)
    assert space.default()["reduce_threads"] == 128
