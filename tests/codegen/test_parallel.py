"""The generated thread pool: thread counts, speed (printed), launch overhead (printed),
nested and concurrent launches, fork safety."""

from __future__ import annotations

import ctypes
import itertools
import os
import re
import signal
import threading
import time

import numpy as np

from tensorir.codegen.parallel import CHUNKS_PER_THREAD
from tensorir.loop.ir import Buffer, Cast, Const, For, ForKind, Load, LoopFunc, Store, Var
from tensorir.runtime.jit import compile_host, get_num_threads, set_num_threads
from tests.codegen import kernels as K
from tests.codegen.test_host import run_case


def _best(fn, reps: int = 5) -> float:
    fn()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def test_default_thread_count_is_the_affinity_mask():
    set_num_threads(None)
    assert get_num_threads() == min(len(os.sched_getaffinity(0)), 128)
    set_num_threads(3)
    assert get_num_threads() == 3
    set_num_threads(0)
    assert get_num_threads() == min(len(os.sched_getaffinity(0)), 128)


def test_two_threads_speedup_printed():
    case = K.parallel_heavy(n=2048, m=512)
    args = case.make(np.random.default_rng(0))
    run = compile_host(case.func).bind(*args)
    times = {}
    for t in (1, 2):
        set_num_threads(t)
        times[t] = _best(run)
    set_num_threads(None)
    np.testing.assert_allclose(args[1], case.expect(args)[1], rtol=case.rtol)
    print(
        f"\nparallel exp-sum 2048x512: 1 thread {times[1] * 1e3:.2f} ms, 2 threads {times[2] * 1e3:.2f} ms, "
        f"speedup {times[1] / times[2]:.2f}x (load average {os.getloadavg()[0]:.1f})"
    )


def launch_kernel(reps: int) -> LoopFunc:
    """`reps` back-to-back launches of a trivial 2-chunk parallel loop, timed in one call."""
    e, r, i = Buffer("E", (2,)), Var("r"), Var("i")
    par = For(i, Const(0), Const(2), ForKind.PARALLEL, Store(e, i, Cast("float32", r)))
    return LoopFunc(f"launch_{reps}", (e,), For(r, Const(0), Const(reps), ForKind.SERIAL, par))


def test_launch_overhead_printed():
    reps = 2000
    k = compile_host(launch_kernel(reps))
    e = np.zeros(2, np.float32)
    for t in (1, 2):
        set_num_threads(t)
        dt = _best(lambda: k(e), reps=3)
        assert (e == reps - 1).all()
        print(f"\nparallel launch overhead, {t} thread(s): {dt / reps * 1e6:.2f} us per launch")
    set_num_threads(None)


def test_concurrent_launches_from_python_threads():
    set_num_threads(2)
    errors = []

    def work(seed):
        try:
            for s in range(3):
                run_case(K.parallel_heavy(n=97, m=8), seed=seed * 10 + s)
        except Exception as ex:
            errors.append(ex)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    set_num_threads(None)
    assert not errors, errors


def test_pool_survives_fork():
    set_num_threads(2)
    run_case(K.parallel_heavy(n=64, m=8))  # the parent's pool is running
    pid = os.fork()
    if pid == 0:  # child: a fresh pool, or this hangs until the alarm kills it
        signal.alarm(30)
        try:
            run_case(K.parallel_heavy(n=64, m=8), seed=5)
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    set_num_threads(None)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status


def _function(ir_text: str, name: str) -> str:
    """The body of the function `name` defined in `ir_text` (from its define line)."""
    start = re.search(rf"^define [^\n]*@{name}\(", ir_text, re.M).start()
    return ir_text[start : ir_text.index("\n}\n", start)]


def test_spinning_threads_yield_the_core():
    """The worker waiting for a launch and the launcher waiting for the last chunk call
    sched_yield inside their spin loops (before they sleep in futex): a thread spinning on the
    core it shares with the one it waits for kept that one off the core
    (`python -m benchmarks.busy_core`)."""
    from tensorir.codegen.parallel import SCHED_YIELD, YIELD_EVERY, runtime_ir
    from tensorir.target import get_target

    for target, number in (("host", SCHED_YIELD["x86_64"]), ("linux-arm64", SCHED_YIELD["aarch64"])):
        text = runtime_ir(get_target(target))
        relax = _function(text, "tir_rt_relax")
        assert f"and i32 %step, {YIELD_EVERY - 1}" in relax and f"@syscall(i64 {number})" in relax
        for fn, loop in (("tir_rt_worker", "spin_more"), ("tir_parallel_for", "wait_more")):
            body = _function(text, fn)
            spin = body[body.index(f"\n{loop}:") : body.index("futex_wait", body.index(f"\n{loop}:"))]
            assert "call void @tir_rt_relax(i32 %s1)" in spin, (target, fn)


def test_two_threads_on_one_core_finish_and_agree():
    """The process pinned to one CPU with 2 threads: every launch completes and the results
    match the reference (the launcher and the worker take turns on the core)."""
    import subprocess
    import sys

    code = (
        "import os, numpy as np\n"
        "os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
        "from tensorir.runtime.jit import compile_host, set_num_threads\n"
        "from tests.codegen import kernels as K\n"
        "case = K.parallel_heavy(n=64, m=500)\n"
        "args = case.make(np.random.default_rng(0))\n"
        "run = compile_host(case.func).bind(*args)\n"
        "set_num_threads(2)\n"
        "for _ in range(300): run()\n"
        "np.testing.assert_allclose(args[1], case.expect(args)[1], rtol=case.rtol)\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def count_kernel(reps: int, extent: int) -> LoopFunc:
    """`reps` launches of a parallel loop over `extent` iterations, each adding 1 to E[i]."""
    e, r, i = Buffer("E", (extent,)), Var("r"), Var("i")
    par = For(i, Const(0), Const(extent), ForKind.PARALLEL, Store(e, i, Load(e, i) + Const(1.0, "float32")))
    return LoopFunc(f"count_{reps}_{extent}", (e,), For(r, Const(0), Const(reps), ForKind.SERIAL, par))


def test_every_iteration_runs_once():
    """Home chunks, steals from the back and late workers: over many back-to-back launches
    of every chunk count (fewer iterations than threads included), at more threads than
    cores, each iteration runs exactly once per launch."""
    reps = 3000
    try:
        for threads in (2, 3, 4, 8):
            set_num_threads(threads)
            for extent in (2, 3, 7, 9, 16, 33, 100):
                k = compile_host(count_kernel(reps, extent))
                e = np.zeros(extent, np.float32)
                k(e)
                assert (e == reps).all(), (threads, extent, e)
    finally:
        set_num_threads(None)


def _chunks_by_thread(threads: int, extent: int) -> tuple[int, dict[int, list[tuple[int, int]]]]:
    """Run tir_parallel_for over [0, extent) at `threads` with a Python body that records
    (lo, hi) per calling thread and sleeps 2 ms, so every thread takes part; returns the
    launching thread's id and each thread's chunks in the order it ran them."""
    from tensorir.runtime.jit import _engine

    body_type = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
    seen: dict[int, list[tuple[int, int]]] = {}

    def body(_closure, lo, hi):
        seen.setdefault(threading.get_native_id(), []).append((lo, hi))
        time.sleep(0.002)

    callback = body_type(body)
    launch = ctypes.CFUNCTYPE(None, body_type, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(
        _engine().address("tir_parallel_for")
    )
    set_num_threads(threads)
    try:
        launch(callback, None, 0, extent)
    finally:
        set_num_threads(None)
    return threading.get_native_id(), seen


def test_each_thread_runs_its_own_part_in_order():
    """Thread t of T starts at the front of its home part [t*n/T, (t+1)*n/T) of the n chunks
    and runs it in order (a kernel's prefetch of its next iteration is then what the thread
    runs next); chunks it takes from another's part come after, from the back."""
    for threads, extent in ((2, 16), (3, 24)):
        me, seen = _chunks_by_thread(threads, extent)
        n = min(extent, threads * CHUNKS_PER_THREAD)
        bounds = [extent * i // n for i in range(n + 1)]
        chunks = sorted(c for ran in seen.values() for c in ran)
        assert chunks == list(itertools.pairwise(bounds)), chunks  # each chunk once
        assert len(seen) == threads and seen[me][0] == (0, bounds[1]), seen
        starts = sorted(ran[0][0] for ran in seen.values())
        assert starts == [bounds[t * n // threads] for t in range(threads)], seen
        for ran in seen.values():
            t = starts.index(ran[0][0])
            home = (bounds[t * n // threads], bounds[(t + 1) * n // threads])
            own = [c for c in ran if home[0] <= c[0] < home[1]]
            assert ran[: len(own)] == own and own == sorted(own), (t, ran)
            stolen = ran[len(own) :]
            for owner in range(threads):  # from each other thread's part, from its back
                lo, hi = bounds[owner * n // threads], bounds[(owner + 1) * n // threads]
                theirs = [c for c in stolen if lo <= c[0] < hi]
                assert theirs == sorted(theirs, reverse=True), (t, ran)


def test_a_woken_worker_leaves_the_launchers_cpu():
    """A worker woken from its futex (or just created) on the CPU of the thread that launched
    the job moves to another CPU of its mask (parallel.py: GETCPU). The launcher pinned to one
    CPU, the worker free on all: over 20 launches, each after the worker fell asleep, the
    worker's first chunk runs on the launcher's CPU in at most 5. Without the move it did in
    18-20 of 20 on the Zen 5 VM (idle, with a spinning process on the other CPU, or under the
    CI suite's load: the scheduler wakes it on the waker's CPU); with it, 0-2.
    Only the first chunk counts: each chunk sleeps, and where the worker wakes from that sleep
    is the scheduler's choice, which with the other CPU busy (the suite's other worker, another
    tenant) is at times the launcher's CPU: counting every chunk read 5-17 of 20 under load
    with the move in place, and failed CI once. A try over 5 is taken again, up to 3 tries."""
    import subprocess
    import sys

    assert len(os.sched_getaffinity(0)) >= 2, "this test needs two CPUs"
    code = """
import ctypes, os, threading, time
from tensorir.runtime.jit import _engine, set_num_threads
libc = ctypes.CDLL(None)
a = min(os.sched_getaffinity(0))
body_type = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
first = {}  # thread -> the CPU of its first chunk in this launch
def body(_closure, lo, hi):
    first.setdefault(threading.get_native_id(), libc.sched_getcpu())
    time.sleep(0.002)
callback = body_type(body)
launch = ctypes.CFUNCTYPE(None, body_type, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(
    _engine().address("tir_parallel_for"))
set_num_threads(2)
launch(callback, None, 0, 8)  # the worker exists, every CPU allowed
os.sched_setaffinity(0, {a})  # this thread, the launcher, on CPU a from now on
me, shared, ran = threading.get_native_id(), 0, 0
for _ in range(20):
    end = time.perf_counter() + 0.05
    while time.perf_counter() < end:  # the worker falls asleep in futex; CPU a stays busy
        pass
    first.clear()
    launch(callback, None, 0, 8)
    worker = [c for t, c in first.items() if t != me]
    ran += bool(worker)
    shared += a in worker
print(ran, shared)
"""
    tries = []
    for _ in range(3):  # another process busy on the other CPU can rightly draw it back: again
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        ran, shared = map(int, out.stdout.split())
        assert ran >= 15, out.stdout
        tries.append(shared)
        if shared <= 5:
            break
    assert tries[-1] <= 5, tries


def test_workers_check_their_cpu_when_they_start_and_wake():
    """The runtime IR: the worker calls tir_rt_spread on entry and after its futex wait; the
    launcher records its CPU (getcpu) before it wakes sleepers and before it creates a worker;
    the syscall numbers are the target's."""
    from tensorir.codegen.parallel import GETCPU, SET_AFFINITY, runtime_ir
    from tensorir.target import get_target

    for target, arch in (("host", "x86_64"), ("linux-arm64", "aarch64")):
        text = runtime_ir(get_target(target))
        worker = _function(text, "tir_rt_worker")
        assert worker.count("call void @tir_rt_spread()") == 2
        wait = worker.index("call void @tir_rt_futex_wait")
        assert worker.index("call void @tir_rt_spread()", wait) > wait
        launch = _function(text, "tir_parallel_for")
        wake = launch.index("\nwake:")
        assert launch.index("@tir_rt_cpu()", wake) < launch.index("@tir_rt_futex_wake", wake)
        assert "@tir_rt_cpu()" in _function(text, "tir_rt_ensure")
        assert f"@syscall(i64 {GETCPU[arch]}," in _function(text, "tir_rt_cpu")
        assert text.count(f"@syscall(i64 {SET_AFFINITY[arch]},") == 2


def test_pool_wake_is_a_meeting_of_every_thread():
    """tir_pool_wake (exported) launches tir_rt_meet over as many chunks as threads, each
    counting itself in and waiting, up to MEET_SPIN pauses, until all have; so it returns once
    every worker is awake. From Python (jit.wake_pool) it returns at 1, 2 and 3 threads, also
    after the workers fell asleep, and the pool still runs every iteration once after it."""
    from tensorir.codegen.parallel import MEET_SPIN, POOL_WAKE, runtime_ir
    from tensorir.runtime.jit import wake_pool
    from tensorir.target import get_target

    text = runtime_ir(get_target("host"))
    wake = _function(text, POOL_WAKE)
    assert wake.startswith(f"define weak void @{POOL_WAKE}()")  # not hidden: the harness finds it
    assert "call void @tir_parallel_for(ptr @tir_rt_meet, ptr @tir_rt_meet_total, i64 0, i64 %n)" in wake
    assert "store atomic i64 0, ptr @tir_rt_meet_count" in wake
    meet = _function(text, "tir_rt_meet")
    assert "atomicrmw add ptr @tir_rt_meet_count" in meet and f"icmp ult i32 %s1, {MEET_SPIN}" in meet
    for threads in (1, 2, 3):
        set_num_threads(threads)
        try:
            wake_pool()
            time.sleep(0.02)  # past the workers' spin: they sleep in futex
            wake_pool()
            e = np.zeros(300, np.float32)
            compile_host(count_kernel(1, 300))(e)
            assert (e == 1).all(), threads
        finally:
            set_num_threads(None)
