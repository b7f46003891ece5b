"""The parallel-for runtime, itself generated LLVM IR: a persistent pthread pool.

    void tir_parallel_for(void (*fn)(void *closure, int64_t lo, int64_t hi),
                          void *closure, int64_t begin, int64_t end);   // hidden
    void tir_set_num_threads(int32_t n);   // exported; n <= 0: all cores (the default)
    int32_t tir_get_num_threads(void);     // exported
    void tir_pool_wake(void);              // exported; returns once every worker runs

`tir_parallel_for` splits [begin, end) into n = min(end - begin, 4 x threads) contiguous
chunks [begin + len*i/n, begin + len*(i+1)/n). Thread t of the T taking part (the caller is
0) owns the home chunks [t*n/T, (t+1)*n/T) and runs them in order from the front; a thread
done with its own takes the others' left over one at a time from the back. A claim is a CAS
on the owner's claim word (gen << 32 | end << 16 | next, one per thread, a cache line apart),
which the first thread to read it in a launch sets to the owner's home chunks. So a worker
that is slow to wake (another process on its core, a little core on big.LITTLE) leaves its
chunks to the others instead of stalling the launch; from one kernel to the next each thread
keeps to the same part of the range, where the data it wrote is in its own cache; and a
thread runs its part in order, so what a kernel prefetches for its next iteration is what
that thread runs next. (Before, the caller took chunks from the front of one shared range and
the workers from the back, backwards: ResNet-50's layer-4 convs, whose weights stream from
memory at 2 threads and are prefetched a group ahead, ran 7-15% slower in the model; whole
models at 2 threads, Zen 5 VM, `benchmarks.build_ab`: ResNet-18 and -50 0.975, MobileNetV2-224
0.993, DenseNet-121 1.006.)

Workers are joinable pthreads (8 MiB stacks) created on first need and kept until the
library is unloaded: a destructor (a .fini_array entry: dlclose, exit) sets a quit flag,
wakes them and joins them, so no worker runs the library's code after it is unmapped. A
launch bumps a 32-bit generation word (24-bit counter | 8-bit thread count: workers 1 ..
threads-1 take part, the rest stay idle); a worker spins on it briefly (`pause` / `yield`,
with a sched_yield every YIELD_EVERY pauses), then sleeps in futex(FUTEX_WAIT); the launcher
publishes the job (gen << 32 | n, one word: a thread late for a launch finds a newer one
there and leaves), wakes sleepers only when there are any, claims chunks itself, then waits
(spin with the same yields, then futex) for the done counter to reach n. A worker woken on
(or created on) the launcher's CPU moves to another one first (GETCPU below). Each thread adds
the chunks it ran to that counter once, when it finds none left to claim, not after every
chunk: one cache-line transfer per thread instead of one per chunk (a launch of 8 chunks on
2 threads, Zen 4 VM: 0.55 -> 0.43 us; tests/codegen/test_parallel.py prints the 2-chunk
figure). Launches are serialized by a busy flag: a nested or concurrent launch runs its
whole range on its own thread. A child after fork() notices the pid change and starts a
fresh pool. Thread count default: the CPUs in the process's affinity mask
(sched_getaffinity), at most 128; a Target with num_threads set bakes that count in as the
initial value instead (tir_set_num_threads still overrides it).

Only libc is needed: pthread_create / pthread_join / pthread_attr_{init,setstacksize,
setdetachstate,destroy}, syscall, getpid (all in glibc >= 2.34 and bionic libc). Every runtime symbol is
`weak` (hidden, except the three exported functions), so objects that each carry a copy
link into one library with one pool.
"""

from __future__ import annotations

from tensorir.codegen.llvm_builder import ModuleContext
from tensorir.codegen.parallel_ir import RUNTIME
from tensorir.codegen.parallel_place_ir import PLACEMENT
from tensorir.codegen.parallel_wake_ir import WAKE
from tensorir.errors import TirError
from tensorir.target import Target

PARALLEL_FOR = "tir_parallel_for"
POOL_WAKE = "tir_pool_wake"  # wakes every worker and returns once all run (parallel_wake_ir.py)
# the most pauses a thread of tir_pool_wake waits for the others (about 1 ms on Zen 5): a
# worker the system cannot give a core then costs the wait, not a hang
MEET_SPIN = 400_000
MAX_THREADS = 128
CHUNKS_PER_THREAD = 4
# sched_yield's syscall number. A spinning thread (a worker waiting for a launch, the launcher
# waiting for the last chunk) yields every YIELD_EVERY pauses (about 5 us on Zen 5, where 20000
# take about 50 us; a launch of back-to-back kernels never waits that long): when another
# process holds one core, the scheduler puts the launcher and the worker on the other, where a
# thread spinning kept the one it waited for off the core. `python -m benchmarks.busy_core`,
# 2 threads over 1 with a busy process on the second core, before -> after: ResNet-18
# 1.39-1.48 -> 0.92-1.08, MobileNetV2-96 1.60-1.93 -> 0.98-1.11 (onnxruntime 1.04-1.17 and
# 1.2-2.8); idle, unchanged.
SCHED_YIELD = {"x86_64": 24, "aarch64": 124}
# getcpu and sched_setaffinity. A worker just created, or woken from its futex, that finds
# itself on the CPU of the thread that created or woke it (recorded before the wake) moves to
# another CPU of its mask: tir_rt_spread narrows its mask by that CPU, then restores it at once
# (the scheduler leaves it where it went). On the Zen 5 VM the scheduler woke the worker on the
# waker's CPU 18-20 times in 20 (tests/codegen/test_parallel.py), and the two then shared that
# CPU, each spinning with a sched_yield while the other worked, the second CPU idle, until the
# load balancer parted them: a whole run of MobileNetV2-96 at 2 threads at one thread's speed
# (0.55-0.65 ms against 0.33-0.37), in 8-24% of the timed blocks after a 50 ms pause and for
# 2-30 runs after the worker's creation. After: 0-4% of such blocks. Only on those slow paths
# (a creation, a wake-up): a launch to spinning workers costs nothing more.
GETCPU = {"x86_64": 309, "aarch64": 168}
SET_AFFINITY = {"x86_64": 203, "aarch64": 122}
YIELD_EVERY = 2048
LIBC_SYMBOLS = (
    "pthread_create",
    "pthread_attr_init",
    "pthread_attr_setstacksize",
    "pthread_attr_setdetachstate",
    "pthread_attr_destroy",
    "pthread_join",
    "syscall",
    "getpid",
)
_ARCH = {
    # futex, sched_getaffinity syscall numbers; spin iterations; the pause instruction.
    # x86: 20000 pauses (about 50 us on Zen 5, whose pause is short): with 2000 the second
    # worker fell asleep between MobileNetV2-96's small kernels and each launch paid a futex
    # wake-up through the hypervisor (2 threads 0.93-1.00 ms, no faster than 1; 0.57-0.68 ms
    # with 20000, onnxruntime 0.61-0.75, separate processes on an idle 2-core VM)
    "x86_64": (202, 204, 20000, "call void @llvm.x86.sse2.pause()", "declare void @llvm.x86.sse2.pause()"),
    "aarch64": (
        98,
        123,
        20000,
        "call void @llvm.aarch64.hint(i32 1)",
        "declare void @llvm.aarch64.hint(i32)",
    ),
}


def declare_parallel_for(ctx: ModuleContext) -> None:
    ctx.declare(PARALLEL_FOR, f"declare void @{PARALLEL_FOR}(ptr, ptr, i64, i64)")


def runtime_ir(target: Target) -> str:
    """The runtime module for `target` (LLVM IR text)."""
    from tensorir.codegen.llvm import target_machine

    if target.arch not in _ARCH:
        raise TirError(f"no parallel runtime for architecture {target.arch!r} ({target.triple})")
    futex, affinity, spin, pause, pause_decl = _ARCH[target.arch]
    syscalls = {"affinity": affinity, "getcpu": GETCPU[target.arch], "setaffinity": SET_AFFINITY[target.arch]}
    return (
        RUNTIME.substitute(
            triple=target.triple,
            datalayout=str(target_machine(target).target_data),
            futex=futex,
            affinity=affinity,
            spin=spin,
            pause=pause,
            pause_decl=pause_decl,
            max_threads=MAX_THREADS,
            threads=target.num_threads or 0,
            chunks_per_thread=CHUNKS_PER_THREAD,
            sched_yield=SCHED_YIELD[target.arch],
            yield_mask=YIELD_EVERY - 1,
        )
        + PLACEMENT.substitute(syscalls)
        + WAKE.substitute(pause=pause, meet_spin=MEET_SPIN)
    )
