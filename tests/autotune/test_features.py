"""Kernel features: fixed length, finite, sensitive to schedules, parallelism and shapes."""

from __future__ import annotations

import random
import time

import numpy as np
import pytest

import autotune.features as features_mod
from autotune.features import FEATURE_NAMES, extract_batch, extract_features
from tensorir.errors import TirError
from tensorir.graph.types import TensorType
from tensorir.loop.ir import (
    Allocate,
    BinOp,
    Buffer,
    Call,
    Const,
    For,
    ForKind,
    If,
    LetStmt,
    Load,
    LoopFunc,
    Seq,
    Store,
    Var,
)
from tensorir.ops.kernel import kernel_space, op_kernel

N = len(FEATURE_NAMES)


def feat(x: np.ndarray, name: str) -> float:
    return float(x[FEATURE_NAMES.index(name)])


def f32(*shape: int) -> TensorType:
    return TensorType(shape, "float32")


def matmul(m: int, k: int, n: int, cfg=None):
    return op_kernel("matmul", [f32(m, k), f32(k, n)], {}, config=cfg)


def serial(s, outs, target) -> None:  # no schedule: plain serial loops
    return None


def test_names_unique_and_documented():
    assert len(set(FEATURE_NAMES)) == N == features_mod.NUM_FEATURES
    doc = features_mod.__doc__
    for name in FEATURE_NAMES:
        assert name in doc, name


@pytest.mark.parametrize(
    "op,types,attrs",
    [
        ("matmul", [f32(64, 96), f32(96, 48)], {}),
        ("conv", [f32(1, 8, 10, 10), f32(8, 8, 3, 3)], {"pads": (1, 1, 1, 1)}),
        ("relu", [f32(4, 16)], {}),
        ("softmax", [f32(8, 100)], {}),
    ],
)
def test_fixed_length_and_finite(op, types, attrs):
    x = extract_features(op_kernel(op, types, attrs))
    assert x.shape == (N,) and x.dtype == np.float32
    assert np.all(np.isfinite(x)) and np.all(x >= 0)
    assert feat(x, "flops") > 0 and feat(x, "touched_bytes") > 0


def test_empty_kernel():
    x = extract_features(LoopFunc("nop", (Buffer("a", (4,)),), Seq(())))
    assert x.shape == (N,) and np.all(np.isfinite(x))


def test_vectorized_vs_serial_schedule():
    vec = extract_features(op_kernel("relu", [f32(64, 64)], {}))
    ser = extract_features(op_kernel("relu", [f32(64, 64)], {}, schedule=serial))
    assert not np.array_equal(vec, ser)
    assert feat(vec, "store_lanes_max") > feat(ser, "store_lanes_max") == 1.0  # log2(1 + 1)
    assert feat(vec, "vec_store_frac") == 1.0 and feat(ser, "vec_store_frac") == 0.0
    assert feat(vec, "vec_flop_frac") == 1.0 and feat(ser, "vec_flop_frac") == 0.0
    # same work, same footprint
    assert feat(vec, "flops") == feat(ser, "flops")
    assert feat(vec, "touched_bytes") == feat(ser, "touched_bytes")


def test_configs_of_one_op_differ():
    types = [f32(128, 128), f32(128, 128)]
    space = kernel_space("matmul", types, {})
    rng = random.Random(0)
    rows = []
    while len(rows) < 4:
        try:
            rows.append(extract_features(op_kernel("matmul", types, {}, config=space.sample(rng))))
        except TirError:  # knobs whose choices depend on other knobs
            continue
    assert len({r.tobytes() for r in rows}) > 1
    for r in rows:  # the work is the schedule-independent part, up to guarded tail blocks
        # (a row chunk not dividing 128 counts its guarded iterations: < 2 % here, 0.03 in log2)
        assert feat(r, "flops") == pytest.approx(feat(rows[0], "flops"), abs=0.03)


def test_parallel_loop_shows_up():
    par = extract_features(matmul(128, 128, 128))
    assert feat(par, "n_parallel") > 0 and feat(par, "par_tasks_max") > 0
    assert feat(par, "par_work_frac") == pytest.approx(1.0)
    assert 0 < feat(par, "par_balance") <= 1
    ser = extract_features(
        matmul(128, 128, 128) if False else op_kernel("relu", [f32(8, 8)], {}, schedule=serial)
    )
    assert (
        feat(ser, "n_parallel") == 0 and feat(ser, "par_tasks_max") == 0 and feat(ser, "par_work_frac") == 0
    )


def test_touched_bytes_scale_with_shape():
    small = extract_features(op_kernel("relu", [f32(64, 64)], {}, schedule=serial))
    big = extract_features(op_kernel("relu", [f32(128, 128)], {}, schedule=serial))
    # 2 buffers of 4*64*64 bytes -> 4x as many: log2 grows by ~2
    assert feat(small, "touched_bytes") == pytest.approx(np.log2(1 + 2 * 4 * 64 * 64), rel=1e-6)
    assert feat(big, "touched_bytes") - feat(small, "touched_bytes") == pytest.approx(2.0, abs=1e-3)
    m1, m2 = extract_features(matmul(64, 64, 64)), extract_features(matmul(128, 128, 128))
    assert feat(m2, "touched_bytes") > feat(m1, "touched_bytes")
    assert feat(m2, "flops") - feat(m1, "flops") == pytest.approx(3.0, abs=1e-3)


def hand_kernel(unroll_kind: ForKind = ForKind.SERIAL) -> LoopFunc:
    """C[i, j] += A[i, k] * B[k, j] over 32 x 16 x 8, plus a scratch, a let, an if, a call."""
    a, b, c = Buffer("A", (32, 8)), Buffer("B", (8, 16)), Buffer("C", (32, 16))
    tmp = Buffer("T", (16,), scope="local")
    i, j, k, t = Var("i"), Var("j"), Var("k"), Var("t")
    upd = Store(c, i * 16 + j, Load(c, i * 16 + j) + Load(a, i * 8 + k) * Load(b, k * 16 + j))
    inner = For(j, Const(0), Const(16), unroll_kind, upd)
    body = For(k, Const(0), Const(8), ForKind.SERIAL, inner)
    ex = Store(tmp, t, Call("exp", (Load(c, i * 16 + t),)))
    guarded = If(BinOp("%", i, Const(2)).eq(0), For(t, Const(0), Const(16), ForKind.SERIAL, ex))
    nest = For(i, Const(0), Const(32), ForKind.PARALLEL, Seq((body, LetStmt(Var("z"), i * 2, guarded))))
    return LoopFunc("hand", (a, b, c), Allocate(tmp, nest))


def test_hand_kernel_values():
    x = extract_features(hand_kernel())
    lg = lambda v: np.log2(1 + v)  # noqa: E731
    macs = 32 * 8 * 16
    assert feat(x, "fma") == pytest.approx(lg(macs))
    assert feat(x, "float_mul") == pytest.approx(lg(macs))
    assert feat(x, "float_addsub") == pytest.approx(lg(macs))
    assert feat(x, "math_calls") == pytest.approx(lg(32 * 16))
    assert feat(x, "flops") == pytest.approx(lg(2 * macs + 32 * 16))
    assert feat(x, "n_parallel") == pytest.approx(1.0) and feat(x, "par_tasks_max") == pytest.approx(lg(32))
    assert feat(x, "max_depth") == 3
    assert feat(x, "n_if") == pytest.approx(lg(32))
    assert feat(x, "n_allocate") == 1 and feat(x, "alloc_bytes_max") == pytest.approx(lg(64))
    # every buffer is touched whole: A 1 KiB, B 512 B, C 2 KiB, T 64 B
    assert feat(x, "touched_bytes") == pytest.approx(lg(1024 + 512 + 2048 + 64))
    assert feat(x, "touched_top1") == pytest.approx(lg(2048))
    assert feat(x, "touched_top3") == pytest.approx(lg(512))
    # B is read 32 times over, A (invariant in j) 16 times per element
    assert feat(x, "reuse_max") == pytest.approx(lg(32))
    assert feat(x, "stride0_frac") > 0 and feat(x, "stride1_frac") > 0
    assert feat(x, "inner_extent_max") == pytest.approx(lg(16))
    # a j loop of 16: footprint of C row 64 B + A 4 B + B row 64 B
    assert feat(x, "fp_inner1") == pytest.approx(lg(64 + 4 + 64))
    un = extract_features(hand_kernel(ForKind.UNROLLED))
    assert feat(un, "n_unrolled") == 1.0 and feat(un, "unrolled_extent_max") == pytest.approx(lg(16))
    assert feat(x, "n_unrolled") == 0.0


def test_extract_batch():
    funcs = [op_kernel("relu", [f32(4, 16)], {}), hand_kernel()]
    xb = extract_batch(funcs)
    assert xb.shape == (2, N) and xb.dtype == np.float32
    assert np.array_equal(xb[1], extract_features(funcs[1]))
    assert extract_batch([]).shape == (0, N)


def test_fast_on_conv():
    func = op_kernel("conv", [f32(1, 64, 56, 56), f32(64, 64, 3, 3)], {"pads": (1, 1, 1, 1)})
    extract_features(func)
    t0 = time.perf_counter()
    for _ in range(5):
        extract_features(func)
    per_call = (time.perf_counter() - t0) / 5
    assert per_call < 0.1, per_call  # a few ms normally; generous for a loaded machine
