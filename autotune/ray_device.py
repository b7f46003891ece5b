"""What runs on a Ray cluster when tuning with `--ray`: candidate builds (tasks) and the device
actors that measure them. The driver side is autotune/ray_measure.py.

    meta, built = build_candidate.options(num_returns=2).remote(task, config, options)
    actor.run.remote(task, built, options)   # ("ran", costs) | ("error", why) | ("failed", why)

A build compiles a candidate into something that travels between nodes, which need not share
a filesystem: for a CPU the kernel linked into a shared library, as bytes
(rpc_runner.LibraryKernel; for --adb an Android library), for OpenCL the rendered kernel.
It goes through Ray's object store from the building node to the measuring one.

A device actor (`DeviceActor`) stands for one attached device: it is placed on the node that
offers the device's custom resource, `tir-device:<device key>` (`ray start --resources
'{"tir-device:x86_64-znver4-avx512": 1}'`; a node's own CPU is a device too), and measures
through the runner the target and options name (autotune/runners.py `runner_for`: the CPU,
OpenCL, an adb phone or `tir rpc serve` servers). In the CPU runner's place a shipped
library runs in a child process of the actor (`LibraryRunner`: the measuring child of `tir
rpc serve`, with the CPU runner's timings), so a candidate that crashes or hangs costs a
child, not the device actor. Its calls are served one at a time, so candidates of several
tuners never compete for the device.

Replies: "ran" with the timings; "error": the candidate's fault (a wrong result, a crash or
hang of its measuring child); "failed": the runner raised (a kernel the OpenCL driver
refuses, the device unreachable, adb or an rpc server gone, ...): an error result too, and
after several in a row the driver asks the actor to `check` its device, then restarts or
drops an actor whose device does not answer.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from autotune.builders import Builder, Built
from autotune.measure import MeasureOptions, _reason, candidate_features_of, device_profile_of
from autotune.rpc_runner import LibraryKernel
from autotune.runners import CpuRunner, Runner, WrongResult, check_outputs, kernel_arrays, runner_for
from autotune.task import Task
from tensorir.target import Target, get_target

RESOURCE_PREFIX = "tir-device:"
NAMESPACE = "tir"
TASKS_KEPT = 4  # tasks whose inputs and reference outputs an actor keeps


def device_resource(device: str) -> str:
    """The Ray custom resource a node offers for each attached device of this key."""
    return f"{RESOURCE_PREFIX}{device}"


def shipping_builder(target: Target, options: MeasureOptions) -> Builder:
    """A builder whose candidates travel as data: an Android library with --adb, else the
    RPC builder's (a CPU: a shared library's bytes; OpenCL: the rendered kernel)."""
    if options.adb:
        from autotune.adb_runner import ADBBuilder

        return ADBBuilder(target)
    from autotune.rpc_runner import RPCBuilder

    return RPCBuilder(target)


def build_candidate(
    task: Task, config: dict, options: MeasureOptions, target: Target | None = None
) -> tuple[tuple, Built | None]:
    """((status, build seconds, features or None, reason), the Built or None) for one config,
    compiled for `target` (the tuner's own resolved target: "host" on a build node of another
    CPU would be that node's CPU; default options.target resolved here). A build that raises
    is ("error", ...) here, never an exception: Ray retries only what killed the process (a
    crash, the node lost)."""
    target = target or get_target(options.target)
    t0 = time.perf_counter()
    try:
        built = shipping_builder(target, options).build(task, config)
    except Exception as e:
        return ("error", 0.0, None, f"build failed: {_reason(e)}"), None
    build_s = time.perf_counter() - t0
    try:
        features = candidate_features_of(task, config, target, device_profile_of(target))
    except Exception:  # a candidate without features is still measured
        features = None
    return ("built", build_s, features, ""), built


def features_chunk(task: Task, configs: list[dict], target: Target) -> list[np.ndarray | None]:
    """Cost-model features of configs (None where one fails to lower)."""
    profile = device_profile_of(target)
    out: list[np.ndarray | None] = []
    for cfg in configs:
        try:
            out.append(candidate_features_of(task, cfg, target, profile))
        except Exception:
            out.append(None)
    return out


class CandidateFailed(Exception):
    """The candidate crashed or hung its measuring process, or raised there."""


@dataclasses.dataclass
class LibraryRunner:
    """The CPU runner for a shipped candidate (a shared library's bytes): loaded and timed in
    a child process of the actor (rpc_exec.ChildRunner, as `tir rpc serve` measures), with
    the CPU runner's warm-up, cold or warm timings and checks, so a candidate that crashes
    or hangs costs a child, not the actor, and the child is replaced after
    rpc_exec.MAX_LIBRARIES libraries (each may keep a parked thread pool)."""

    child: Any = None

    def run(
        self, built: Built, inputs: Sequence[np.ndarray], reference: Sequence[np.ndarray], options: Any
    ) -> list[float]:
        from autotune.rpc import RPCError
        from autotune.rpc_exec import ChildRunner
        from tensorir.ops.kernel import scratch_arrays

        ins, outs = kernel_arrays(built, inputs)
        kernel: LibraryKernel = built.kernel
        job = {
            "kind": "library",
            "symbol": kernel.symbol,
            "library": kernel.data,
            "arrays": [*ins, *outs, *scratch_arrays(built.func)],
            "outputs": list(range(len(ins), len(ins) + len(outs))),
            "repeat": options.repeat,
            "warmup": options.warmup,
            "number": options.number or 0,
            "threads": options.threads or 0,
            "min_repeat_s": options.min_repeat_s,
            "cold": bool(options.cold),
            "activations": [k for k in range(len(ins)) if k not in built.const_args],
        }
        if self.child is None:
            self.child = ChildRunner("host")
        try:
            times, got = self.child.run(job, timeout_s=options.run_timeout_s)
        except RPCError as e:
            raise CandidateFailed(str(e)) from None
        if options.check:
            check_outputs(got, reference, options)
        return [float(t) for t in times]


class DeviceActor:
    """One attached device: measures built candidates through its runner, one at a time."""

    def __init__(self, device: str) -> None:
        os.environ.setdefault("TIR_DEBUG", "0")
        self.device = device
        self.tasks: collections.OrderedDict[tuple, tuple[list, list]] = collections.OrderedDict()
        self.runners: dict[tuple, Runner] = {}
        self.library_runner = LibraryRunner()  # in CpuRunner's place for shipped libraries
        self.measured = 0

    def info(self) -> dict:
        import ray

        node = ray.get_runtime_context().get_node_id()
        return {"device": self.device, "node": node, "pid": os.getpid(), "measured": self.measured}

    def check(self, options: MeasureOptions) -> str:
        """Why this actor's device cannot measure with `options` ("" when it can): an adb
        phone must answer on this node and be arm64 Android (the tuner's machine may not see
        it); of rpc servers, one must answer. The CPU and a local OpenCL device are here."""
        try:
            if options.adb:
                from autotune.adb_runner import ADB, check_device

                check_device(ADB(options.adb, options.adb_path))
            elif options.rpc:
                self._ping(options)
        except Exception as e:
            return _reason(e)
        return ""

    def _ping(self, options: MeasureOptions) -> None:
        from autotune.rpc import server_info

        errors = []
        for server in options.rpc:
            try:
                server_info(server, options.rpc_token, timeout_s=10.0)
                return
            except Exception as e:
                errors.append(e)
        raise errors[-1]

    def run(self, task: Task, built: Built, options: MeasureOptions) -> tuple:
        """("ran", timings) | ("error", why: the candidate's fault) | ("failed", why: the runner
        or the device failed)."""
        try:
            inputs, reference = self._task_data(task, options.check)
            runner = self._runner(options)
            if isinstance(built.kernel, LibraryKernel) and isinstance(runner, CpuRunner):
                runner = self.library_runner
        except Exception as e:
            return ("failed", f"the device actor could not prepare the run: {_reason(e)}")
        try:
            costs = runner.run(built, inputs, reference, options)
        except (WrongResult, CandidateFailed) as e:
            return ("error", str(e))
        except Exception as e:
            return ("failed", _reason(e))
        self.measured += 1
        return ("ran", [float(c) for c in costs])

    def _task_data(self, task: Task, check: bool) -> tuple[list, list]:
        """The task's measuring inputs (seed 0, as the process-pool workers) and reference."""
        key = (task.key, check)
        if key not in self.tasks:
            inputs = task.random_inputs(seed=0)
            self.tasks[key] = (inputs, task.reference(inputs) if check else [])
            while len(self.tasks) > TASKS_KEPT:
                self.tasks.popitem(last=False)
        self.tasks.move_to_end(key)
        return self.tasks[key]

    def _runner(self, options: MeasureOptions) -> Runner:
        key = (options.target, options.cold, options.rpc, options.rpc_token, options.adb, options.adb_path)
        if key not in self.runners:
            self.runners[key] = runner_for(get_target(options.target), options)
        return self.runners[key]
