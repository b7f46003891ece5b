"""Hand-built kernels JIT-compiled for the host and compared with numpy."""

from __future__ import annotations

import numpy as np
import pytest

from tensorir.runtime.jit import compile_host, set_num_threads
from tests.codegen import kernels as K

CASES = K.ALL_CASES


def run_case(case: K.Case, seed: int = 0) -> None:
    args = case.make(np.random.default_rng(seed))
    before = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    compile_host(case.func)(*args)
    for k, want in case.expect(before).items():
        got = args[k]
        assert got.dtype == before[k].dtype
        if got.dtype == bool or np.issubdtype(got.dtype, np.integer):
            np.testing.assert_array_equal(got, want, err_msg=f"{case.func.name} argument {k}")
        else:
            np.testing.assert_allclose(
                got, want, rtol=case.rtol, atol=case.atol, err_msg=f"{case.func.name} argument {k}"
            )


@pytest.mark.parametrize("name", sorted(CASES))
def test_host_kernel(name):
    run_case(CASES[name]())


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_parallel_thread_counts(threads):
    set_num_threads(threads)
    try:
        run_case(K.parallel_heavy(n=301, m=40), seed=threads)
        run_case(K.parallel_nested(), seed=threads)
    finally:
        set_num_threads(None)


def test_repeat_calls_reuse_cached_pointers():
    case = K.add_scalar(64)
    k = compile_host(case.func)
    a, b, c = case.make(np.random.default_rng(1))
    for _ in range(3):
        k(a, b, c)
    np.testing.assert_allclose(c, a + b)
    a[:] = 1.0  # same objects, new contents: the kernel sees them
    k.bind(a, b, c)()
    np.testing.assert_allclose(c, 1.0 + b)


def test_compile_is_cached():
    case = K.add_scalar(32)
    assert compile_host(case.func) is compile_host(case.func)
