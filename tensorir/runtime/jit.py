"""Host JIT: compile a LoopFunc with MCJIT and call it on numpy arrays through ctypes.

One MCJIT engine per process (it owns its target machine; a second engine built on the
same machine crashes LLVM). The parallel runtime is added to it once; every kernel module
after that gets a unique symbol name and resolves `tir_parallel_for` against it.

    k = compile_host(loopfunc)          # target "host" by default
    k(a, b, c)                          # numpy arrays (and numbers for Var params)
    run = k.bind(a, b, c); run()        # checks once, then ~1 us per call
    set_num_threads(2)                  # the pool's thread count (default: all cores)
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import itertools
from collections.abc import Callable
from typing import Any

import llvmlite.binding as llvm
import numpy as np

from tensorir.codegen.llvm import LLVM_LOCK, build_module, optimize, parse_ir, symbol_name, target_machine
from tensorir.codegen.llvm_walk import usage
from tensorir.codegen.parallel import POOL_WAKE, runtime_ir
from tensorir.dtypes import np_dtype
from tensorir.errors import InputError, TirError
from tensorir.loop import ir
from tensorir.target import Target, get_target, host_target

_CTYPES = {
    "bool": ctypes.c_bool,
    "int8": ctypes.c_int8,
    "int16": ctypes.c_int16,
    "int32": ctypes.c_int32,
    "int64": ctypes.c_int64,
    "uint8": ctypes.c_uint8,
    "uint16": ctypes.c_uint16,
    "uint32": ctypes.c_uint32,
    "uint64": ctypes.c_uint64,
    "float32": ctypes.c_float,
    "float64": ctypes.c_double,
}


class _Engine:
    """The process-wide MCJIT engine (used under codegen.llvm.LLVM_LOCK)."""

    def __init__(self) -> None:
        self.target = host_target()
        self.ee = llvm.create_mcjit_compiler(llvm.parse_assembly(""), target_machine(self.target, jit=True))
        self.counter = itertools.count()
        self.add(optimize(parse_ir(runtime_ir(self.target), "tir_runtime"), self.target))
        self.set_threads = ctypes.CFUNCTYPE(None, ctypes.c_int32)(
            self.ee.get_function_address("tir_set_num_threads")
        )
        self.get_threads = ctypes.CFUNCTYPE(ctypes.c_int32)(
            self.ee.get_function_address("tir_get_num_threads")
        )
        self.wake = ctypes.CFUNCTYPE(None)(self.address(POOL_WAKE))

    def add(self, mod: llvm.ModuleRef) -> None:
        self.ee.add_module(mod)
        self.ee.finalize_object()

    def address(self, name: str) -> int:
        addr = self.ee.get_function_address(name)
        if not addr:
            raise RuntimeError(f"JIT lost symbol {name!r} (a tensorir bug)")
        return addr


@functools.cache
def _engine() -> _Engine:
    with LLVM_LOCK:
        return _Engine()


def set_num_threads(n: int | None) -> None:
    """Threads for parallel loops of JIT-compiled kernels; None or <= 0: all cores."""
    _engine().set_threads(int(n or 0))


def get_num_threads() -> int:
    return int(_engine().get_threads())


def wake_pool() -> None:
    """Wake the JIT kernels' thread pool and return once every worker runs (and spins for the
    next launch): before a timed call that follows an untimed pause longer than their spin."""
    _engine().wake()


class HostKernel:
    """A compiled kernel: call it with numpy arrays in `func.params` order."""

    def __init__(self, func: ir.LoopFunc, target: Target, symbol: str, address: int):
        self.func, self.target, self.symbol, self.address = func, target, symbol, address
        for p in func.params:
            if isinstance(p, ir.Var) and p.dtype not in _CTYPES:
                raise TirError(
                    f"{func.name}: scalar parameter {p.name!r} of type {p.dtype} cannot be passed from Python"
                )
        argtypes = [ctypes.c_void_p if isinstance(p, ir.Buffer) else _CTYPES[p.dtype] for p in func.params]
        self._cfunc = ctypes.CFUNCTYPE(None, *argtypes)(address)
        self._stored = set(usage(func.body).stored)
        self._align = int(func.attrs.get("align") or 1)
        self._last: tuple[tuple, list] | None = None
        self._scratch: tuple[np.ndarray, ...] | None = None

    def __repr__(self) -> str:
        return f"HostKernel({self.symbol!r}, params={[p.name for p in self.func.params]})"

    def _pointer(self, p: ir.Buffer, a: Any) -> int:
        where = f"{self.func.name}: argument {p.name!r}"
        if not isinstance(a, np.ndarray):
            raise InputError(f"{where} must be a numpy array, got {type(a).__name__}")
        if a.dtype != np_dtype(p.dtype):
            raise InputError(f"{where} has dtype {a.dtype}, the kernel expects {p.dtype}")
        # the same elements in another shape are the same bytes: a kernel may see a tensor
        # merged (a 1x1 conv's rows, ops/conv_rows.py) while its caller holds the graph's shape
        if tuple(a.shape) != tuple(p.shape) and a.size != int(np.prod(p.shape, dtype=np.int64)):
            raise InputError(f"{where} has shape {list(a.shape)}, the kernel expects {list(p.shape)}")
        if not a.flags.c_contiguous:
            raise InputError(f"{where} is not C-contiguous (use np.ascontiguousarray)")
        if p in self._stored and not a.flags.writeable:
            raise InputError(f"{where} is written by the kernel but the array is read-only")
        ptr = a.__array_interface__["data"][0]
        if ptr % self._align:
            raise InputError(f"{where} is not {self._align}-byte aligned as the kernel assumes")
        return ptr

    def _args(self, args: tuple) -> list:
        params = self.func.params
        n_scratch = self.func.attrs.get("num_scratch", 0)
        if n_scratch and len(args) == len(params) - n_scratch:
            if self._scratch is None:  # the caller left the workspace to us
                self._scratch = tuple(np.empty(b.shape, np_dtype(b.dtype)) for b in params[len(args) :])
            args = (*args, *self._scratch)
        if len(args) != len(params):
            names = ", ".join(p.name for p in params)
            raise InputError(f"{self.func.name} takes {len(params)} arguments ({names}), got {len(args)}")
        last = self._last
        if last is not None and all(x is y for x, y in zip(args, last[0], strict=True)):
            return last[1]
        out = [
            self._pointer(p, a) if isinstance(p, ir.Buffer) else a for p, a in zip(params, args, strict=True)
        ]
        self._check_aliasing(args)
        if all(isinstance(a, np.ndarray) for a in args):  # numbers may be fresh objects each call
            self._last = (args, out)
        return out

    def _check_aliasing(self, args: tuple) -> None:
        """Buffer parameters are noalias: an array written by the kernel may not overlap another."""
        params = self.func.params
        for x in range(len(params)):
            for y in range(x + 1, len(params)):
                p, q = params[x], params[y]
                if not (isinstance(p, ir.Buffer) and isinstance(q, ir.Buffer)):
                    continue
                if (p in self._stored or q in self._stored) and np.may_share_memory(args[x], args[y]):
                    raise InputError(
                        f"{self.func.name}: arguments {p.name!r} and {q.name!r} share memory, "
                        "but the kernel writes one of them and assumes they do not overlap"
                    )

    def _threads(self) -> None:
        if self.target.num_threads is not None:
            set_num_threads(self.target.num_threads)

    def __call__(self, *args: Any) -> None:
        cargs = self._args(args)
        self._threads()
        self._cfunc(*cargs)

    def bind(self, *args: Any) -> Callable[[], None]:
        """Check the arguments once; the returned function calls the kernel on them (and keeps
        the arrays alive: the call holds only their raw addresses)."""
        cargs = self._args(args)
        self._threads()
        run = functools.partial(self._cfunc, *cargs)
        run.arrays = args  # type: ignore[attr-defined]
        return run


_cache: dict[tuple, HostKernel] = {}


def compile_host(func: ir.LoopFunc, target: Target | str = "host") -> HostKernel:
    """JIT-compile `func` for this machine; returns a callable taking numpy arrays."""
    target = get_target(target)
    host = host_target()
    if target.arch != host.arch:
        raise TirError(
            f"target {target.name!r} ({target.triple}) cannot run in this process; build a library "
            "with tensorir.codegen.link and run it on the device (or under qemu)"
        )
    key = (func, repr(func.attrs), target)
    if key in _cache:
        return _cache[key]
    eng = _engine()
    with LLVM_LOCK:
        symbol = f"{symbol_name(func.name)}_jit{next(eng.counter)}"
        mod, _ = build_module(
            func, dataclasses.replace(target, triple=host.triple), names=[symbol], with_runtime=False
        )
        eng.add(mod)
        kernel = HostKernel(func, target, symbol, eng.address(symbol))
    _cache[key] = kernel
    return kernel
