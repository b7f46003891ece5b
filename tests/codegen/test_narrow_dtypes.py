"""Narrow dtypes compiled for the host: every bit pattern of each format converted to float32
and back, both ONNX saturate modes, e8m0's rounding modes, against ml_dtypes and the cast
op's numpy reference (tensorir/ops/elementwise.py, which the ONNX node tests check).

Values are compared bit for bit; NaNs only as NaN (ml_dtypes canonicalizes payloads)."""

from __future__ import annotations

import dataclasses
import re

import ml_dtypes
import numpy as np
import pytest

from tensorir.codegen import emit_assembly
from tensorir.graph.types import TensorType
from tensorir.ops import elementwise as ref_ops
from tensorir.ops.kernel import op_kernel, run_op
from tensorir.ops.registry import get_op
from tensorir.target import Target, get_target

FLOAT8 = ["float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"]
SMALL = ["float4_e2m1fn", "int4", "uint4", "int2", "uint2"]  # codes in the low bits of a byte


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.dtype(f"uint{8 * a.dtype.itemsize}"))


def assert_same(out: np.ndarray, ref: np.ndarray, inputs: np.ndarray) -> None:
    """Bitwise equal, except that any NaN matches any NaN."""
    assert out.dtype == ref.dtype
    nan = np.isnan(out.astype(np.float32)) & np.isnan(ref.astype(np.float32))
    bad = (_bits(out) != _bits(ref)) & ~nan
    assert not bad.any(), (
        f"{bad.sum()} differ, e.g. input bits {_bits(inputs[bad])[:6]}: {out[bad][:6]} vs {ref[bad][:6]}"
    )


def f32_patterns() -> np.ndarray:
    """Every bfloat16 value widened, each with low halves at and around the rounding ties
    of every narrow format (ties at bit 15 for bf16, 19-21 for float8, 22 for float4 and
    e8m0), float32 denormals, and random bits."""
    high = np.arange(1 << 16, dtype=np.uint32) << 16
    lows = [0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x80000 - 1, 0x80000, 0x100000, 0x200000, 0x3FFFFF]
    lows += [0x400000 + d for d in (-1, 0, 1)] + [0x600000]
    pats = [high | low for low in lows]
    rng = np.random.default_rng(7)
    pats.append(rng.integers(0, 1 << 32, 1 << 16, dtype=np.uint64).astype(np.uint32))
    return np.concatenate(pats).view(np.float32)


def no_bf16(host: Target) -> Target:
    feats = ",".join(f for f in host.features.split(",") if f != "+avx512bf16")
    return dataclasses.replace(host, name="host-nobf16", features=feats)


HOST = get_target("host")
BF16_TARGETS = [HOST, no_bf16(HOST)] if HOST.has_feature("avx512bf16") else [HOST]


@pytest.mark.parametrize("target", BF16_TARGETS, ids=lambda t: t.name)
def test_bfloat16_every_value_and_rounding(target):
    every = np.arange(1 << 16, dtype=np.uint16).view(ml_dtypes.bfloat16)
    (wide,) = run_op("cast", [every], {"to": "float32"}, target)
    assert_same(wide, every.astype(np.float32), every)
    x = f32_patterns()
    (out,) = run_op("cast", [x], {"to": "bfloat16"}, target)
    assert_same(out, x.astype(ml_dtypes.bfloat16), x)
    (arith,) = run_op("add", [every, every[::-1].copy()], {}, target)  # in float32, rounded once
    assert_same(arith, (every.astype(np.float32) + every[::-1].astype(np.float32)).astype(every.dtype), every)


def test_bfloat16_uses_avx512bf16_where_the_cpu_has_it():
    if not HOST.has_feature("avx512bf16"):
        pytest.skip(f"this host ({HOST.cpu}) has no avx512bf16")
    func = op_kernel("cast", [TensorType((4096,), "float32")], {"to": "bfloat16"}, HOST)
    assert re.search(r"\bvcvtneps2bf16\b", emit_assembly(func, HOST))
    assert not re.search(r"\bvcvtneps2bf16\b", emit_assembly(func, no_bf16(HOST)))


@pytest.mark.parametrize("dtype", [*FLOAT8, "float8_e8m0fnu", *SMALL])
def test_every_code_to_float32(dtype):
    codes = np.arange(16 if dtype.endswith("4_e2m1fn") or dtype.endswith("int4") else 256, dtype=np.uint8)
    if dtype.endswith("int2"):
        codes = codes[:4]
    x = codes.view(ml_dtypes.finfo(dtype).dtype if "float" in dtype else np.dtype(dtype))
    (out,) = run_op("cast", [x], {"to": "float32"})
    assert_same(out, x.astype(np.float32), x)


@pytest.mark.parametrize("saturate", [0, 1])
@pytest.mark.parametrize("dtype", FLOAT8)
def test_float8_from_float32_and_float16(dtype, saturate):
    for x in (f32_patterns(), np.arange(1 << 16, dtype=np.uint16).view(np.float16)):
        (out,) = run_op("cast", [x], {"to": dtype, "saturate": saturate})
        with np.errstate(all="ignore"):
            assert_same(out, ref_ops.cast(x, dtype, saturate), x)
            if not saturate:
                assert_same(out, x.astype(out.dtype), x)


EDGES = [np.inf, -np.inf, np.nan, 1e6, -1e6, 448, 464, 465, 57344, 61440, -0.0]
EDGE_CODES = {  # (dtype, saturate): the ONNX spec's codes for EDGES
    ("float8_e4m3fn", 1): [0x7E, 0xFE, 0x7F, 0x7E, 0xFE, 0x7E, 0x7E, 0x7E, 0x7E, 0x7E, 0x80],
    ("float8_e4m3fn", 0): [0x7F, 0xFF, 0x7F, 0x7F, 0xFF, 0x7E, 0x7E, 0x7F, 0x7F, 0x7F, 0x80],
    ("float8_e5m2", 1): [0x7B, 0xFB, 0x7E, 0x7B, 0xFB, 0x5F, 0x5F, 0x5F, 0x7B, 0x7B, 0x80],
    ("float8_e5m2", 0): [0x7C, 0xFC, 0x7E, 0x7C, 0xFC, 0x5F, 0x5F, 0x5F, 0x7B, 0x7C, 0x80],
    ("float8_e4m3fnuz", 1): [0x7F, 0xFF, 0x80, 0x7F, 0xFF, 0x7F, 0x7F, 0x7F, 0x7F, 0x7F, 0x00],
    ("float8_e4m3fnuz", 0): [0x80] * 10 + [0x00],  # NaN is 0x80, there is no -0
}


@pytest.mark.parametrize(("dtype", "saturate"), list(EDGE_CODES))
def test_float8_infinity_overflow_nan_edges(dtype, saturate):
    x = np.array(EDGES, np.float32)
    (out,) = run_op("cast", [x], {"to": dtype, "saturate": saturate})
    assert _bits(out).tolist() == EDGE_CODES[dtype, saturate]


@pytest.mark.parametrize("saturate", [0, 1])
@pytest.mark.parametrize("mode", ["up", "down", "nearest"])
def test_float8_e8m0_round_modes(mode, saturate):
    x = f32_patterns()
    (out,) = run_op("cast", [x], {"to": "float8_e8m0fnu", "saturate": saturate, "round_mode": mode})
    with np.errstate(all="ignore"):
        assert_same(out, ref_ops.cast(x, "float8_e8m0fnu", saturate, mode), x)


@pytest.mark.parametrize("dtype", SMALL)
def test_small_types_from_float32_and_int32(dtype):
    x = f32_patterns()
    if "int" in dtype:  # float -> int is undefined outside the int32 range (and for NaN)
        x = x[np.abs(x) < 2.0**31]
    (out,) = run_op("cast", [x], {"to": dtype})
    with np.errstate(all="ignore"):  # ONNX: to an integer, truncate then keep the low bits
        ref = x.astype(np.int64).astype(out.dtype) if "int" in dtype else x.astype(out.dtype)
        assert_same(out, ref, x)
    if "int" in dtype:
        i = np.arange(-300, 300, dtype=np.int32)
        (wrapped,) = run_op("cast", [i], {"to": dtype})
        assert_same(wrapped, i.astype(wrapped.dtype), i)
        assert (_bits(wrapped) < (16 if dtype.endswith("4") else 4)).all()  # the low bits only


def test_float64_float16_round_once():
    h = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    wide = h.astype(np.float64)
    near = [wide * (1 + 2.0**-12), wide * (1 - 2.0**-30), wide * (1 + 2.0**-30)]  # ties, both sides
    x = np.concatenate([*near, [65519.99, 2.0**-25]])
    with np.errstate(all="ignore"):
        (out,) = run_op("cast", [x], {"to": "float16"})
        assert_same(out, x.astype(np.float16), x)
    (back,) = run_op("cast", [h], {"to": "float64"})
    assert_same(back, wide, h)


def _ops_cases() -> list[tuple[str, list[np.ndarray], dict]]:
    rng = np.random.default_rng(5)
    a = rng.standard_normal((8, 64)).astype(ml_dtypes.bfloat16)
    b, r = rng.standard_normal((64, 16)).astype(a.dtype), a[::-1].copy()
    i4 = rng.integers(-8, 8, (8, 64)).astype(ml_dtypes.int4)
    f8 = rng.standard_normal((8, 64)).astype(ml_dtypes.float8_e4m3fn)
    return [
        ("add", [a, r], {}),
        ("mul", [a, a[:1]], {}),
        ("maximum", [a, r], {}),
        ("where", [a.astype(np.float32) > 0, a, r], {}),
        ("tanh", [a], {}),
        ("matmul", [a, b], {}),
        ("less", [f8, f8[::-1].copy()], {}),
        ("concat", [f8, f8], {"axis": 0}),
        ("transpose", [i4], {"perm": (1, 0)}),
        ("abs", [i4], {}),  # abs(-8) wraps to -8, as in numpy
        ("neg", [i4], {}),
    ]


@pytest.mark.parametrize(("op", "ins", "attrs"), _ops_cases(), ids=lambda c: c if isinstance(c, str) else "")
def test_ops_on_narrow_tensors_compute_in_float32_and_round_once(op, ins, attrs):
    """Elementwise math, comparisons, a matmul (float32 accumulation) and data movement on
    narrow tensors: the compiled kernel equals the reference (which computes in float32 and
    rounds once too) bit for bit."""
    (out,) = run_op(op, ins, attrs)
    (ref,) = get_op(op).run_reference(list(ins), attrs)
    assert_same(out, np.asarray(ref), ins[0])
