"""OpenCL C rendering of loop IR: exact text for small kernels, and numeric checks on PoCL.

Every numeric test runs the kernel through `run_gpu_kernel` on the OpenCL device present (PoCL
here) with the output buffers pre-filled with NaN, so a kernel that did not run fails; a
missing OpenCL driver fails too (no skips). Tolerances: exact for integer, select, cast and
data-movement kernels; float32 arithmetic rtol/atol 1e-5 against numpy; transcendental
intrinsics rtol 2e-6 / atol 1e-6 against numpy in float64 (the OpenCL spec allows up to 4 ulp
for exp/log, 16 for erf/pow; PoCL's SLEEF stays near 1-2 ulp).
"""

from __future__ import annotations

import numpy as np
import pytest

from tensorir.codegen.opencl import render_opencl
from tensorir.devices import get_profile
from tensorir.errors import TirError
from tensorir.graph.types import TensorType
from tensorir.loop.ir import (
    Allocate,
    Barrier,
    BinOp,
    Broadcast,
    Buffer,
    Call,
    Cast,
    Const,
    For,
    ForKind,
    Load,
    LoopFunc,
    Ramp,
    Select,
    Seq,
    Store,
    Var,
)
from tensorir.ops.kernel import op_kernel, scratch_arrays
from tensorir.ops.registry import get_op
from tensorir.runtime.opencl_device import run_gpu_kernel

GB, LT = ForKind.GPU_BLOCK, ForKind.GPU_THREAD


def run(func: LoopFunc, ins: list[np.ndarray], outs: list[tuple[tuple[int, ...], str]]) -> list[np.ndarray]:
    """Render and run `func` on PoCL; outputs start as NaN (or -1 for ints) so unwritten shows."""
    kernel = render_opencl(func)
    fill = [np.full(s, np.nan if dt.startswith("float") else -1).astype(dt) for s, dt in outs]
    got, info = run_gpu_kernel(kernel, [*ins, *fill])
    assert info["device"] and info["platform"]
    return got[len(ins) :]


def grid(n: int, block: int, body) -> For:
    """for b in group.x(0, n/block): for t in local.x(0, block): body(b*block + t)."""
    b, t = Var("b"), Var("t")
    inner = For(t, Const(0), Const(block), LT, body(b * block + t), "local.x")
    return For(b, Const(0), Const(n // block), GB, inner, "group.x")


# ---- exact text ------------------------------------------------------------------------
def _tile_reverse() -> LoopFunc:
    """Each work-group stages 64 floats in local memory (float4 per work-item), waits, and
    writes them back in reversed float4 order, doubled."""
    A, B = Buffer("A", (256,)), Buffer("B", (256,))
    S = Buffer("S", (64,), scope="shared")
    g, t = Var("g"), Var("t")
    body = Seq(
        (
            Store(S, Ramp(t * 4, Const(1), 4), Load(A, Ramp(g * 64 + t * 4, Const(1), 4))),
            Barrier(),
            Store(
                B,
                Ramp(g * 64 + t * 4, Const(1), 4),
                Load(S, Ramp(60 - t * 4, Const(1), 4)) * Broadcast(Const(2.0, "float32"), 4),
            ),
        )
    )
    nest = For(g, Const(0), Const(4), GB, For(t, Const(0), Const(16), LT, body, "local.x"), "group.x")
    return LoopFunc("tile.reverse", (A, B), Allocate(S, nest))


TILE_REVERSE = """\
// OpenCL C for loop function 'tile.reverse' (tensorir)

__kernel __attribute__((reqd_work_group_size(16, 1, 1))) void tile_reverse(
    __global float *A_base, const ulong A_off,
    __global float *B_base, const ulong B_off) {
  __global float *restrict A = (__global float *)((__global char *)A_base + A_off);
  __global float *restrict B = (__global float *)((__global char *)B_base + B_off);
  __local float S[64];
  const int g = (int)get_group_id(0);
  const int t = (int)get_local_id(0);
  vstore4(vload4(0, A + ((g * 64) + (t * 4))), 0, S + (t * 4));
  barrier(CLK_LOCAL_MEM_FENCE);
  vstore4(vload4(0, S + (60 - (t * 4))) * ((float4)2.0f), 0, B + ((g * 64) + (t * 4)));
}
"""


def test_text_of_a_shared_memory_kernel():
    k = render_opencl(_tile_reverse())
    assert k.source == TILE_REVERSE
    assert (k.name, k.global_size, k.local_size) == ("tile_reverse", (64,), (16,))
    assert k.params == (("A", "float32"), ("B", "float32"))


def test_index_math_is_32_bit_and_floor_division_of_indices_is_plain():
    """Buffers under 2**31 elements: int64 index math renders as int (GPUs emulate 64-bit
    multiply and divide); // and % of a provably non-negative index by a positive constant
    are C's / and %; a negative dividend keeps the floor helper."""
    A = Buffer("A", (64,))
    i = Var("i")
    body = Store(A, i, Cast("float32", (i // 8) * 10 + (i % 8) + (i - 70) // 8))
    k = render_opencl(LoopFunc("idx", (A,), For(i, Const(0), Const(64), LT, body, "local.x")))
    assert "(i / 8)" in k.source and "(i % 8)" in k.source
    assert "tir_floordiv_int(i - 70, 8)" in k.source
    assert "long" not in k.source.replace("ulong", "")
    (out,), _ = run_gpu_kernel(k, [np.full(64, np.nan, np.float32)])
    want = [(j // 8) * 10 + j % 8 + (j - 70) // 8 for j in range(64)]
    np.testing.assert_array_equal(out, np.array(want, np.float32))


def test_64_bit_integer_buffers_keep_64_bit_index_math():
    A = Buffer("A", (8,), "int64")
    i = Var("i")
    k = render_opencl(LoopFunc("wide", (A,), For(i, Const(0), Const(8), LT, Store(A, i, i * 3), "local.x")))
    assert "const long i = (long)get_local_id(0);" in k.source
    (out,), _ = run_gpu_kernel(k, [np.zeros(8, np.int64)])
    np.testing.assert_array_equal(out, np.arange(8) * 3)


def test_shared_memory_kernel_runs():
    a = np.arange(256, dtype=np.float32)
    (b,) = run(_tile_reverse(), [a], [((256,), "float32")])
    want = (a.reshape(4, 16, 4)[:, ::-1, :] * 2).reshape(-1)
    np.testing.assert_array_equal(b, want)


def test_two_dimensional_launch_and_limits():
    A = Buffer("A", (8, 64))
    y, x, ty, tx = Var("y"), Var("x"), Var("ty"), Var("tx")
    st = Store(A, (y * 4 + ty) * 64 + x * 16 + tx, Cast("float32", ty * 100 + tx))
    nest = For(ty, Const(0), Const(4), LT, For(tx, Const(0), Const(16), LT, st, "local.x"), "local.y")
    nest = For(y, Const(0), Const(2), GB, For(x, Const(0), Const(4), GB, nest, "group.x"), "group.y")
    func = LoopFunc("two_d", (A,), nest)
    k = render_opencl(func)
    assert (k.global_size, k.local_size) == ((64, 8), (16, 4))
    (a,) = run(func, [], [((8, 64), "float32")])
    np.testing.assert_array_equal(a, np.fromfunction(lambda r, c: (r % 4) * 100 + c % 16, (8, 64)))
    big = LoopFunc(
        "big", (A,), For(tx, Const(0), Const(512), LT, Store(A, tx, Const(0.0, "float32")), "local.x")
    )
    with pytest.raises(TirError, match="exceeds mali-g76"):
        render_opencl(big, get_profile("mali-g76"))
    render_opencl(big, get_profile("adreno640"))


def test_nests_of_different_extents_share_the_launch_and_the_smaller_is_guarded():
    """A multi-output kernel (e.g. Split) has one nest per output: the launch is the
    largest, and work-items past a smaller nest's extent skip it."""
    A, B = Buffer("A", (64,)), Buffer("B", (16,))
    t = Var("t")
    a = For(t, Const(0), Const(64), LT, Store(A, t, Cast("float32", t)), "local.x")
    b = For(t, Const(0), Const(16), LT, Store(B, t, Cast("float32", t * 2)), "local.x")
    func = LoopFunc("two_nests", (A, B), Seq((a, b)))
    k = render_opencl(func)
    assert k.local_size == (64,) and "if (get_local_id(0) < 16) {" in k.source
    got_a, got_b = run(func, [], [((64,), "float32"), ((16,), "float32")])
    np.testing.assert_array_equal(got_a, np.arange(64))
    np.testing.assert_array_equal(got_b, np.arange(16) * 2)


def test_different_local_extents_around_a_barrier_are_an_error():
    A = Buffer("A", (64,))
    t = Var("t")
    a = For(t, Const(0), Const(16), LT, Store(A, t, Const(0.0, "float32")), "local.x")
    b = For(t, Const(0), Const(32), LT, Store(A, t, Const(1.0, "float32")), "local.x")
    with pytest.raises(
        TirError, match="kernel bad: local.x is bound with extents 32 and 16 around a barrier"
    ):
        render_opencl(LoopFunc("bad", (A,), Seq((a, Barrier(), b))))


# ---- numeric: expressions --------------------------------------------------------------
UNARY = {
    "exp": (np.exp, (-10, 10)),
    "log": (np.log, (1e-3, 100)),
    "sqrt": (np.sqrt, (0, 100)),
    "rsqrt": (lambda x: 1 / np.sqrt(x), (1e-2, 100)),
    "tanh": (np.tanh, (-6, 6)),
    "erf": (None, (-4, 4)),
    "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), (-20, 20)),
    "abs": (np.abs, (-5, 5)),
    "floor": (np.floor, (-5, 5)),
    "ceil": (np.ceil, (-5, 5)),
    "round": (np.round, (-5, 5)),
    "sin": (np.sin, (-10, 10)),
    "cos": (np.cos, (-10, 10)),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_intrinsics(name):
    import math

    fn, (lo, hi) = UNARY[name]
    fn = fn or np.vectorize(math.erf)
    x = np.random.default_rng(1).uniform(lo, hi, 256).astype(np.float32)
    if name == "round":
        x[:6] = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5]  # half to even, as numpy
    A, B = Buffer("A", (256,)), Buffer("B", (256,))
    func = LoopFunc(name, (A, B), grid(256, 32, lambda i: Store(B, i, Call(name, (Load(A, i),)))))
    (got,) = run(func, [x], [((256,), "float32")])
    np.testing.assert_allclose(got, fn(x.astype(np.float64)), rtol=2e-6, atol=1e-6)


def test_binary_intrinsics_and_min_max_nan():
    rng = np.random.default_rng(2)
    x, y, z = (rng.uniform(0.1, 3, 64).astype(np.float32) for _ in range(3))
    x[0], y[1] = np.nan, np.nan
    A, B, C = Buffer("A", (64,)), Buffer("B", (64,)), Buffer("C", (64,))
    outs = [Buffer(f"O{k}", (64,)) for k in range(4)]

    def body(i):
        a, b, c = Load(A, i), Load(B, i), Load(C, i)
        exprs = (Call("pow", (a, b)), Call("fma", (a, b, c)), BinOp("min", a, b), BinOp("max", a, b))
        return Seq(tuple(Store(o, i, e) for o, e in zip(outs, exprs, strict=True)))

    func = LoopFunc("binary", (A, B, C, *outs), grid(64, 16, body))
    p, f, mn, mx = run(func, [x, y, z], [((64,), "float32")] * 4)
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    np.testing.assert_allclose(p, x64**y64, rtol=2e-6)
    np.testing.assert_allclose(f, x64 * y64 + z, rtol=1e-6)
    # the LLVM backend's a < b ? a : b: a NaN in the second operand wins, in the first it loses
    np.testing.assert_array_equal(mn, np.where(x < y, x, y))
    np.testing.assert_array_equal(mx, np.where(x > y, x, y))


@pytest.mark.parametrize("lanes", [1, 4])
@pytest.mark.parametrize("dtype", ["int64", "int32", "int8"])
def test_floor_division_and_modulo_of_negative_ints(dtype, lanes):
    """`//` and `%` are floor division / modulo (Python semantics), `/` truncates."""
    x = np.array([-7, 7, -7, 7, -6, 6, 0, -1, 5, -5, 9, -9, 3, -3, 1, 2], dtype)
    y = np.array([2, -2, -2, 2, 3, -3, 5, 4, -3, -3, 4, 4, 3, 3, -1, 7], dtype)
    n = len(x)
    A, B = Buffer("A", (n,), dtype), Buffer("B", (n,), dtype)
    outs = [Buffer(f"O{k}", (n,), dtype) for k in range(3)]
    i = Var("i")
    idx = i if lanes == 1 else Ramp(i * lanes, Const(1), lanes)
    a, b = Load(A, idx), Load(B, idx)
    body = Seq(tuple(Store(o, idx, BinOp(op, a, b)) for o, op in zip(outs, ("//", "%", "/"), strict=True)))
    func = LoopFunc("divmod", (A, B, *outs), For(i, Const(0), Const(n // lanes), LT, body, "local.x"))
    fd, fm, td = run(func, [x, y], [((n,), dtype)] * 3)
    np.testing.assert_array_equal(fd, x // y)
    np.testing.assert_array_equal(fm, x % y)
    np.testing.assert_array_equal(td, np.trunc(x / y).astype(dtype))


def test_select_casts_and_bool_buffers():
    x = np.array([-2.5, -0.5, 0.0, 0.4, 1.5, np.nan, 3.7, -3.7], np.float32)
    n = len(x)
    A = Buffer("A", (n,))
    I, F, M, S = Buffer("I", (n,), "int32"), Buffer("F", (n,)), Buffer("M", (n,), "bool"), Buffer("S", (n,))
    i = Var("i")
    a = Load(A, i)
    body = Seq(
        (
            Store(I, i, Cast("int32", Select(a.eq(a), a, Const(0.0, "float32")))),  # NaN -> 0, truncate
            Store(F, i, Cast("float32", Cast("int64", Select(a.eq(a), a, Const(0.0, "float32"))) * 3)),
            Store(M, i, a > 0.0),
            Store(S, i, Select(Load(M, i), a, -a)),
        )
    )
    func = LoopFunc("casts", (A, I, F, M, S), For(i, Const(0), Const(n), LT, body, "local.x"))
    ints, floats, mask, sel = run(
        func, [x], [((n,), "int32"), ((n,), "float32"), ((n,), "bool"), ((n,), "float32")]
    )
    clean = np.where(np.isnan(x), 0, x)
    np.testing.assert_array_equal(ints, clean.astype(np.int32))
    np.testing.assert_array_equal(floats, clean.astype(np.int64) * 3)
    np.testing.assert_array_equal(mask, x > 0)
    np.testing.assert_array_equal(sel, np.where(x > 0, x, -x))


def test_vector_bool_select_and_gather():
    """4-lane comparisons are masks; select, a strided gather and a scatter."""
    x = np.random.default_rng(3).standard_normal(32).astype(np.float32)
    A, B, M = Buffer("A", (32,)), Buffer("B", (32,)), Buffer("M", (32,), "bool")
    i = Var("i")
    contig, strided = Ramp(i * 4, Const(1), 4), Ramp(i, Const(8), 4)
    a = Load(A, strided)
    body = Seq(
        (
            Store(B, strided, Select(a > Broadcast(Const(0.0, "float32"), 4), a, a * 10.0)),
            Store(M, contig, Load(A, contig) < Broadcast(Const(0.5, "float32"), 4)),
        )
    )
    func = LoopFunc("vsel", (A, B, M), For(i, Const(0), Const(8), LT, body, "local.x"))
    b, m = run(func, [x], [((32,), "float32"), ((32,), "bool")])
    np.testing.assert_array_equal(b, np.where(x > 0, x, x * 10))
    np.testing.assert_array_equal(m, x < 0.5)


def test_half_storage_without_fp16():
    """On a device without cl_khr_fp16 (PoCL), half buffers are vload_half/vstore_half."""
    x = np.random.default_rng(4).standard_normal(64).astype(np.float16)
    A, B = Buffer("A", (64,), "float16"), Buffer("B", (64,), "float16")
    i = Var("i")
    idx = Ramp(i * 4, Const(1), 4)
    st = Store(
        B, idx, Load(A, idx) * Broadcast(Const(2.0, "float16"), 4) + Broadcast(Const(1.0, "float16"), 4)
    )
    func = LoopFunc("half_io", (A, B), For(i, Const(0), Const(16), LT, st, "local.x"))
    src = render_opencl(func, get_profile("pocl")).source
    assert "vload_half4(0, A + (i * 4))" in src and "vstore_half4(" in src and "cl_khr_fp16" not in src
    (b,) = run(func, [x], [((64,), "float16")])
    np.testing.assert_array_equal(b, (x.astype(np.float32) * 2 + 1).astype(np.float16))


def test_fp16_profile_computes_in_half():
    A, B = Buffer("A", (64,), "float16"), Buffer("B", (64,), "float16")
    exp = lambda i: Call("exp", (Load(A, i),), "float16")  # noqa: E731
    func = LoopFunc("h", (A, B), grid(64, 16, lambda i: Store(B, i, exp(i) * 2.0)))
    src = render_opencl(func, get_profile("adreno640")).source
    assert "#pragma OPENCL EXTENSION cl_khr_fp16 : enable" in src
    assert (
        "__global half *restrict B" in src and "B[(b * 16) + t] = exp(A[(b * 16) + t]) * ((half)2.0f);" in src
    )
    assert "vload_half" not in src


# ---- numeric: loops, shared memory, vectors ------------------------------------------------
def test_row_sum_with_a_serial_reduction_loop():
    x = np.random.default_rng(5).standard_normal((16, 100)).astype(np.float32)
    A, B = Buffer("A", (16, 100)), Buffer("B", (16,))
    acc = Buffer("acc", (1,), scope="local")
    r, k = Var("r"), Var("k")
    zero = Const(0, "int64")
    body = Allocate(
        acc,
        Seq(
            (
                Store(acc, zero, Const(0.0, "float32")),
                For(
                    k,
                    Const(0),
                    Const(100),
                    ForKind.SERIAL,
                    Store(acc, zero, Load(acc, zero) + Load(A, r * 100 + k)),
                ),
                Store(B, r, Load(acc, zero)),
            )
        ),
    )
    func = LoopFunc("rowsum", (A, B), For(r, Const(0), Const(16), LT, body, "local.x"))
    (b,) = run(func, [x], [((16,), "float32")])
    np.testing.assert_allclose(b, x.sum(1), rtol=1e-5, atol=1e-5)


def _tiled_matmul(n: int, tile: int) -> LoopFunc:
    """C = A @ B with tile x tile work-groups staging A and B tiles in local memory."""
    A, B, C = Buffer("A", (n, n)), Buffer("B", (n, n)), Buffer("C", (n, n))
    As, Bs = Buffer("As", (tile, tile), scope="shared"), Buffer("Bs", (tile, tile), scope="shared")
    acc = Buffer("acc", (1,), scope="local")
    by, bx, ty, tx, ko, ki = (Var(v) for v in ("by", "bx", "ty", "tx", "ko", "ki"))
    zero = Const(0, "int64")
    row, col = by * tile + ty, bx * tile + tx
    step = Seq(
        (
            Store(As, ty * tile + tx, Load(A, row * n + ko * tile + tx)),
            Store(Bs, ty * tile + tx, Load(B, (ko * tile + ty) * n + col)),
            Barrier(),
            For(
                ki,
                Const(0),
                Const(tile),
                ForKind.UNROLLED,
                Store(
                    acc,
                    zero,
                    Call("fma", (Load(As, ty * tile + ki), Load(Bs, ki * tile + tx), Load(acc, zero))),
                ),
            ),
            Barrier(),
        )
    )
    inner = Allocate(
        acc,
        Seq(
            (
                Store(acc, zero, Const(0.0, "float32")),
                For(ko, Const(0), Const(n // tile), ForKind.SERIAL, step),
                Store(C, row * n + col, Load(acc, zero)),
            )
        ),
    )
    threads = For(
        ty, Const(0), Const(tile), LT, For(tx, Const(0), Const(tile), LT, inner, "local.x"), "local.y"
    )
    blocks = For(
        by,
        Const(0),
        Const(n // tile),
        GB,
        For(bx, Const(0), Const(n // tile), GB, threads, "group.x"),
        "group.y",
    )
    return LoopFunc("matmul_tiled", (A, B, C), Allocate(As, Allocate(Bs, blocks)))


def test_shared_memory_tiled_matmul():
    rng = np.random.default_rng(6)
    a, b = (rng.standard_normal((32, 32)).astype(np.float32) for _ in range(2))
    func = _tiled_matmul(32, 8)
    k = render_opencl(func)
    assert (k.global_size, k.local_size) == ((32, 32), (8, 8))
    assert "__local float As[64];" in k.source and "barrier(CLK_LOCAL_MEM_FENCE);" in k.source
    assert "#pragma unroll" in k.source
    (c,) = run(func, [a, b], [((32, 32), "float32")])
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    S = Buffer("S", (16384,), scope="shared")  # 64 KiB
    t = Var("t")
    big = For(t, Const(0), Const(16), LT, Store(S, t, Const(0.0, "float32")), "local.x")
    with pytest.raises(TirError, match="65536 B of local memory, mali-g76 has 32768"):
        render_opencl(LoopFunc("big_shared", (), Allocate(S, big)), get_profile("mali-g76"))


def test_vectorized_loop_becomes_float4():
    x = np.random.default_rng(7).standard_normal(128).astype(np.float32)
    A, B = Buffer("A", (128,)), Buffer("B", (128,))
    v = Var("v")

    def vec(i):
        return For(v, Const(0), Const(4), ForKind.VECTORIZED, Store(B, i * 4 + v, Load(A, i * 4 + v) * 3.0))

    func = LoopFunc("vec4", (A, B), grid(32, 8, vec))
    src = render_opencl(func).source
    base = "((b * 32) + (t * 4))"
    assert f"vstore4(vload4(0, A + {base}) * ((float4)3.0f), 0, B + {base});" in src
    (b,) = run(func, [x], [((128,), "float32")])
    np.testing.assert_allclose(b, x * 3, rtol=1e-6)


def test_kernel_without_gpu_loops_is_one_work_item():
    x = np.random.default_rng(8).standard_normal((5, 7)).astype(np.float32)
    A, B = Buffer("A", (5, 7)), Buffer("B", (5, 7))
    i, j = Var("i"), Var("j")
    st = Store(B, i * 7 + j, Call("tanh", (Load(A, i * 7 + j),)) + 1.0)
    func = LoopFunc(
        "plain",
        (A, B),
        For(i, Const(0), Const(5), ForKind.PARALLEL, For(j, Const(0), Const(7), ForKind.VECTORIZED, st)),
    )
    k = render_opencl(func)
    assert (k.global_size, k.local_size) == ((1,), (1,))
    (b,) = run(func, [x], [((5, 7), "float32")])
    np.testing.assert_allclose(b, np.tanh(x.astype(np.float64)) + 1, rtol=2e-6, atol=1e-6)


def test_dump_dir_gets_the_kernel(tmp_path, monkeypatch):
    monkeypatch.setenv("TIR_DUMP_DIR", str(tmp_path))
    k = render_opencl(_tile_reverse())
    assert (tmp_path / "opencl" / "tile_reverse.cl").read_text() == k.source


def test_build_error_is_a_tir_error():
    from tensorir.plan import GpuKernel

    bad = GpuKernel(
        "broken", "__kernel void broken(__global float *a) { a[0] = undefined_thing; }", (1,), (1,), ()
    )
    with pytest.raises(TirError, match="OpenCL build failed") as e:
        run_gpu_kernel(bad, [])
    assert "undefined_thing" in str(e.value)


# ---- real ops, lowered with the CPU schedule ----------------------------------------------
CONV = {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": 1}
POOL = {"kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1), "indices": 0}
OPS = {
    "relu": ([(4, 37)], {}),
    "add": ([(3, 4, 5), (4, 1)], {}),
    "softmax": ([(6, 50)], {"axis": 1}),
    "conv": ([(1, 3, 9, 9), (8, 3, 3, 3)], CONV),
    "dense": ([(2, 40), (24, 40)], {}),
    "max_pool": ([(1, 4, 9, 9)], POOL),
}


@pytest.mark.parametrize("op", sorted(OPS))
def test_op_lowered_for_the_cpu_runs_on_opencl(op):
    """The CPU schedule's loop IR (vector ramps, lets, allocations, ifs) renders and runs."""
    shapes, attrs = OPS[op]
    rng = np.random.default_rng(9)
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    func = op_kernel(op, [TensorType.of(x) for x in xs], attrs, "host")
    want = get_op(op).run_reference(xs, attrs)
    kernel = render_opencl(func)
    fill = [np.full(w.shape, np.nan, w.dtype) for w in want]
    got, info = run_gpu_kernel(kernel, [*xs, *fill, *scratch_arrays(func)])
    assert info["device"] and "Portable Computing Language" in info["platform"]
    for g, w in zip(got[len(xs) : len(xs) + len(want)], want, strict=True):
        assert not np.isnan(g).any()
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
