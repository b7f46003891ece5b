"""Runners: measure a built candidate and return its timings, or say why it failed.

    runner = runner_for(get_target("host"))
    costs = runner.run(built, inputs, reference, options)   # seconds per call, `repeat` of them

A runner receives the task's inputs (the spec's input transforms not yet applied) and, when
`options.check`, the numpy reference outputs: the first run's outputs are checked against
them before anything is timed, and a mismatch raises `WrongResult`. The tuner, the cost
model and the database see only the timings, never which runner made them.

Host (`CpuRunner`): the JIT'd kernel called in this process; `number` calls per timing (so
one timing lasts `min_repeat_s`), optionally a cache flush before each timing. OpenCL
(`OpenCLRunner`): the rendered kernel on the profile's local device through pyopencl, timed
by profiling events.
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
    """(inputs with the spec's transforms applied, zeroed outputs) for one candidate."""
    from tensorir.graph.types import np_dtype
    from tensorir.ops.registry import get_op

    spec = built.spec
    ins = list(inputs)
    for k, fn in spec.transforms.items():
        ins[k] = np.ascontiguousarray(fn(ins[k]))
    out_types = get_op(spec.op).infer(list(spec.in_types), dict(spec.attrs))
    return ins, [np.zeros(t.shape, np_dtype(t.dtype)) for t in out_types]


def check_outputs(outs: Sequence[np.ndarray], reference: Sequence[np.ndarray], options: Any) -> None:
    """Raise WrongResult unless every output is within rtol * max |ref| + atol."""
    for got, want in zip(outs, reference, strict=True):
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
    """Time the JIT'd host kernel in this process."""

    flush_cache: bool = False
    _flush: np.ndarray | None = dataclasses.field(default=None, repr=False)

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
        number = options.number or _calls_for(call, options.min_repeat_s)
        costs = []
        for _ in range(options.repeat):
            self._flush_caches()
            t0 = time.perf_counter()
            for _ in range(number):
                call()
            costs.append((time.perf_counter() - t0) / number)
        return costs

    def _flush_caches(self) -> None:
        if not self.flush_cache:
            return
        if self._flush is None:
            self._flush = np.zeros(FLUSH_BYTES // 8)
        self._flush += 1.0


def _calls_for(call: Any, min_s: float) -> int:
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
    flush_cache: bool = False  # rewrite GPU_FLUSH_BYTES on the device before each timed launch

    def run(
        self, built: Built, inputs: Sequence[np.ndarray], reference: Sequence[np.ndarray], options: Any
    ) -> list[float]:
        from tensorir.ops.kernel import scratch_arrays
        from tensorir.runtime.opencl_device import run_gpu_kernel

        ins, outs = kernel_arrays(built, inputs)
        arrays = [*ins, *outs, *scratch_arrays(built.func)]
        flush = GPU_FLUSH_BYTES if self.flush_cache else 0
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
        gpu = target.device_profile().kind == "gpu"  # PoCL (a CPU device) stays warm by default
        cold = options.flush_cache or (gpu and getattr(options, "gpu_cold", True))
        return OpenCLRunner(target.profile or "opencl", cold)
    return CpuRunner(flush_cache=options.flush_cache)
