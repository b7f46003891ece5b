"""The RPC server's measuring child process: runs one candidate at a time, with a time-out.

    child = ChildRunner("pocl")
    times, outs = child.run(job, timeout_s=20)     # RPCError: crashed / timed out / failed

A job is already validated by the server (autotune/rpc_server.py): its kind ("opencl": a
GpuKernel; "library": a shared library's bytes and its kernel symbol), every argument array
in call order, which of them are outputs, and the timing settings. A candidate that crashes
or hangs takes down only the child: it is killed and restarted, the server goes on. Loaded
libraries are never unloaded (a kernel's thread pool may still be parked in them): the child
is restarted after MAX_LIBRARIES of them.
"""

from __future__ import annotations

import ctypes
import functools
import multiprocessing as mp
import os
import tempfile
import threading
import traceback
from multiprocessing.connection import Connection
from pathlib import Path

import numpy as np

from autotune.rpc import RPCError
from autotune.runners import FLUSH_BYTES, GPU_FLUSH_BYTES, calls_for, cold_timings, warm_timings

MAX_LIBRARIES = 100


class ChildRunner:
    """One measuring child process at a time (started at once, restarted after a failure);
    `run` calls are serialized so candidates never compete for the device."""

    def __init__(self, profile: str) -> None:
        self.profile = profile
        self.ctx = mp.get_context("spawn")
        self.lock = threading.Lock()
        self.libraries = 0
        self._start()

    def _start(self) -> None:
        self.conn, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(target=_child_main, args=(child, self.profile), daemon=True)
        self.proc.start()
        child.close()
        self.libraries = 0

    def _restart(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)
        self.conn.close()
        self._start()

    def close(self) -> None:
        with self.lock:
            if self.proc.is_alive():
                self.proc.kill()
            self.proc.join(5)
            self.conn.close()

    def run(self, job: dict, timeout_s: float) -> tuple[list[float], list[np.ndarray]]:
        """(timings in seconds, the output arrays) of one job."""
        with self.lock:
            if self.libraries >= MAX_LIBRARIES:
                self._restart()
            self.libraries += job["kind"] == "library"
            try:
                self.conn.send(job)
                if not self.conn.poll(timeout_s):
                    self._restart()
                    raise RPCError(f"the candidate timed out after {timeout_s:.0f} s")
                reply = self.conn.recv()
            except (EOFError, OSError):
                self.proc.join(2)
                code = self.proc.exitcode
                self._restart()
                raise RPCError(f"the candidate crashed the measuring process (exit code {code})") from None
        if reply[0] != "ok":
            raise RPCError(reply[1])
        return reply[1], reply[2]


def _child_main(conn: Connection, profile: str) -> None:
    os.environ.setdefault("TIR_DEBUG", "0")
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        try:
            run = run_opencl if job["kind"] == "opencl" else run_library
            times, arrays = run(job, profile)
            reply: tuple = ("ok", times, [arrays[k] for k in job["outputs"]])
        except Exception as e:  # a failing candidate is an error reply, not a dead child
            reply = ("error", _reason(e))
        conn.send(reply)


def _reason(e: BaseException) -> str:
    if os.environ.get("TIR_DEBUG", "0") not in ("", "0"):
        return "".join(traceback.format_exception(e)).strip()
    return f"{type(e).__name__}: {e}".splitlines()[0][:500]


def run_opencl(job: dict, profile: str) -> tuple[list[float], list[np.ndarray]]:
    """The kernel on the profile's local OpenCL device: profiling-event timings (cold: a
    buffer larger than the device's caches rewritten before each timed launch)."""
    from tensorir.devices import get_profile
    from tensorir.runtime.opencl_device import run_gpu_kernel

    flush = 0
    if job.get("cold"):
        flush = GPU_FLUSH_BYTES if profile == "opencl" or get_profile(profile).kind == "gpu" else FLUSH_BYTES
    outs, info = run_gpu_kernel(job["kernel"], job["arrays"], profile, job["repeat"], flush)
    return list(info["times_s"]), outs


def run_library(job: dict, profile: str) -> tuple[list[float], list[np.ndarray]]:
    """The kernel symbol of a shared library, called through ctypes on 64-byte aligned copies
    of the arrays: warm-up, then `repeat` timings as the in-process CPU runner takes them
    (cold: one call after a flush each; warm: `number` calls, from min_repeat_s when not given)."""
    arrays = [aligned_copy(a) for a in job["arrays"]]
    fd, path = tempfile.mkstemp(prefix="tir-rpc-", suffix=".so")
    try:
        os.write(fd, job["library"])
        os.close(fd)
        lib = ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
    finally:
        Path(path).unlink()
    fn = getattr(lib, job["symbol"])
    fn.restype, fn.argtypes = None, [ctypes.c_void_p] * len(arrays)
    set_threads = getattr(lib, "tir_set_num_threads", None)
    if set_threads is not None and job["threads"]:
        set_threads(ctypes.c_int32(job["threads"]))
    call = functools.partial(fn, *(a.ctypes.data for a in arrays))
    for _ in range(max(1, job["warmup"])):
        call()
    outs = [a.copy() for a in arrays]
    if job.get("cold"):
        activations = [arrays[k] for k in job.get("activations", ())]
        return cold_timings(call, activations, job["repeat"]), outs
    return warm_timings(call, job["repeat"], job["number"] or calls_for(call, job["min_repeat_s"])), outs


def aligned_copy(a: np.ndarray, align: int = 64) -> np.ndarray:
    raw = np.empty(a.nbytes + align, np.uint8)
    start = -raw.ctypes.data % align
    out = raw[start : start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out
