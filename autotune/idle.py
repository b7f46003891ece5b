"""Is the machine's second core free? Asked before a multi-thread timing is let decide anything.

On a shared machine another process takes a core for seconds to minutes. A timing at two
threads made then runs up to twice as slow and, between two builds timed in turn, by
different amounts: a tuning run's in-model check of MobileNetV2-224 at 2 threads, on the Zen 5
VM in such a spell (the model at 2.35 ms untuned, 1.4-1.5 when quiet), timed the model 1.21x
faster with its records; `benchmarks.build_ab` on a quiet machine then timed them 1.049x slower.

`cores_idle(threads)` runs a register-only FMA kernel (no memory traffic: `peak_func`, also
`benchmarks/peak.py`'s) with the same work per thread once on one thread and once on `threads`
threads of the JIT's pool, best of a few runs each. An idle machine runs both in about the same
time; a core taken by another process makes the second up to `threads` times slower. Idle when
the ratio is under IDLE_RATIO. `retry_while_busy` takes a timing between two such probes, and
again while one finds a core busy.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from tensorir.loop.ir import (
    Allocate,
    Broadcast,
    Buffer,
    Call,
    Const,
    For,
    ForKind,
    Load,
    LoopFunc,
    Ramp,
    Seq,
    Store,
    Var,
)
from tensorir.target import get_target

IDLE_RATIO = 1.3  # threads' time / one thread's, same work per thread: an idle machine reads ~1.0
PROBE_S = 1e-3  # one run of the probe kernel
# a timing at more than one thread is taken again while a core is busy, after a pause
BUSY_RETRIES, BUSY_WAIT_S = 2, 2.0


def _vec(base, lanes: int) -> Ramp:
    return Ramp(base, Const(1), lanes)


def peak_func(tasks: int, iters: int, lanes: int, accs: int) -> LoopFunc:
    """for t in parallel(tasks): acc[R][L]; for it in range(iters): acc[r] = fma(acc[r], a, b)."""
    X = Buffer("X", (2,))
    O = Buffer("O", (tasks * accs * lanes,))
    acc = Buffer("acc", (accs * lanes,), scope="local")
    t, it = Var("t"), Var("it")
    a = Broadcast(Load(X, Const(0)), lanes)
    b = Broadcast(Load(X, Const(1)), lanes)
    init = Seq(
        tuple(
            Store(acc, _vec(Const(r * lanes), lanes), Broadcast(Const(float(r), "float32"), lanes))
            for r in range(accs)
        )
    )
    update = Seq(
        tuple(
            Store(
                acc,
                _vec(Const(r * lanes), lanes),
                Call("fma", (Load(acc, _vec(Const(r * lanes), lanes)), a, b)),
            )
            for r in range(accs)
        )
    )
    loop = For(it, Const(0), Const(iters), ForKind.SERIAL, update)
    out = Seq(
        tuple(
            Store(O, _vec(t * (accs * lanes) + r * lanes, lanes), Load(acc, _vec(Const(r * lanes), lanes)))
            for r in range(accs)
        )
    )
    body = For(t, Const(0), Const(tasks), ForKind.PARALLEL, Allocate(acc, Seq((init, loop, out))))
    return LoopFunc(f"peak_fma_{tasks}x{accs}x{lanes}", (X, O), body)


def fma_loop(threads: int, iters: int):
    """The host's peak kernel, `threads` tasks of `iters` iterations, bound and ready to call
    on the JIT's pool set to `threads`; and its FLOPs per call."""
    from tensorir.runtime.jit import compile_host, set_num_threads

    lanes, accs = lanes_accumulators(get_target("host"))
    kernel = compile_host(peak_func(threads, iters, lanes, accs))
    set_num_threads(threads)
    x = np.array([0.999999, 1e-7], np.float32)
    o = np.zeros(threads * accs * lanes, np.float32)
    return kernel.bind(x, o), 2.0 * threads * iters * accs * lanes


def lanes_accumulators(target) -> tuple[int, int]:
    """float32 lanes per vector, and the accumulators: every register but 8, 8 to 24."""
    return target.vector_lanes("float32"), max(8, min(24, target.num_vector_registers - 8))


def _best(call, runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - t0)
    return best


@functools.cache
def _probe_kernels(threads: int):
    """The probe's two calls, the same work per thread, about PROBE_S each: on one thread and
    on `threads` (compiled once per thread count)."""
    one, _ = fma_loop(1, 10_000)
    took = _best(one, 3)
    iters = max(1_000, int(10_000 * PROBE_S / max(took, 1e-9)))
    return fma_loop(1, iters)[0], fma_loop(threads, iters)[0]


def cores_idle(threads: int, runs: int = 5) -> tuple[bool, float]:
    """(idle, ratio): the FMA kernel's best time at `threads` threads over its best at one,
    the same work per thread; idle when the ratio is under IDLE_RATIO. Leaves the JIT's pool
    at `threads`."""
    from tensorir.runtime.jit import set_num_threads

    one, many = _probe_kernels(threads)
    set_num_threads(threads)
    t1, tn = _best(one, runs), _best(many, runs)
    ratio = tn / t1
    return bool(ratio < IDLE_RATIO), float(ratio)


def probe(threads: int | None) -> Callable[[], bool] | None:
    """cores_idle at `threads` (None: every CPU of the process) as a callable, or None at one
    thread (nothing to probe). TIR_IDLE_PROBE=idle: None (trusted as idle); =busy: a probe that
    always finds a core busy (tensorir/config.py)."""
    from tensorir.config import idle_probe_mode

    n = threads or len(os.sched_getaffinity(0))
    mode = idle_probe_mode()
    if n < 2 or mode == "idle":
        return None
    return (lambda: False) if mode == "busy" else (lambda: cores_idle(n)[0])


def retry_while_busy(
    timing: Callable[[], Any],
    idle: Callable[[], bool] | None,
    slowed: Callable[[Any], bool] | None = None,
) -> tuple[Any, bool]:
    """(`timing`'s result, busy): `timing` run between two `idle` probes, and again (up to
    BUSY_RETRIES times, BUSY_WAIT_S apart) while either finds a core busy or `slowed` finds the
    result itself too slow (the whole machine slowed: another tenant's work on the host, which
    takes both cores alike and so passes the probe); a try whose first probe finds one busy
    waits without timing, but the last try times all the same. Busy: every try was."""
    for attempt in range(BUSY_RETRIES + 1):
        last = attempt == BUSY_RETRIES
        before = idle is None or idle()
        if before or last:
            result = timing()
            quiet = slowed is None or not slowed(result)
            if before and quiet and (idle is None or idle()):
                return result, False
        if not last:
            time.sleep(BUSY_WAIT_S)
    return result, True
