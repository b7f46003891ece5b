"""Clear errors for bad kernels, bad arguments and unsupported requests."""

from __future__ import annotations

import numpy as np
import pytest

from tensorir.errors import InputError, TirError
from tensorir.loop.ir import Allocate, Buffer, Call, Const, For, ForKind, Load, LoopFunc, Store, Var
from tensorir.runtime.jit import compile_host
from tests.codegen import kernels as K


@pytest.fixture(scope="module")
def add():
    return compile_host(K.add_scalar(8).func)


def arrays(n=8, dtype=np.float32):
    return [np.zeros(n, dtype) for _ in range(3)]


def test_argument_checks(add):
    a, b, c = arrays()
    with pytest.raises(InputError, match=r"add_scalar takes 3 arguments \(A, B, C\), got 2"):
        add(a, b)
    with pytest.raises(InputError, match="argument 'B' has dtype float64, the kernel expects float32"):
        add(a, b.astype(np.float64), c)
    with pytest.raises(InputError, match=r"argument 'C' has shape \[9\], the kernel expects \[8\]"):
        add(a, b, np.zeros(9, np.float32))
    with pytest.raises(InputError, match="must be a numpy array, got list"):
        add([0.0] * 8, b, c)
    with pytest.raises(InputError, match="not C-contiguous"):
        add(np.zeros(16, np.float32)[::2], b, c)
    ro = np.zeros(8, np.float32)
    ro.flags.writeable = False
    with pytest.raises(InputError, match="'C' is written by the kernel but the array is read-only"):
        add(a, b, ro)
    add(ro, b, c)  # read-only inputs are fine
    with pytest.raises(InputError, match="arguments 'A' and 'C' share memory"):
        add(a, b, a)


def test_input_errors_are_tir_errors():
    assert issubclass(InputError, TirError)


def _func(body, params=()):
    return LoopFunc("bad", tuple(params), body)


def test_gpu_loop_is_rejected():
    a, i = Buffer("A", (4,)), Var("i")
    with pytest.raises(TirError, match="bound to a GPU axis"):
        compile_host(
            _func(For(i, Const(0), Const(4), ForKind.GPU_THREAD, Store(a, i, Const(1.0, "float32"))), [a])
        )


def test_unbound_variable():
    a = Buffer("A", (4,))
    with pytest.raises(TirError, match="variable 'k' .* never bound"):
        compile_host(_func(Store(a, Var("k"), Const(1.0, "float32")), [a]))


def test_unknown_buffer_and_math_function():
    a, b = Buffer("A", (4,)), Buffer("B", (4,))
    with pytest.raises(TirError, match="buffer 'B' is neither a parameter nor allocated"):
        compile_host(_func(Store(a, Const(0), Load(b, Const(0))), [a]))
    with pytest.raises(TirError, match="unknown math function 'gamma'"):
        compile_host(_func(Store(a, Const(0), Call("gamma", (Load(a, Const(1)),))), [a]))


def test_stack_limit_and_dtype():
    a, big = Buffer("A", (4,)), Buffer("T", (2 << 20,), "float32", "local")
    with pytest.raises(TirError, match="need 8388608 bytes of stack"):
        compile_host(_func(Allocate(big, Store(big, Const(0), Const(1.0, "float32"))), [a]))
    bf = Buffer("Q", (4,), "complex64")
    with pytest.raises(TirError, match="does not support dtype 'complex64'"):
        compile_host(_func(Store(bf, Const(0), Load(bf, Const(1))), [bf]))


def test_arm64_target_cannot_jit():
    with pytest.raises(TirError, match="cannot run in this process"):
        compile_host(K.add_scalar(8).func, "linux-arm64")


def aligned(n: int, align: int = 64) -> np.ndarray:
    buf = np.zeros(n + align // 4, np.float32)
    off = (-buf.ctypes.data % align) // 4
    return buf[off : off + n]


def test_alignment_promise_is_checked():
    case = K.add_scalar(64)
    k = compile_host(LoopFunc("add_aligned", case.func.params, case.func.body, attrs={"align": 64}))
    a, b, c = aligned(64), aligned(64), aligned(64)
    a[:], b[:] = 1.0, 2.0
    k(a, b, c)
    assert (c == 3.0).all()
    with pytest.raises(InputError, match="'A' is not 64-byte aligned"):
        k(aligned(65)[1:], b, c)


def test_half_scalar_parameter_is_rejected():
    a, s = Buffer("A", (4,), "float16"), Var("s", "float16")
    with pytest.raises(TirError, match="scalar parameter 's' of type float16"):
        compile_host(_func(Store(a, Const(0), s), [a, s]))
