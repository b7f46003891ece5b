"""A GEMV (one or two rows) with a constant weight reads it interleaved by row blocks at
compile time (ops/dense_gemv.py): the transform and reference, the kernel's IR (one
contiguous stream of R x L weights per k step), the compiled kernel against float64 numpy
alone, with a guarded tail, two rows, fused, under every row block and in float16, and the
row block per register file (its sums in registers).

Tolerance: max |err| / max |ref| < 1e-5 (fp32 sums over K <= 2048 terms)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tensorir.backends import get_backend
from tensorir.graph.types import TensorType
from tensorir.ops import dense_gemv as dg
from tensorir.ops.dense_compute import GEMV_LANES
from tensorir.ops.fused import FusedBody, Step
from tensorir.ops.kernel import build_kernel, kernel_space, scratch_arrays
from tensorir.target import get_target
from tests.ops.kernel_run import assert_relative, dense_operands, run_built, run_const_weight

HOST = get_target("host")
TOL = 1e-5


def _run(op: str, ins: list, attrs: dict, out_shape: tuple, config: dict | None = None) -> np.ndarray:
    return run_const_weight(op, ins, attrs, out_shape, dg.OP, config)


def _ref(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return x.astype(np.float64) @ w.T.astype(np.float64)


def test_interleaved_blocks_and_reference():
    x, w = dense_operands(1, 32, 5)
    blocks = dg.interleave_rows(w, 4, 16)
    assert blocks.shape == (2, 2, 4, 16) and blocks.flags.c_contiguous
    np.testing.assert_array_equal(blocks[1, 1, 0], w[4, 16:])  # row 4: the second block's first
    np.testing.assert_array_equal(blocks[0, 0, 3], w[3, :16])
    assert not blocks[1, :, 1:].any()  # padded past N
    np.testing.assert_allclose(dg.dense_gemv(x, blocks, 5), x @ w.T, rtol=1e-6, atol=1e-6)


def test_kernel_reads_the_weight_as_one_stream():
    """Per k step the R rows' L lanes are R x L contiguous floats: a block's step ko starts at
    ko * R * L, its rows L apart, and the next block follows the last step of this one."""
    types = [TensorType((1, 1280)), TensorType((1000, 1280))]
    func, spec = build_kernel("dense", types, {}, HOST, const_args=frozenset({1}))
    _, kb, rows, lanes = spec.in_types[1].shape
    assert spec.op == dg.OP and (kb, lanes) == (1280 // GEMV_LANES, GEMV_LANES) and spec.attrs == {"n": 1000}
    loads = re.findall(r"in1\[ramp\(([^,]+), 1, (\d+)\)\]", str(func))
    assert len(loads) == rows and {int(v) for _, v in loads} == {lanes}
    offsets = sorted(int(m.group(1)) if (m := re.search(r"\+ (\d+)$", e)) else 0 for e, _ in loads)
    assert offsets == [r * lanes for r in range(rows)]
    assert all(f"ko*{rows * lanes}" in e and f"*{kb * rows * lanes}" in e for e, _ in loads)


@pytest.mark.parametrize("m, k, n", [(1, 1280, 1000), (1, 320, 1003), (2, 64, 7), (2, 2048, 1000)])
def test_kernel_matches_numpy(m: int, k: int, n: int) -> None:
    """1003 rows leave a padded last block; 7 rows fewer than a block; two input rows."""
    x, w = dense_operands(m, k, n)
    assert_relative(_run("dense", [x, w], {}, (m, n)), _ref(x, w), TOL)


def test_fused_bias_relu():
    x, w = dense_operands(1, 128, 10, seed=1)
    b = np.random.default_rng(2).standard_normal((1, 10)).astype(np.float32)
    body = FusedBody((Step("dense", (), (0, 1)), Step("add", (), (3, 2)), Step("relu", (), (4,))), 3, 0)
    got = _run("fused", [x, w, b], {"body": body}, (1, 10))
    ref = np.maximum(_ref(x, w) + b, 0)
    assert (got == 0).any()
    assert_relative(got, ref, TOL)


def test_every_row_block():
    x, w = dense_operands(1, 256, 90, seed=3)
    space = kernel_space("dense", [TensorType(x.shape), TensorType(w.shape)], {}, HOST)
    rows = next(kn for kn in space.knobs() if kn.name == "gemv_rows").choices
    assert set(rows) == {1, 2, 4, 8, 6}  # 6: the default, a divisor of 90 near 8
    for r in rows:
        types = [TensorType(x.shape), TensorType(w.shape)]
        func, spec = build_kernel("dense", types, {}, HOST, {"gemv_rows": r}, const_args=frozenset({1}))
        assert spec.in_types[1].shape[2] == r
        assert_relative(run_built(func, spec, [x, w], (1, 90)), _ref(x, w), TOL)


def test_float16_sums_in_float32():
    """float16 operands sum in float32; the output is rounded once to float16 (max |err| /
    max |ref| < 1e-3, half an fp16 ulp is 4.9e-4)."""
    rng = np.random.default_rng(4)
    x, w = (rng.standard_normal(s).astype(np.float16) for s in ((1, 96), (80, 96)))
    types = [TensorType(x.shape, "float16"), TensorType(w.shape, "float16")]
    func, spec = build_kernel("dense", types, {}, HOST, const_args=frozenset({1}))
    assert spec.op == dg.OP and spec.in_types[1].dtype == "float16"
    out = np.zeros((1, 80), np.float16)
    get_backend(HOST).jit(func, HOST)(x, spec.transforms[1](w), out, *scratch_arrays(func))
    assert_relative(out.astype(np.float64), _ref(x, w), 1e-3)


def test_a_run_time_weight_keeps_the_plain_gemv():
    types = [TensorType((1, 64)), TensorType((32, 64))]
    _, spec = build_kernel("dense", types, {}, HOST, const_args=frozenset())
    assert spec.op == "dense" and not spec.transforms


@pytest.mark.parametrize(("target", "rows"), [("x86_64-v4", 8), ("x86_64-v3", 4), ("linux-arm64", 4)])
def test_gemv_rows_by_register_file(target, rows):
    """A GEMV reads each weight once: 8 weight rows per step where their sums fit the
    registers (dense_compute.GEMV_ROW_BLOCK); AVX2 and NEON, whose 16 partial sums per row
    take 2 and 4 vectors, keep 4 (8 rows spilled). The blocks take the same R."""
    types = [TensorType((1, 320)), TensorType((1000, 320))]
    tgt = get_target(target)
    assert kernel_space("dense", types, {}, tgt).default()["gemv_rows"] == rows
    _, spec = build_kernel("dense", types, {}, tgt, const_args=frozenset({1}))
    assert spec.in_types[1].shape == (1000 // rows, 320 // GEMV_LANES, rows, GEMV_LANES)


@pytest.mark.parametrize("target", ["x86_64-v4", "x86_64-v3", "linux-arm64"])
def test_gemv_default_keeps_vectors_in_registers(target):
    """The default row block keeps every sum in registers: no vector register goes through
    the stack in the kernel's parallel body (8 rows on AVX2 spilled 6 times, on NEON 22)."""
    from tensorir.codegen import emit_assembly

    types = [TensorType((1, 1280)), TensorType((1000, 1280))]
    tgt = get_target(target)
    func, _ = build_kernel("dense", types, {}, tgt, const_args=frozenset({1}))
    asm = emit_assembly(func, tgt)
    start = asm.index("par_body_closure:")
    body = asm[start : asm.index(f"\n{func.name}:")] if f"\n{func.name}:" in asm[start:] else asm[start:]
    spill = r"%[xyz]mm\d+.*\(%rsp\)|\(%rsp\).*%[xyz]mm\d+" if tgt.arch == "x86_64" else r"\bq\d+, \[sp"
    assert "fmadd" in body or "fmla" in body
    assert not re.search(spill, body), re.findall(f".*(?:{spill}).*", body)[:4]
