"""qdense (ops/qdense.py), qconv1x1 (ops/qconv.py) and qdwconv (ops/qdwconv.py): the integer
kernels against their numpy references (the references against plain integer loops),
bit-exact, on the host (AVX-512 VNNI when the CPU has it), on x86-64 without VNNI (the
widening fallback), and on linux-arm64 under qemu; `vpdpbusd` in the assembly exactly when
the target has VNNI."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from tensorir.codegen import emit_assembly
from tensorir.codegen.link import run_arm64
from tensorir.graph.types import TensorType
from tensorir.loop.interp import run
from tensorir.ops.kernel import kernel_space, op_kernel, run_op, scratch_arrays
from tensorir.ops.qconv import pack_conv_weights
from tensorir.ops.qdense import pack_weights, unpack_weights
from tensorir.ops.registry import get_op
from tensorir.target import get_target

RNG = np.random.default_rng(18)
VNNI = dataclasses.replace(
    get_target("x86_64-v4"), features=get_target("x86_64-v4").features + ",+avx512vnni"
)


def _case(m: int, k: int, n: int, lo: int = 0, hi: int = 255) -> tuple[list[np.ndarray], dict]:
    x = RNG.integers(0, 256, (m, k), dtype=np.uint8)
    w = RNG.integers(-128, 128, (n, k), dtype=np.int8)
    bias = RNG.integers(-20000, 20000, n).astype(np.int32)
    scale = (RNG.random(n) * 4e-4 + 1e-4).astype(np.float32)
    attrs = {"n": n, "zero_point": int(RNG.integers(0, 256)), "lo": lo, "hi": hi}
    return [x, pack_weights(w), bias, scale], attrs


def test_pack_round_trips_and_reference_is_the_integer_product():
    (x, wp, bias, scale), attrs = _case(3, 12, 21)
    w = unpack_weights(wp, 21)
    assert wp.shape == (2, 3, 16) and wp.dtype == np.int32
    assert np.array_equal(pack_weights(w), wp)
    acc = x.astype(np.int64) @ w.astype(np.int64).T + bias
    want = np.clip(np.rint(acc.astype(np.float32) * scale) + attrs["zero_point"], 0, 255)
    got = get_op("qdense").run_reference([x, wp, bias, scale], attrs)[0]
    assert np.array_equal(got, want.astype(np.uint8))
    assert 0 < got.mean() < 255  # the case exercises the clip without saturating everything


@pytest.mark.parametrize(
    ("target", "shape"),
    [("host", (24, 64, 48)), ("host", (5, 36, 20)), ("host", (1, 128, 32)), ("x86_64-v3", (24, 64, 48))],
)
def test_kernel_is_bit_exact(target, shape):
    ins, attrs = _case(*shape, lo=7, hi=250)
    want = get_op("qdense").run_reference(ins, attrs)[0]
    got = run_op("qdense", ins, attrs, target=target)[0]
    np.testing.assert_array_equal(got, want)


def _conv_case(n: int, c: int, hw: tuple[int, int], cout: int, vector: str) -> tuple[list[np.ndarray], dict]:
    x = RNG.integers(0, 256, (n, c, *hw), dtype=np.uint8)
    w = RNG.integers(-128, 128, (cout, c), dtype=np.int8)
    bias = RNG.integers(-20000, 20000, cout).astype(np.int32)
    scale = (RNG.random(cout) * 4e-4 + 1e-4).astype(np.float32)
    attrs = {"vector": vector, "zero_point": int(RNG.integers(0, 256)), "lo": 5, "hi": 250}
    return [x, pack_conv_weights(w, vector), bias, scale], attrs


def test_conv_reference_is_the_pointwise_integer_conv():
    for vector in ("pixels", "channels"):
        ins, attrs = _conv_case(2, 8, (3, 5), 20, vector)
        x, _, bias, scale = ins
        w = RNG.integers(-128, 128, (20, 8), dtype=np.int8)
        ins[1] = pack_conv_weights(w, vector)
        acc = np.einsum("oc,nchw->nohw", w.astype(np.int64), x.astype(np.int64)) + bias[:, None, None]
        y = np.rint(acc.astype(np.float32) * scale[:, None, None]) + attrs["zero_point"]
        want = np.clip(y, 5, 250).astype(np.uint8)
        assert np.array_equal(get_op("qconv1x1").run_reference(ins, attrs)[0], want)


def _dw_case(n: int, c: int, hw: tuple[int, int], k: int, stride: int, pad: int) -> tuple[list, dict]:
    x = RNG.integers(0, 256, (n, c, *hw), dtype=np.uint8)
    w = RNG.integers(-128, 128, (c, k, k)).astype(np.float32)
    bias = RNG.integers(-20000, 20000, c).astype(np.int32)
    scale = (RNG.random(c) * 4e-3 + 1e-3).astype(np.float32)
    attrs = {"strides": (stride, stride), "pads": (pad,) * 4, "x_zero_point": 9}
    attrs |= {"zero_point": int(RNG.integers(0, 256)), "lo": 2, "hi": 251}
    return [x, w, bias, scale], attrs


DW_CASES = [(1, 16, (14, 14), 3, 1, 1), (2, 8, (15, 17), 3, 2, 1), (1, 24, (7, 7), 5, 1, 2)]


@pytest.mark.parametrize("case", DW_CASES)
def test_depthwise_reference_is_the_padded_integer_window_sum(case):
    ins, attrs = _dw_case(*case)
    x, w, bias, scale = ins
    k, s, p = case[3:]
    xp = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (p, p), (p, p)), constant_values=9)
    oh, ow = (xp.shape[2] - k) // s + 1, (xp.shape[3] - k) // s + 1
    acc = np.zeros((x.shape[0], x.shape[1], oh, ow), np.int64) + bias[:, None, None]
    for i in range(k):
        for j in range(k):
            acc += (
                xp[:, :, i : i + s * oh : s, j : j + s * ow : s]
                * w.astype(np.int64)[None, :, i, j, None, None]
            )
    y = np.rint(acc.astype(np.float32) * scale[:, None, None]) + attrs["zero_point"]
    want = np.clip(y, 2, 251).astype(np.uint8)
    assert np.array_equal(get_op("qdwconv").run_reference(ins, attrs)[0], want)


@pytest.mark.parametrize("target", ["host", "x86_64-v3"])
@pytest.mark.parametrize("case", DW_CASES)
def test_depthwise_kernel_is_bit_exact(target, case):
    ins, attrs = _dw_case(*case)
    want = get_op("qdwconv").run_reference(ins, attrs)[0]
    np.testing.assert_array_equal(run_op("qdwconv", ins, attrs, target=target)[0], want)


@pytest.mark.parametrize("target", ["host", "x86_64-v3"])
@pytest.mark.parametrize(
    ("shape", "vector"),
    [((1, 24, (8, 8), 40), "pixels"), ((2, 16, (7, 7), 24), "pixels"), ((1, 32, (7, 7), 48), "channels")],
)
def test_conv_kernel_is_bit_exact(target, shape, vector):
    ins, attrs = _conv_case(*shape, vector)
    want = get_op("qconv1x1").run_reference(ins, attrs)[0]
    np.testing.assert_array_equal(run_op("qconv1x1", ins, attrs, target=target)[0], want)


@pytest.mark.parametrize("op", ["qdense", "qconv1x1"])
def test_tuning_knobs_keep_the_kernel_exact(op):
    """The blocked-product knobs are the tuner's (no run-time weight packing: the weights are
    packed at compile time); a config off the defaults computes the same bits."""
    ins, attrs = _case(20, 32, 48) if op == "qdense" else _conv_case(1, 32, (7, 7), 48, "channels")
    space = kernel_space(op, [TensorType.of(a) for a in ins], attrs, "host")
    knobs = {k.name: k for k in space.knobs()}
    assert set(knobs) == {"gemm_rows", "gemm_col_vectors", "gemm_row_chunk_tiles"}
    config = {"gemm_rows": 3, "gemm_col_vectors": 1, "gemm_row_chunk_tiles": 2}
    assert config != {k.name: k.default for k in knobs.values()}
    got = run_op(op, ins, attrs, target="host", config=config)[0]
    np.testing.assert_array_equal(got, get_op(op).run_reference(ins, attrs)[0])


@pytest.mark.parametrize("op", ["qdense", "qconv1x1"])
def test_loop_interpreter_agrees(op):
    """The loop IR interpreter's dot4_u8s8 (both forms: four uint8 values, or one packed
    word) computes the same kernel as the reference."""
    ins, attrs = _case(3, 8, 16) if op == "qdense" else _conv_case(1, 8, (4, 4), 16, "pixels")
    func = op_kernel(op, [TensorType.of(a) for a in ins], attrs, "host")
    want = get_op(op).run_reference(ins, attrs)[0]
    args = [*ins, np.zeros_like(want), *scratch_arrays(func)]
    run(func, args)
    np.testing.assert_array_equal(args[len(ins)], want)


def _types(m: int, k: int, n: int) -> list[TensorType]:
    ins, _ = _case(m, k, n)
    return [TensorType.of(a) for a in ins]


@pytest.mark.parametrize("case", ["qdense", "qconv1x1 pixels", "qconv1x1 channels"])
def test_vpdpbusd_exactly_with_vnni(case):
    op, _, vector = case.partition(" ")
    if op == "qdense":
        types, attrs = _types(16, 64, 64), {"n": 64, "zero_point": 0, "lo": 0, "hi": 255}
    else:
        ins, attrs = _conv_case(1, 32, (8, 8) if vector == "pixels" else (7, 7), 64, vector)
        types = [TensorType.of(a) for a in ins]
    with_vnni = emit_assembly(op_kernel(op, types, attrs, VNNI), VNNI)
    without = emit_assembly(op_kernel(op, types, attrs, "x86_64-v4"), "x86_64-v4")
    assert re.search(r"vpdpbusd\s[^\n]*%zmm", with_vnni)
    assert "vpdpbusd" not in without and "vpmaddwd" in without  # the widening fallback


@pytest.mark.arm64
@pytest.mark.parametrize("op", ["qdense", "qconv1x1", "qdwconv"])
def test_arm64_fallback_under_qemu(op):
    cases = {
        "qdense": lambda: _case(6, 32, 24, lo=3),
        "qconv1x1": lambda: _conv_case(1, 16, (4, 4), 24, "pixels"),
        "qdwconv": lambda: _dw_case(1, 8, (9, 9), 3, 2, 1),
    }
    ins, attrs = cases[op]()
    func = op_kernel(op, [TensorType.of(a) for a in ins], attrs, "linux-arm64")
    want = get_op(op).run_reference(ins, attrs)[0]
    got = run_arm64(func, [*ins, np.empty_like(want), *scratch_arrays(func)])[len(ins)]
    np.testing.assert_array_equal(got, want)
