"""How far apart are the two cores this process runs on? A cache-line ping-pong between them.

    python -m benchmarks.core_distance            # round trip and hand-over, every second for 10 s
    python -m benchmarks.core_distance --seconds 60

Two threads, pinned to the first two CPUs of the affinity mask, hand one 64-byte line back
and forth (the first writes an odd count and waits for the next even one, the second the
other way round); the round trip is the time of one hand-over each way. On the 2-vCPU Zen 5
VM it reads 65-160 ns most of the time and 400-800 ns for spells of seconds to minutes: the
hypervisor then runs the two vCPUs on cores that share no L3 (another CCD; at that latency
perhaps another socket, with its own memory), and every line one thread wrote and the other
reads crosses the fabric. Neither sgemm's scaling nor an FMA canary sees it (each thread
keeps to its own data), but a model run does: ResNet-50 at 2 threads took 14.5-14.9 ms in the
near state and 16.5-17.9 in the far one, onnxruntime 17.3-17.9 in both.

A single line's round trip does not see every such state. On the Zen 4 VM (2026-12-03) whole
models at 2 threads flipped, for seconds at a time, between two speeds (SqueezeNet 3.0-3.5 ms
and 5.1-5.9, as slow as at one thread; onnxruntime alike) while the round trip read 75-105 ns in
both, each vCPU alone ran the model at its usual speed, and the FMA canary, a streaming add
and sgemm's scaling stayed put. What the slow state slows is data one core wrote and the
other reads: `autotune.idle.handover_us` times kernels on the JIT's thread pool that hand 512 KB
back and forth, and read 1.33-1.40 ms in the fast state, 2.6-3.3 in the slow one, in step with
the model. `cores_apart()` says either: far by the round trip, or the hand-over slower than
autotune.idle.SLOW_HANDOVER times its fastest in this process (`handover_slow`).

The ping-pong lives in autotune/core_distance.py (LLVM IR run by llvmlite's JIT: no C compiler
needed), where `tir tune`'s readiness probe uses it too; `FAR_NS` there splits the readings.
"""

from __future__ import annotations

import argparse
import time

from autotune.core_distance import is_far, round_trip_ns
from autotune.idle import handover_slow, handover_us


def cores_apart() -> bool:
    """Are the first two cores apart just now: far by a line's round trip, or slow at handing
    data over (module docstring)? False with fewer than two CPUs."""
    ns = round_trip_ns()
    if ns is None:
        return False
    return is_far(ns) | handover_slow(handover_us())


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--every", type=float, default=1.0)
    args = ap.parse_args(argv)
    end = time.time() + args.seconds
    while time.time() < end:
        ns, us = round_trip_ns(), handover_us()
        where = "far (no shared cache)" if is_far(ns) else "near"
        slow = "slow" if handover_slow(us) else "fast"
        stamp = time.strftime("%H:%M:%S")
        print(f"{stamp} round trip {ns:.0f} ns: {where}; hand-over {us:.0f} us: {slow}", flush=True)
        time.sleep(args.every)


if __name__ == "__main__":
    main()
