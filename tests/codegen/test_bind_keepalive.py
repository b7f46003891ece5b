"""Regression: `HostKernel.bind` returns a call holding raw addresses, so it must keep its
arrays alive itself. It used to rely on the kernel's one-entry argument cache, which the
next call or bind of the same (cached) kernel replaces: a benchmark binding one kernel
twice, with temporary scratch arrays, then wrote into freed memory (heap corruption)."""

from __future__ import annotations

import gc
import weakref

import numpy as np

from tensorir.runtime.jit import compile_host
from tests.codegen import kernels as K


def test_bound_call_keeps_its_arrays_alive():
    case = K.add_scalar(256)
    kernel = compile_host(case.func)
    rng = np.random.default_rng(0)
    a, b, c = case.make(rng)
    first = kernel.bind(a, b, c)
    out = weakref.ref(c)
    del a, b, c
    kernel.bind(*case.make(rng))  # replaces the kernel's cached arguments
    gc.collect()
    assert out() is not None, "the first bound call's output array was freed"
    first()
    a, b = first.arrays[:2]  # type: ignore[attr-defined]
    np.testing.assert_allclose(out(), a + b)
