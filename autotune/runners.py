"""Runners: measure a built candidate and return its timings, or say why it failed.

    runner = runner_for(get_target("host"))
    costs = runner.run(built, inputs, reference, options)   # seconds per call, `repeat` of them

A runner receives the task's inputs (the spec's input transforms not yet applied) and, when
`options.check`, the numpy reference outputs: the first run's outputs are checked against
them before anything is timed, and a mismatch raises `WrongResult`. The tuner, the cost
model and the database see only the timings, never which runner made them.

Host (`CpuRunner`): the JIT'd kernel called in this process. Cold (the default, what a
model's kernels meet): before each timed call the caches are flushed and the activations
(the inputs that are not the model's constants) read back in, so the weights come from
memory as they do in a model whose weights outgrow the caches; warm: `number` calls back to
back per timing (so one timing lasts `min_repeat_s`). OpenCL (`OpenCLRunner`): the rendered
kernel on the profile's local device through pyopencl, timed by profiling events, cold by
rewriting a buffer larger than the device's caches before each timed launch.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from autotune.builders import Built
from tensorir.target import Target

FLUSH_BYTES = 64 << 20  # larger than the last-level caches here
GPU_FLUSH_BYTES = 256 << 20  # larger than a GPU's L2 (an H100 has 50 MB)


class WrongResult(Exception):
    """The candidate ran but its outputs differ from the reference."""


class Runner(Protocol):
    def run(
        self, built: Built, inputs: Sequence[np.ndarray], reference: Sequence[np.ndarray], options: Any
    ) -> list[float]: ...


def kernel_arrays(built: Built, inputs: Sequence[np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(inputs with the spec's transforms applied, zeroed outputs) for one candidate. A kernel
    may see a tensor in another shape of the same bytes (a 1x1 conv's merged rows,
    ops/conv_rows.py): inputs are passed in its shapes, outputs come back in them."""
    from tensorir.graph.types import np_dtype
    from tensorir.ops.registry import get_op

    spec = built.spec
    ins = list(inputs)
    for k, fn in spec.transforms.items():
        ins[k] = np.ascontiguousarray(fn(ins[k]))
    for k, t in enumerate(spec.in_types):
        if tuple(ins[k].shape) != tuple(t.shape) and ins[k].size == t.size:
            ins[k] = np.ascontiguousarray(ins[k]).reshape(t.shape)
    out_types = get_op(spec.op).infer(list(spec.in_types), dict(spec.attrs))
    return ins, [np.zeros(t.shape, np_dtype(t.dtype)) for t in out_types]


def check_outputs(outs: Sequence[np.ndarray], reference: Sequence[np.ndarray], options: Any) -> None:
    """Raise WrongResult unless every output is within rtol * max |ref| + atol (an output in
    the kernel's view of the same bytes is compared in the reference's shape)."""
    for got, want in zip(outs, reference, strict=True):
        got = got.reshape(want.shape) if got.shape != want.shape and got.size == want.size else got
        err = max_error(got, want)
        limit = options.rtol * float(np.max(np.abs(want), initial=0.0)) + options.atol
        if not err <= limit:
            raise WrongResult(f"wrong result: max |err| {err:.3g} > {limit:.3g}")


def max_error(got: np.ndarray, want: np.ndarray) -> float:
    if got.shape != want.shape:
        return math.inf
    if got.dtype.kind == "f" or want.dtype.kind == "f":
        diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
        return float(np.nanmax(np.where(np.isnan(got) != np.isnan(want), np.inf, diff), initial=0.0))
    return 0.0 if np.array_equal(got, want) else math.inf


@dataclasses.dataclass
class CpuRunner:
    """Time the JIT'd host kernel in this process (cold: one call per timing, after a flush)."""

    cold: bool = True

    def run(
        self, built: Built, inputs: Sequence[np.ndarray], reference: Sequence[np.ndarray], options: Any
    ) -> list[float]:
        from tensorir.ops.kernel import scratch_arrays
        from tensorir.runtime.jit import set_num_threads

        if options.threads is not None:
            set_num_threads(options.threads)
        ins, outs = kernel_arrays(built, inputs)
        call = built.kernel.bind(*ins, *outs, *scratch_arrays(built.func))
        for _ in range(max(1, options.warmup)):
            call()
        if options.check:
            check_outputs(outs, reference, options)
        if self.cold:
            activations = [a for k, a in enumerate(ins) if k not in built.const_args]
            return cold_timings(call, activations, options.repeat)
        return warm_timings(call, options.repeat, options.number or calls_for(call, options.min_repeat_s))


_flush_buffer: list[np.ndarray] = []


def cold_timings(call: Any, activations: Sequence[np.ndarray], repeat: int) -> list[float]:
    """Seconds of `repeat` single calls, each after evicting the caches (rewriting
    FLUSH_BYTES) and reading the activations back in, as their producer left them."""
    if not _flush_buffer:
        _flush_buffer.append(np.zeros(FLUSH_BYTES // 8))
    from tensorir.runtime.jit import wake_pool

    costs = []
    for _ in range(repeat):
        _flush_buffer[0] += 1.0
        for a in activations:
            a.sum()
        wake_pool()  # the flush outlasts the workers' spin: a model's next kernel meets them awake
        t0 = time.perf_counter()
        call()
        costs.append(time.perf_counter() - t0)
    return costs


def warm_timings(call: Any, repeat: int, number: int) -> list[float]:
    """Seconds per call of `repeat` timings of `number` calls back to back."""
    costs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            call()
        costs.append((time.perf_counter() - t0) / number)
    return costs


def calls_for(call: Any, min_s: float) -> int:
    """How many calls of `call` last about `min_s` (1 to 10 000)."""
    t0 = time.perf_counter()
    call()
    once = max(time.perf_counter() - t0, 1e-7)
    return max(1, min(10_000, math.ceil(min_s / once)))


@dataclasses.dataclass
class OpenCLRunner:
    """Time the kernel on the local OpenCL device of a profile (pyopencl): the program built
    once per source, 2 warm-up launches, then `repeat` launches timed by profiling events
    (device time, no host overhead); the first launch's outputs are the ones checked."""

    profile: str
    cold: bool = True  # rewrite flush_bytes on the device before each timed launch
    flush_bytes: int = GPU_FLUSH_BYTES

    def run(
        self, built: Built, inputs: Sequence[np.ndarray], reference: Sequence[np.ndarray], options: Any
    ) -> list[float]:
        from tensorir.ops.kernel import scratch_arrays
        from tensorir.runtime.opencl_device import run_gpu_kernel

        ins, outs = kernel_arrays(built, inputs)
        arrays = [*ins, *outs, *scratch_arrays(built.func)]
        flush = self.flush_bytes if self.cold else 0
        got, info = run_gpu_kernel(built.kernel, arrays, self.profile, options.repeat, flush)
        if options.check:
            check_outputs(got[len(ins) : len(ins) + len(outs)], reference, options)
        return list(info["times_s"])


def runner_for(target: Target, options: Any) -> Runner:
    """The runner of `target`'s kind, set up from the MeasureOptions (the RPC runner when
    they name rpc servers: autotune/rpc_runner.py; the ADB runner when they name an adb
    serial: autotune/adb_runner.py)."""
    if getattr(options, "adb", ""):
        from autotune.adb_runner import ADB, ADBRunner

        return ADBRunner(ADB(options.adb, options.adb_path))
    if getattr(options, "rpc", ()):
        from autotune.rpc_runner import RPCRunner

        return RPCRunner(tuple(options.rpc), options.rpc_token)
    if target.kind == "opencl":
        gpu = target.device_profile().kind == "gpu"  # PoCL runs on this CPU: its caches
        return OpenCLRunner(target.profile or "opencl", options.cold, GPU_FLUSH_BYTES if gpu else FLUSH_BYTES)
    return CpuRunner(cold=options.cold)


def timing_of(options: Any) -> str:
    """What the runners' timings are, for the records: "cold" or "warm" (database.TIMINGS)."""
    return "cold" if getattr(options, "cold", True) else "warm"
