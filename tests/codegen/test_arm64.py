"""ARM64: the host test kernels built as linux-arm64 shared libraries and run under
qemu-aarch64; android-arm64 libraries' dynamic symbols; NEON assembly checks.

Needs the cross toolchain (see tensorir/codegen/link.py); without it these tests fail with
a TirError naming the apt packages to install.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from tensorir.codegen import emit_assembly
from tensorir.codegen.link import build_shared_library, dynamic_symbols, needed_libraries, run_arm64
from tensorir.codegen.parallel import LIBC_SYMBOLS
from tests.codegen import kernels as K

pytestmark = pytest.mark.arm64

LIBM = (
    "expf",
    "logf",
    "tanhf",
    "erff",
    "sinf",
    "cosf",
    "powf",
    "floorf",
    "ceilf",
    "roundf",
    "sqrtf",
    "exp",
    "log",
)


def check_outputs(case: K.Case, outs: list, before: list) -> None:
    for k, want in case.expect(before).items():
        got = outs[k]
        if got.dtype == bool or np.issubdtype(got.dtype, np.integer):
            np.testing.assert_array_equal(got, want, err_msg=f"{case.func.name} argument {k}")
        else:
            np.testing.assert_allclose(
                got, want, rtol=case.rtol, atol=case.atol, err_msg=f"{case.func.name} argument {k}"
            )


def run_case_arm64(case: K.Case, seed: int = 0, threads: int = 0, target: str = "linux-arm64") -> None:
    args = case.make(np.random.default_rng(seed))
    check_outputs(case, run_arm64(case.func, args, target, num_threads=threads), args)


@pytest.mark.parametrize("name", sorted(K.ALL_CASES))
def test_linux_arm64_kernel_under_qemu(name):
    run_case_arm64(K.ALL_CASES[name]())


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("target", ["linux-arm64", "android-arm64"])
def test_arm64_parallel_thread_counts(threads, target):
    run_case_arm64(K.parallel_heavy(n=101, m=16), seed=threads, threads=threads, target=target)


@pytest.mark.parametrize("name", ["matmul4", "select_cast", "parallel_nested"])
def test_android_arm64_kernel_under_qemu(name):
    """The Android build, loaded against glibc standing in for bionic (same libc symbols)."""
    run_case_arm64(K.ALL_CASES[name](), target="android-arm64")


def test_linux_arm64_math_matches_numpy():
    f, names = K.math_all()
    rng = np.random.default_rng(0)
    n = 512
    x = rng.uniform(0.01, 8, n).astype(np.float32)
    p = rng.uniform(-3, 3, n).astype(np.float32)
    outs = run_arm64(f, [x, p] + [np.zeros(n, np.float32) for _ in range(len(names) + 2)])
    xd, pd = x.astype(np.float64), p.astype(np.float64)
    import math

    ref = {
        "exp": np.exp(xd),
        "log": np.log(xd),
        "sqrt": np.sqrt(xd),
        "rsqrt": 1 / np.sqrt(xd),
        "tanh": np.tanh(xd),
        "erf": np.array([math.erf(v) for v in xd]),
        "sigmoid": 1 / (1 + np.exp(-xd)),
        "abs": np.abs(xd),
        "floor": np.floor(xd),
        "ceil": np.ceil(xd),
        "round": np.round(xd),
        "sin": np.sin(xd),
        "cos": np.cos(xd),
    }
    for k, name in enumerate(names):
        np.testing.assert_allclose(outs[2 + k], ref[name], rtol=3e-7, atol=2e-7, err_msg=name)
    np.testing.assert_allclose(outs[-2], xd**pd, rtol=3e-7, err_msg="pow")
    np.testing.assert_allclose(outs[-1], xd * pd + xd, rtol=3e-7, err_msg="fma")


@pytest.mark.parametrize("target", ["android-arm64", "linux-arm64"])
def test_shared_library_symbols(tmp_path, target):
    par = build_shared_library(K.parallel_heavy().func, target, tmp_path / "libpar.so")
    defined, undefined = dynamic_symbols(par)
    assert undefined <= set(LIBC_SYMBOLS), undefined - set(LIBC_SYMBOLS)
    assert {"par_heavy_256_64", "tir_set_num_threads", "tir_get_num_threads"} <= defined
    assert not any(s.startswith("tir_rt_") or s == "tir_parallel_for" for s in defined)  # hidden
    assert needed_libraries(par) == (["libc.so"] if target == "android-arm64" else ["libc.so.6"])
    f, _ = K.math_all()
    plain = build_shared_library([f, K.matmul(lanes=4).func], target, tmp_path / "libmath.so")
    defined, undefined = dynamic_symbols(plain)
    assert undefined == set() and needed_libraries(plain) == []
    assert {"math_all", "matmul4"} <= defined


@pytest.mark.parametrize("target", ["android-arm64", "linux-arm64"])
def test_arm64_assembly(target):
    mm = emit_assembly(K.matmul(lanes=4).func, target)
    assert re.search(r"\bfmla\s+v\d+\.4s", mm), "no NEON fmla in the matmul kernel"
    f, _ = K.math_all()
    asm = emit_assembly([f, K.row_sum().func, zero_fill()], target)
    calls = re.findall(r"\b(?:bl|b)\s+([A-Za-z_]\w*)", asm)
    assert not [c for c in calls if c in LIBM or "mem" in c], calls
    assert not re.search(r"\bbl\s", asm), "a math kernel calls a function"


def zero_fill():
    from tensorir.loop.ir import Buffer, Const, For, ForKind, LoopFunc, Store, Var

    c, i = Buffer("Z", (4096,)), Var("i")
    return LoopFunc(
        "zero_fill", (c,), For(i, Const(0), Const(4096), ForKind.SERIAL, Store(c, i, Const(0.0, "float32")))
    )


def test_objects_each_with_a_runtime_link_into_one_pool(tmp_path):
    """Two objects that both carry the (weak) runtime link into one library and run."""
    from tensorir.codegen.link import emit_object_file, link_shared, run_library

    a = K.parallel_heavy(n=50, m=8)
    b = K.parallel_heavy(n=60, m=8)
    objs = [emit_object_file(c.func, "linux-arm64", tmp_path / f"{c.func.name}.o") for c in (a, b)]
    lib = link_shared(objs, "linux-arm64", tmp_path / "libtwo.so")
    defined, _ = dynamic_symbols(lib)
    assert {a.func.name, b.func.name, "tir_set_num_threads"} <= defined
    for c in (a, b):
        args = c.make(np.random.default_rng(0))
        outs, _ = run_library(lib, c.func.name, args, num_threads=2)
        check_outputs(c, outs, args)
