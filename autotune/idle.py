"""Is the machine's second core free? Asked before a multi-thread timing is let decide anything.

On a shared machine another process takes a core for seconds to minutes. A timing at two
threads made then runs up to twice as slow and, between two builds timed in turn, by
different amounts: a tuning run's in-model check of MobileNetV2-224 at 2 threads, on the Zen 5
VM in such a spell (the model at 2.35 ms untuned, 1.4-1.5 when quiet), timed the model 1.21x
faster with its records; `benchmarks.build_ab` on a quiet machine then timed them 1.049x slower.

`cores_ready(threads)` asks three things. First, `cores_idle(threads)` runs a register-only FMA
kernel (no memory traffic: `peak_func`, also `benchmarks/peak.py`'s) with the same work per
thread once on one thread and once on `threads` threads of the JIT's pool, best of a few runs
each. An idle machine runs both in about the same time; a core taken by another process makes
the second up to `threads` times slower. Idle when the ratio is under IDLE_RATIO.

Second, the cores must pass data between them at their usual pace. On the Zen 4 VM
(2026-12-03) whole models at 2 threads flipped for seconds at a time between two speeds
(SqueezeNet 3.0-3.5 ms and 5.1-5.9, as slow as at one thread; onnxruntime alike) while the FMA
probe, a streaming add and numpy's sgemm scaling read the same in both. What the slow state
slows is data one core wrote and the other reads: `handover_us` times kernels on the JIT's pool
that hand 512 KB back and forth (an add, each thread writing its half, then a transpose, each
thread reading from both halves): 1.33-1.40 ms in the fast state, 2.6-3.3 in the slow one, in
step with the model. `handover_slow` compares a reading with the fastest this process has seen.

Third, in between, the first two cores must share a cache: a line's round trip between them
(`autotune.core_distance`) under FAR_NS. The hypervisor at times runs the two vCPUs on cores
without a shared L3, and the hand-over does not always see it.

`retry_while_busy` takes a timing between two such probes, and again while one finds the cores
not ready.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from autotune import core_distance
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
HANDOVER_FLOATS = 128 * 1024  # 512 KB handed between the cores by each transpose
HANDOVER_PAIRS = 20  # (add, transpose) pairs per timed call
SLOW_HANDOVER = 1.5  # a hand-over this much slower than the fastest seen: the cores are apart
_HANDOVER_BEST = [float("inf")]


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


@functools.cache
def _handover_call():
    """One call: HANDOVER_PAIRS x (y = x + 1, then t = y transposed (2, n) -> (n, 2)), compiled
    by tensorir for the JIT. The add splits its rows between the threads; every row of the
    transpose reads both halves, so each thread reads what the other just wrote."""
    from tensorir.graph.types import TensorType
    from tensorir.ops.kernel import op_kernel, scratch_arrays
    from tensorir.runtime.jit import compile_host

    x = np.random.default_rng(0).random((2, HANDOVER_FLOATS // 2), np.float32)
    ones, y, t = np.ones_like(x), np.empty_like(x), np.empty((HANDOVER_FLOATS // 2, 2), np.float32)
    add = op_kernel("add", [TensorType.of(x), TensorType.of(ones)], {})
    swap = op_kernel("transpose", [TensorType.of(y)], {"perm": (1, 0)})
    kept = [[x, ones, y, *scratch_arrays(add)], [y, t, *scratch_arrays(swap)]]
    calls = [compile_host(f).bind(*args) for f, args in zip((add, swap), kept, strict=True)]

    def call() -> None:
        for _ in range(HANDOVER_PAIRS):
            for c in calls:
                c()

    call.kept = kept  # type: ignore[attr-defined]  (the bound kernels hold raw pointers)
    return call


def handover_us(threads: int = 2, calls: int = 5) -> float:
    """Microseconds of one _handover_call on the JIT's pool at `threads` threads (the median of
    `calls`, after one untimed); the pool's thread count is given back after."""
    from tensorir.runtime.jit import get_num_threads, set_num_threads

    call = _handover_call()
    before = get_num_threads()
    set_num_threads(threads)
    try:
        call()
        times = []
        for _ in range(calls):
            t0 = time.perf_counter()
            call()
            times.append(time.perf_counter() - t0)
    finally:
        set_num_threads(before)
    return float(np.median(times)) * 1e6


def handover_slow(us: float) -> bool:
    """`us` more than SLOW_HANDOVER times the fastest hand-over seen in this process (which it
    updates): the data one core writes reaches the other slowly just now."""
    _HANDOVER_BEST[0] = min(_HANDOVER_BEST[0], us)
    return us > SLOW_HANDOVER * _HANDOVER_BEST[0]


def cores_ready(threads: int) -> bool:
    """The checks of the module docstring: no core busy, the first two cores near (a cache
    line's round trip, autotune/core_distance.py), and data handed between the cores at their
    usual pace. The round trip is its own check: on the Zen 4 VM ResNet-50 was tuned at 2
    threads with its vCPUs on cores that shared no L3 (317-508 ns a round trip) while the
    hand-over read fast."""
    if not cores_idle(threads)[0] or core_distance.is_far(core_distance.round_trip_ns()):
        return False
    return not handover_slow(handover_us(threads))


def probe(threads: int | None) -> Callable[[], bool] | None:
    """cores_ready at `threads` (None: every CPU of the process) as a callable, or None at one
    thread (nothing to probe). TIR_IDLE_PROBE=idle: None (trusted as idle); =busy: a probe that
    always finds a core busy (tensorir/config.py)."""
    from tensorir.config import idle_probe_mode

    n = threads or len(os.sched_getaffinity(0))
    mode = idle_probe_mode()
    if n < 2 or mode == "idle":
        return None
    return (lambda: False) if mode == "busy" else (lambda: cores_ready(n))


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
