"""A dense with a constant weight reads it as column panels packed at compile time
(ops/dense_packed.py): the panel transform and reference, the kernel's IR (contiguous panel
loads, no pack stage), the compiled kernel against float64 numpy alone, fused and under every
panel width, and the cases that take no panels (GEMV rows, a run-time weight).

Tolerance: max |err| / max |ref| < 1e-5 (fp32 sums over K <= 300 terms)."""

from __future__ import annotations

import numpy as np
import pytest

from tensorir.backends import get_backend
from tensorir.graph.types import TensorType
from tensorir.ops import dense_packed as dp
from tensorir.ops.fused import FusedBody, Step
from tensorir.ops.kernel import build_kernel, kernel_space, scratch_arrays
from tensorir.target import get_target
from tests.ops.kernel_run import assert_relative, dense_operands, run_const_weight

HOST = get_target("host")
TOL = 1e-5


def _run(op: str, ins: list, attrs: dict, out_shape: tuple, config: dict | None = None) -> np.ndarray:
    return run_const_weight(op, ins, attrs, out_shape, dp.OP, config)


def _check(got: np.ndarray, ref: np.ndarray) -> None:
    assert_relative(got, ref, TOL)


def test_panels_and_reference():
    x, w = dense_operands(4, 3, 5)
    panels = dp.pack_panels(w, 4)
    assert panels.shape == (2, 3, 4) and panels.flags.c_contiguous
    np.testing.assert_array_equal(panels[1, :, 0], w[4])  # column 4 is the second panel's first
    assert not panels[1, :, 1:].any()  # padded past N
    np.testing.assert_allclose(dp.dense_packed(x, panels, 5), x @ w.T, rtol=1e-6, atol=1e-6)


def test_kernel_reads_panels_contiguously_without_a_pack_stage():
    types = [TensorType((128, 256)), TensorType((1000, 256))]
    func, spec = build_kernel("dense", types, {}, HOST, const_args=frozenset({1}))
    nr = spec.in_types[1].shape[2]
    assert spec.op == dp.OP and spec.in_types[1].shape == (-(-1000 // nr), 256, nr)
    text = str(func)
    assert "pack" not in text.replace("dense_packed", "")
    assert "in1[ramp(" in text and f"k*{nr}, 1, " in text  # one contiguous load per k step


@pytest.mark.parametrize("m, k, n", [(3, 16, 5), (64, 32, 48), (130, 256, 98), (128, 300, 1000)])
def test_kernel_matches_numpy(m: int, k: int, n: int) -> None:
    x, w = dense_operands(m, k, n)
    _check(_run("dense", [x, w], {}, (m, n)), x.astype(np.float64) @ w.T.astype(np.float64))


def test_fused_bias_relu():
    x, w = dense_operands(32, 64, 40, seed=1)
    b = np.random.default_rng(2).standard_normal((1, 40)).astype(np.float32)
    body = FusedBody((Step("dense", (), (0, 1)), Step("add", (), (3, 2)), Step("relu", (), (4,))), 3, 0)
    got = _run("fused", [x, w, b], {"body": body}, (32, 40))
    ref = np.maximum(x.astype(np.float64) @ w.T + b, 0)
    assert (got == 0).any()
    _check(got, ref)


def test_every_panel_width():
    x, w = dense_operands(24, 48, 72, seed=3)
    ref = x.astype(np.float64) @ w.T.astype(np.float64)
    space = kernel_space("dense", [TensorType(x.shape), TensorType(w.shape)], {}, HOST)
    widths = next(kn for kn in space.knobs("direct") if kn.name == "gemm_col_vectors").choices
    assert len(widths) > 1
    for u in widths:
        _check(_run("dense", [x, w], {}, (24, 72), {"algorithm": "direct", "gemm_col_vectors": u}), ref)


def test_gemv_rows_and_runtime_weights_take_no_panels():
    """One or two rows take the GEMV kernel (ops/dense_gemv.py, tests/ops/test_dense_gemv.py);
    a run-time weight, which cannot be packed at compile time, the plain dense."""
    for rows, const, op in ((2, frozenset({1}), "dense_gemv"), (64, frozenset(), "dense")):
        types = [TensorType((rows, 64)), TensorType((32, 64))]
        _, spec = build_kernel("dense", types, {}, HOST, const_args=const)
        assert spec.op == op and bool(spec.transforms) == bool(const)


def test_float16_panels_follow_the_float32_accumulator():
    """float16 operands sum in float32: the panels are float32 vectors wide; the output is
    rounded once to float16 (max |err| / max |ref| < 1e-3, half an fp16 ulp is 4.9e-4)."""
    rng = np.random.default_rng(4)
    x, w = (rng.standard_normal(s).astype(np.float16) for s in ((64, 96), (80, 96)))
    types = [TensorType(x.shape, "float16"), TensorType(w.shape, "float16")]
    func, spec = build_kernel("dense", types, {}, HOST, const_args=frozenset({1}))
    assert spec.op == dp.OP and spec.in_types[1].shape[2] % HOST.vector_lanes("float32") == 0
    out = np.zeros((64, 80), np.float16)
    get_backend(HOST).jit(func, HOST)(x, spec.transforms[1](w), out, *scratch_arrays(func))
    ref = x.astype(np.float64) @ w.T.astype(np.float64)
    assert float(np.max(np.abs(out - ref))) / float(np.max(np.abs(ref))) < 1e-3
