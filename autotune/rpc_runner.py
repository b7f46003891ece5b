"""Measuring candidates on `tir rpc serve` servers: the RPC builder and runner.

    options = MeasureOptions(target="opencl:pocl", rpc=("board:9190",), rpc_token="SECRET")
    builder_for(target, options)   # RPCBuilder: something that can travel
    runner_for(target, options)    # RPCRunner: sends it, checks the outputs here

What travels: for an OpenCL target the rendered kernel (plan.GpuKernel.to_dict); for a CPU
the kernel linked into a small shared library (tensorir.codegen.link) that the server loads
with ctypes. With it go the task's inputs (transforms applied) as .npy, the shapes and dtypes
of the outputs and scratch (allocated by the server) and the timing settings; the outputs
come back and are checked against the reference here. Several servers take candidates in
turn; a server that cannot be reached is skipped for TIR_RPC_DOWN_S seconds (default 30; its
candidate is an error result) while another one is up.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from autotune.builders import Built
from autotune.rpc import RPCError, Unreachable, call, decode_array, encode_array, server_info
from autotune.runners import check_outputs, kernel_arrays
from autotune.task import Task
from tensorir import config
from tensorir.errors import TirError
from tensorir.target import Target


@dataclasses.dataclass(frozen=True)
class LibraryKernel:
    """A CPU candidate that can travel: a shared library's bytes and its kernel symbol."""

    symbol: str
    data: bytes


@dataclasses.dataclass
class RPCBuilder:
    """OpenCL: the rendered kernel (as OpenCLBuilder); CPU: a shared library of the kernel."""

    target: Target

    def build(self, task: Task, config: dict) -> Built:
        from autotune.builders import OpenCLBuilder

        if self.target.kind == "opencl":
            return OpenCLBuilder(self.target).build(task, config)
        func, spec = task.build(config, self.target)
        return Built(func, spec, library_kernel(func, self.target), task.const_args)


def library_kernel(func: Any, target: Target) -> LibraryKernel:
    from tensorir.codegen.link import build_shared_library
    from tensorir.codegen.llvm import symbol_name

    with tempfile.TemporaryDirectory(prefix="tir-rpc-build-") as tmp:
        lib = build_shared_library(func, target, Path(tmp) / "libcandidate.so")
        return LibraryKernel(symbol_name(func.name), lib.read_bytes())


@dataclasses.dataclass
class RPCRunner:
    """Send a built candidate to the next server that is up; its timings, outputs checked."""

    servers: tuple[str, ...]
    token: str
    _turn: int = 0
    _down: dict[str, float] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        self._turn = os.getpid() % len(self.servers)  # workers start on different servers

    def run(
        self, built: Built, inputs: Sequence[np.ndarray], reference: Sequence[np.ndarray], options: Any
    ) -> list[float]:
        from tensorir.ops.kernel import scratch_arrays

        ins, outs = kernel_arrays(built, inputs)
        header, payloads = request(built, ins, outs, scratch_arrays(built.func), options)
        server = self._next()
        try:
            reply, data = call(server, self.token, header, payloads, timeout_s=_client_timeout(options))
        except (Unreachable, TimeoutError) as e:
            self._down[server] = time.monotonic()
            raise RPCError(str(e)) from None
        got = [decode_array(d) for d in data]
        if options.check:
            check_outputs(got, reference, options)
        return [float(t) for t in reply["times_s"]]

    def _next(self) -> str:
        """The next server in turn, skipping those down in the last TIR_RPC_DOWN_S seconds
        (default 30; unless all are)."""
        now = time.monotonic()
        for _ in range(len(self.servers)):
            server = self.servers[self._turn % len(self.servers)]
            self._turn += 1
            down_s = config.rpc_down_s()
            if now - self._down.get(server, -down_s) >= down_s:
                return server
        return self.servers[(self._turn - 1) % len(self.servers)]


def _client_timeout(options: Any) -> float:
    """Below the Measurer's run time-out, so a silent server is an RPC error, not a killed worker."""
    return max(1.0, 0.9 * options.run_timeout_s)


def request(
    built: Built,
    ins: Sequence[np.ndarray],
    outs: Sequence[np.ndarray],
    scratch: Sequence[np.ndarray],
    options: Any,
) -> tuple[dict, list[bytes]]:
    """The run request's header and payloads for one candidate."""
    args: list[dict] = [{"role": "in"} for _ in ins]
    for role, arrays in (("out", outs), ("scratch", scratch)):
        args += [{"role": role, "shape": list(a.shape), "dtype": a.dtype.name} for a in arrays]
    header: dict[str, Any] = {
        "op": "run",
        "args": args,
        "repeat": options.repeat,
        "warmup": options.warmup,
        "number": options.number,
        "threads": options.threads or 0,
        "min_repeat_s": options.min_repeat_s,
        "timeout_s": max(1.0, 0.8 * options.run_timeout_s),
        "cold": bool(options.cold),
        "activations": [k for k in range(len(ins)) if k not in built.const_args],
    }
    payloads = [encode_array(a) for a in ins]
    if isinstance(built.kernel, LibraryKernel):
        header |= {"kind": "library", "symbol": built.kernel.symbol}
        payloads.insert(0, built.kernel.data)
    else:
        header |= {"kind": "opencl", "kernel": built.kernel.to_dict()}
    return header, payloads


def remote_device(servers: Sequence[str], token: str, target: str, threads: int = 0) -> str:
    """The device key the servers measure on (all must answer and agree, and measure `target`);
    `-tN` appended for a fixed thread count. A TirError (one line) otherwise."""
    from autotune.device_keys import cpu_key
    from tensorir.target import host_target

    keys = {}
    for s in servers:
        try:
            info = server_info(s, token, timeout_s=30.0)
        except TimeoutError as e:
            raise TirError(str(e)) from None
        if info.get("target") != target:
            raise TirError(f"rpc server {s} measures {info.get('target')!r}, not {target!r} (its --device)")
        if target == "host" and info.get("cpu_key") != cpu_key(host_target()):
            raise TirError(
                f"rpc server {s} is a {info.get('cpu_key')} CPU and this machine a {cpu_key(host_target())}; "
                "candidates are built for this machine's CPU, so tune for a CPU of the same kind"
            )
        keys[s] = str(info.get("device_key"))
    if len(set(keys.values())) > 1:
        raise TirError(f"the rpc servers measure different devices: {keys}")
    key = next(iter(keys.values()))
    return f"{key}-t{threads}" if threads else key
