"""Builders: turn a tuning candidate (a task and a config) into what a runner needs.

    builder = builder_for(get_target("host"))
    built = builder.build(task, {"tile_co": 2})    # Built(func, spec, kernel)
    runner_for(target).run(built, inputs, ...)     # autotune/runners.py

As TVM's Builder: the tuner never looks inside `kernel`; only the runner of the same target
kind does. Host: the loop function JIT-compiled into this process (a callable); OpenCL: the
rendered kernel (source and launch geometry, built into a program by the runner). The
builder runs in the measuring worker process, so a build that crashes or hangs takes down
only the worker (autotune/measure.py restarts it).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

from autotune.task import Task
from tensorir.loop.ir import LoopFunc
from tensorir.ops.conv_algorithms import Specialized
from tensorir.target import Target


@dataclasses.dataclass
class Built:
    """One built candidate: the lowered loop function, the kernel's spec (op, input types and
    the input transforms a Winograd kernel needs), the runner-specific kernel, and which
    inputs are the model's constants (weights: cold in a model, unlike activations)."""

    func: LoopFunc
    spec: Specialized
    kernel: Any
    const_args: frozenset[int] = frozenset()


class Builder(Protocol):
    target: Target

    def build(self, task: Task, config: dict) -> Built: ...


@dataclasses.dataclass
class HostBuilder:
    """Candidates for this machine's CPU: LLVM JIT into the worker process."""

    target: Target

    def build(self, task: Task, config: dict) -> Built:
        from tensorir.runtime.jit import compile_host

        func, spec = task.build(config, self.target)
        return Built(func, spec, compile_host(func, self.target), task.const_args)


@dataclasses.dataclass
class OpenCLBuilder:
    """Candidates for an OpenCL device: the kernel's OpenCL C source and launch geometry
    (plan.GpuKernel), checked against the target's device profile."""

    target: Target

    def build(self, task: Task, config: dict) -> Built:
        from tensorir.codegen.opencl import render_opencl

        func, spec = task.build(config, self.target)
        return Built(func, spec, render_opencl(func, self.target.device_profile()), task.const_args)


def builder_for(target: Target, options: Any = None) -> Builder:
    """The builder of `target`'s kind; with rpc servers in the MeasureOptions, the RPC builder
    (a candidate that can travel: autotune/rpc_runner.py); with an adb serial, the ADB builder
    (an Android shared library: autotune/adb_runner.py)."""
    if getattr(options, "adb", ""):
        from autotune.adb_runner import ADBBuilder

        return ADBBuilder(target)
    if getattr(options, "rpc", ()):
        from autotune.rpc_runner import RPCBuilder

        return RPCBuilder(target)
    return OpenCLBuilder(target) if target.kind == "opencl" else HostBuilder(target)
