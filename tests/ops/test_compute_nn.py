"""Compiled NN ops (conv, conv_transpose, gemm, matmul, einsum, max/avg/global pools) against
their numpy references through `run_op`: the model zoo's layer shapes (ResNet-50,
MobileNetV2, BERT encoder) and seeded random legal attribute combinations; and the default
dense / conv2d kernels vectorized in the assembly (FMA on zmm / NEON 4s registers).

Tolerances: inputs are unit normal and weights scaled by 1/sqrt(fan-in), so float32 outputs
are O(1); they must match within rtol=1e-4, atol=1e-4 (a different float32 summation order
over K terms differs by ~1e-7 * sqrt(K)). float64 within rtol=1e-10; integer outputs
(uint8 max pool, max_pool indices) exactly.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

import numpy as np
import pytest

from tensorir.codegen import emit_assembly
from tensorir.graph.types import TensorType
from tensorir.ops.kernel import op_compute, op_kernel, run_op
from tensorir.ops.nn_compute import pick_block, pick_rows, pick_vector, register_tile
from tensorir.ops.registry import get_op
from tensorir.schedule import create_schedule, verify_trace_roundtrip
from tensorir.target import get_target

RTOL, ATOL = 1e-4, 1e-4


def _rand(
    rng: np.random.Generator, shape: tuple[int, ...], scale: float = 1.0, dtype=np.float32
) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(dtype)


def check(op: str, inputs: list[np.ndarray], attrs: dict[str, Any]) -> None:
    got = run_op(op, inputs, attrs)
    want = get_op(op).run_reference(inputs, attrs)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        if np.issubdtype(w.dtype, np.integer):
            np.testing.assert_array_equal(g, w)
        elif w.dtype == np.float64:
            np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
        else:
            np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)


def conv_inputs(rng, n, c, sp, m, k, group=1, bias=False, transpose=False) -> list[np.ndarray]:
    cg = c // group
    w_shape = (c, m // group, *k) if transpose else (m, cg, *k)
    xs = [_rand(rng, (n, c, *sp)), _rand(rng, w_shape, 1 / math.sqrt(cg * math.prod(k)))]
    return [*xs, _rand(rng, (m,))] if bias else xs


# ---- the zoo's layers ----------------------------------------------------------------------
# (name, in channels, size, out channels, kernel, stride, pad, group, bias)
ZOO_CONVS = [
    ("resnet50.conv1", 3, 224, 64, 7, 2, 3, 1, False),
    ("resnet50.3x3_64@56", 64, 56, 64, 3, 1, 1, 1, False),
    ("resnet50.3x3_128@28", 128, 28, 128, 3, 1, 1, 1, False),
    ("resnet50.3x3s2_128@56", 128, 56, 128, 3, 2, 1, 1, False),
    ("resnet50.3x3_256@14", 256, 14, 256, 3, 1, 1, 1, False),
    ("resnet50.3x3_512@7", 512, 7, 512, 3, 1, 1, 1, False),
    ("resnet50.1x1_64->256@56", 64, 56, 256, 1, 1, 0, 1, False),
    ("resnet50.1x1_256->64@56", 256, 56, 64, 1, 1, 0, 1, False),
    ("resnet50.1x1_1024->256@14", 1024, 14, 256, 1, 1, 0, 1, False),
    ("resnet50.1x1_2048->512@7", 2048, 7, 512, 1, 1, 0, 1, False),
    ("resnet50.downsample_256->512s2", 256, 56, 512, 1, 2, 0, 1, False),
    ("mobilenetv2.conv0", 3, 224, 32, 3, 2, 1, 1, True),
    ("mobilenetv2.dw_32@112", 32, 112, 32, 3, 1, 1, 32, True),
    ("mobilenetv2.dw_96@112s2", 96, 112, 96, 3, 2, 1, 96, True),
    ("mobilenetv2.dw_960@7", 960, 7, 960, 3, 1, 1, 960, True),
    ("mobilenetv2.pw_32->16@112", 32, 112, 16, 1, 1, 0, 1, True),
    ("mobilenetv2.pw_96->24@56", 96, 56, 24, 1, 1, 0, 1, True),
    ("mobilenetv2.pw_320->1280@7", 320, 7, 1280, 1, 1, 0, 1, True),
]


@pytest.mark.parametrize("case", ZOO_CONVS, ids=[c[0] for c in ZOO_CONVS])
def test_zoo_conv(case):
    _, c, hw, m, k, s, p, g, bias = case
    rng = np.random.default_rng(1)
    xs = conv_inputs(rng, 1, c, (hw, hw), m, (k, k), g, bias)
    check("conv", xs, {"strides": (s, s), "pads": (p,) * 4, "dilations": (1, 1), "group": g})


# (name, a shape, b shape): BERT encoder (hidden 256, 4 heads, seq 128, FFN 1024)
ZOO_MATMULS = [
    ("bert.qkv", (1, 128, 256), (256, 256)),
    ("bert.ffn_up", (1, 128, 256), (256, 1024)),
    ("bert.ffn_down", (1, 128, 1024), (1024, 256)),
    ("bert.scores", (1, 4, 128, 64), (1, 4, 64, 128)),
    ("bert.context", (1, 4, 128, 128), (1, 4, 128, 64)),
]


@pytest.mark.parametrize("case", ZOO_MATMULS, ids=[c[0] for c in ZOO_MATMULS])
def test_zoo_matmul(case):
    _, a, b = case
    rng = np.random.default_rng(2)
    check("matmul", [_rand(rng, a), _rand(rng, b, 1 / math.sqrt(b[-2]))], {})


def test_zoo_classifier_gemm():
    """torch's exported classifier: Gemm(x, W^T, b) with transB=1, 2048 -> 1000."""
    rng = np.random.default_rng(3)
    xs = [_rand(rng, (1, 2048)), _rand(rng, (1000, 2048), 1 / math.sqrt(2048)), _rand(rng, (1000,))]
    check("gemm", xs, {"alpha": 1.0, "beta": 1.0, "trans_a": 0, "trans_b": 1})


@pytest.mark.parametrize(
    ("name", "shape", "attrs"),
    [
        (
            "resnet50.maxpool",
            (1, 64, 112, 112),
            {"kernel_shape": (3, 3), "strides": (2, 2), "pads": (1,) * 4},
        ),
        ("resnet50.avgpool_as_window", (1, 2048, 7, 7), {"kernel_shape": (7, 7)}),
    ],
)
def test_zoo_pools(name, shape, attrs):
    rng = np.random.default_rng(4)
    x = _rand(rng, shape)
    check("max_pool" if "max" in name else "avg_pool", [x], attrs)


@pytest.mark.parametrize("op", ["global_avg_pool", "global_max_pool"])
@pytest.mark.parametrize(
    "shape", [(1, 2048, 7, 7), (2, 1280, 7, 7), (1, 3, 5, 5), (2, 5, 4, 3, 2), (1, 24, 4, 32), (2, 8, 3, 96)]
)
def test_global_pools(op, shape):
    """(The last two: rows of whole 16-pixel blocks, summed in 16 partial lanes per channel.)"""
    check(op, [_rand(np.random.default_rng(5), shape)], {})


# ---- random legal attribute combinations -------------------------------------------------
def _random_conv(rng: np.random.Generator, transpose: bool) -> tuple[list[np.ndarray], dict[str, Any]]:
    nsp = int(rng.choice([1, 2, 2, 3]))
    group = int(rng.choice([1, 1, 2, 4]))
    cg, mg = int(rng.integers(1, 5)), int(rng.choice([1, 3, 8, 16, 32]))
    k = tuple(int(rng.integers(1, 4)) for _ in range(nsp))
    s = tuple(int(rng.integers(1, 3)) for _ in range(nsp))
    d = tuple(int(rng.integers(1, 3)) for _ in range(nsp))
    sp = tuple(int(rng.integers(5, 12 if nsp < 3 else 7)) for _ in range(nsp))
    p = tuple(int(rng.integers(0, k[i % nsp] + (0 if transpose else 1))) for i in range(2 * nsp))
    n = int(rng.integers(1, 3))
    attrs: dict[str, Any] = {"strides": s, "pads": p, "dilations": d, "group": group}
    if transpose:
        attrs["output_padding"] = tuple(int(rng.integers(0, max(s[i], d[i]))) for i in range(nsp))
    bias = bool(rng.integers(0, 2))
    xs = conv_inputs(rng, n, cg * group, sp, mg * group, k, group, bias, transpose)
    return xs, attrs


@pytest.mark.parametrize("seed", range(14))
def test_random_conv(seed):
    check("conv", *_random_conv(np.random.default_rng(100 + seed), transpose=False))


@pytest.mark.parametrize("seed", range(6))
def test_random_conv_transpose(seed):
    check("conv_transpose", *_random_conv(np.random.default_rng(200 + seed), transpose=True))


@pytest.mark.parametrize("seed", range(8))
def test_random_gemm(seed):
    rng = np.random.default_rng(300 + seed)
    m, k, n = (int(rng.choice([1, 2, 5, 16, 37, 64])) for _ in range(3))
    ta, tb = int(rng.integers(0, 2)), int(rng.integers(0, 2))
    a = _rand(rng, (k, m) if ta else (m, k))
    b = _rand(rng, (n, k) if tb else (k, n), 1 / math.sqrt(k))
    bias_shape = [(), (1,), (n,), (1, n), (m, 1), (m, n), None][int(rng.integers(0, 7))]
    xs = [a, b] if bias_shape is None else [a, b, _rand(rng, bias_shape)]
    alpha, beta = float(rng.choice([1.0, 0.5, -2.0])), float(rng.choice([1.0, 0.0, 0.25]))
    check("gemm", xs, {"alpha": alpha, "beta": beta, "trans_a": ta, "trans_b": tb})


@pytest.mark.parametrize(
    ("a", "b"),
    [((3,), (3,)), ((4,), (2, 4, 33)), ((2, 3, 4, 17), (17,)), ((3, 1, 5, 8), (1, 2, 8, 40)),
     ((7, 96), (96, 48)), ((197, 33), (33, 45)), ((2, 1, 64), (2, 64, 1000))],
)  # fmt: skip
def test_matmul_broadcast_and_vectors(a, b):
    rng = np.random.default_rng(6)
    check("matmul", [_rand(rng, a), _rand(rng, b, 1 / math.sqrt(b[-2] if len(b) > 1 else b[0]))], {})


@pytest.mark.parametrize(
    ("equation", "shapes", "dtype"),
    [
        ("bij,bjk->bik", [(5, 2, 3), (5, 3, 4)], np.float32),
        ("...ii->...i", [(3, 5, 5)], np.float64),
        ("i,i", [(5,), (5,)], np.float32),
        ("->", [()], np.float64),
        ("ij->ji", [(3, 4)], np.float32),
        ("bhqd,bhkd->bhqk", [(1, 4, 128, 64), (1, 4, 128, 64)], np.float32),
        ("ij,jk,kl->il", [(4, 5), (5, 6), (6, 32)], np.float32),
        ("...j,j->...", [(2, 3, 16), (16,)], np.float32),
        ("ab,ab->", [(7, 9), (7, 9)], np.float64),
    ],
)
def test_einsum(equation, shapes, dtype):
    rng = np.random.default_rng(7)
    check("einsum", [_rand(rng, s, dtype=dtype) for s in shapes], {"equation": equation})


def _random_pool(rng: np.random.Generator) -> tuple[np.ndarray, dict[str, Any]]:
    nsp = int(rng.choice([1, 2, 2, 3]))
    k = tuple(int(rng.integers(1, 4)) for _ in range(nsp))
    s = tuple(int(rng.integers(1, 4)) for _ in range(nsp))
    d = tuple(int(rng.integers(1, 3)) for _ in range(nsp))
    p = tuple(int(rng.integers(0, k[i % nsp])) for i in range(2 * nsp))  # pads < kernel
    sp = tuple(int(rng.integers(6, 20 if nsp < 3 else 9)) for _ in range(nsp))
    x = _rand(rng, (int(rng.integers(1, 3)), int(rng.integers(1, 5)), *sp))
    attrs = {"kernel_shape": k, "strides": s, "pads": p, "dilations": d, "ceil_mode": int(rng.integers(0, 2))}
    return x, attrs


@pytest.mark.parametrize("seed", range(8))
def test_random_max_pool(seed):
    x, attrs = _random_pool(np.random.default_rng(400 + seed))
    check("max_pool", [x], {**attrs, "storage_order": seed % 2 if x.ndim == 4 else 0})


@pytest.mark.parametrize("seed", range(8))
def test_random_avg_pool(seed):
    x, attrs = _random_pool(np.random.default_rng(500 + seed))
    check("avg_pool", [x], {**attrs, "count_include_pad": seed % 2})


def test_max_pool_uint8_and_ties():
    rng = np.random.default_rng(8)
    x = rng.integers(0, 4, (1, 2, 9, 9)).astype(np.uint8)  # many equal maxima: first one wins
    check("max_pool", [x], {"kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1)})


# ---- vectorized code -----------------------------------------------------------------------
def _kernels(target: str) -> dict[str, str]:
    dense = op_kernel("gemm", [TensorType((64, 256)), TensorType((256, 128))], {}, target)
    conv_attrs = {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": 1}
    conv = op_kernel("conv", [TensorType((1, 64, 14, 14)), TensorType((64, 64, 3, 3))], conv_attrs, target)
    return {"dense": emit_assembly(dense, target), "conv2d": emit_assembly(conv, target)}


def test_host_kernels_use_zmm_fma():
    host = get_target("host")
    if not host.has_feature("avx512f"):
        pytest.skip(f"host {host.cpu} has no AVX-512")
    for name, asm in _kernels("host").items():
        fma = re.findall(r"\bvfmadd\w*ps\s+.*%zmm\d+\s*$", asm, re.M)
        assert len(fma) >= 8, f"{name}: {len(fma)} zmm FMAs"


def test_arm64_kernels_use_neon_fmla():
    for name, asm in _kernels("linux-arm64").items():
        fma = re.findall(r"\bfmla\s+v\d+\.4s", asm)
        assert len(fma) >= 8, f"{name}: {len(fma)} fmla .4s"


def test_avx2_host_variant_uses_ymm_fma():
    host = get_target("host")
    if not host.has_feature("avx2"):
        pytest.skip("host without AVX2")
    feats = ",".join(f for f in host.features.split(",") if not f.startswith("+avx512"))
    avx2 = dataclasses.replace(
        host, name="host-avx2", features=feats, vector_bits=256, num_vector_registers=16
    )
    dense = op_kernel("matmul", [TensorType((64, 256)), TensorType((256, 128))], {}, avx2)
    assert re.findall(r"\bvfmadd\w*ps\s+.*%ymm\d+\s*$", emit_assembly(dense, avx2), re.M)


@pytest.mark.parametrize(
    ("op", "types", "attrs"),
    [
        ("conv", [(1, 64, 14, 14), (64, 64, 3, 3)], {"pads": (1, 1, 1, 1)}),
        ("conv", [(1, 32, 16, 16), (64, 32, 1, 1), (64,)], {}),
        ("conv", [(1, 32, 16, 16), (32, 1, 3, 3)], {"pads": (1, 1, 1, 1), "group": 32}),
        ("conv_transpose", [(1, 16, 5, 5), (16, 16, 3, 3)], {"strides": (2, 2)}),
        ("gemm", [(64, 128), (96, 128), (96,)], {"trans_b": 1}),
        ("einsum", [(4, 5, 6), (4, 6, 7)], {"equation": "bij,bjk->bik"}),
        ("max_pool", [(1, 8, 16, 16)], {"kernel_shape": (3, 3), "strides": (2, 2)}),
        ("global_avg_pool", [(1, 64, 7, 7)], {}),
    ],
)
def test_default_schedules_replay_from_trace(op, types, attrs):
    """Tuning records store traces: each default schedule must replay to the same IR."""
    ins, outs = op_compute(op, [TensorType(t) for t in types], attrs)
    s = create_schedule(outs)
    get_op(op).extra["schedule"](s, outs, get_target("host"))
    verify_trace_roundtrip(s, [*ins, *outs], op)


@pytest.mark.parametrize("dtype", [np.float16, np.float64, np.int32])
def test_other_dtypes(dtype):
    """float16 accumulates in float32 and rounds once (as the references); integers exactly."""
    rng = np.random.default_rng(9)

    def r(*shape):
        if dtype == np.int32:
            return rng.integers(-4, 5, shape).astype(dtype)
        return (rng.standard_normal(shape) * 0.3).astype(dtype)

    tol = {"rtol": 2e-3, "atol": 2e-3} if dtype == np.float16 else {"rtol": 1e-10, "atol": 1e-10}
    cases = [("matmul", [r(2, 16, 8), r(8, 40)], {}), ("gemm", [r(16, 8), r(40, 8), r(40)], {"trans_b": 1})]
    if dtype != np.int32:
        conv = {"pads": (1, 1, 1, 1)}
        cases += [
            ("conv", [r(1, 16, 6, 6), r(32, 16, 3, 3), r(32)], conv),
            ("conv", [r(1, 8, 8, 8), r(8, 1, 3, 3)], {**conv, "group": 8}),
            ("avg_pool", [r(1, 3, 8, 8)], {"kernel_shape": (3, 3), **conv}),
            ("max_pool", [r(1, 3, 8, 8)], {"kernel_shape": (3, 3), **conv}),
            ("global_avg_pool", [r(1, 3, 8, 8)], {}),
        ]
    for op, xs, attrs in cases:
        got = run_op(op, xs, attrs)
        for g, w in zip(got, get_op(op).run_reference(xs, attrs), strict=True):
            assert g.dtype == w.dtype, op
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), **tol, err_msg=op)


def test_block_choices():
    """Vector blocks divide the axis in power-of-two widths; register tiles fit the file."""
    assert pick_vector(56, 16) == 8 and pick_vector(1000, 16) == 8 and pick_vector(49, 16) == 1
    assert pick_block(1000, 16, 30) == (8, 25) and pick_block(64, 16, 2) == (16, 2)
    assert pick_rows(56, 8) == 8 and pick_rows(7, 8) == 7 and pick_rows(197, 8) == 8
    host, arm = get_target("host"), get_target("linux-arm64")
    assert register_tile(arm, "float32", 512, 512) == (4, 4, 4)  # 4 x 16 on NEON (MR <= 6 dividing 512)
    if host.has_feature("avx512f"):
        assert register_tile(host, "float32", 512, 512) == (8, 16, 2)  # 8 x 32 on AVX-512


def test_max_pool_without_indices_is_one_output_and_pads_per_chunk():
    """`indices=0` (an ONNX MaxPool with one output): one output, the values, and no index
    stage, so the padded rows are computed per row chunk (pad_at) instead of at root."""
    from tensorir.ops.kernel import kernel_space
    from tensorir.target import get_target

    x = np.random.default_rng(0).standard_normal((1, 8, 17, 17)).astype(np.float32)
    attrs = {"kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1), "indices": 0}
    (want,) = get_op("max_pool").run_reference([x], attrs)
    assert want.shape == (1, 8, 9, 9)
    check("max_pool", [x], attrs)
    space = kernel_space("max_pool", [TensorType.of(x)], attrs, get_target("host"))
    assert "pad_at" in {k.name for k in space.knobs()}
    with_idx = kernel_space("max_pool", [TensorType.of(x)], {**attrs, "indices": 1}, get_target("host"))
    assert "pad_at" not in {k.name for k in with_idx.knobs()}


@pytest.mark.parametrize(
    "shape, dtype, attrs",
    [
        ((1, 3, 9, 11), "uint8", {"kernel": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1), "channels": 4}),
        ((2, 8, 6, 7), "uint8", {"kernel": (3, 2), "strides": (1, 1), "pads": (1, 0, 2, 1), "channels": 8}),
        ((1, 22, 5, 5), "uint8", {"kernel": (1, 1), "strides": (1, 1), "pads": (0, 0, 0, 0), "channels": 24}),
        ((1, 4, 8, 8), "float32", {"kernel": (1, 1), "strides": (2, 2), "pads": (0, 0, 0, 0), "channels": 4}),
    ],
)
def test_im2col(shape, dtype, attrs):
    """Windows as channels (kh, kw, c), the fill (a zero point) outside the map and in the
    pad channels: a 3x3 stride-2 RGB stem, an odd kernel with uneven pads, channel padding
    only (22 -> 24), a strided 1x1."""
    x = np.random.default_rng(6).integers(0, 255, shape).astype(dtype)
    check("im2col", [x], {**attrs, "fill": 17})
