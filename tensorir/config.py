"""Every environment knob tensorir reads, in one place.

TIR_DEBUG      0 (default) quiet; 1 stage names and times, tracebacks on errors;
               2 also the IR after every stage.
TIR_DUMP_DIR   when set, every stage's IR is written to files in this folder.
TIR_CACHE_DIR  cache: optimized loop kernels, compiled kernel objects, qemu drivers, stub libc
               (default: user cache dir).
TIR_LAYOUT     0 turns off the NCHW -> NCHW[x]c layout pass (default on).
TIR_FUSE_DWPW  0 / 1: depthwise conv + the 1x1 conv after it as one kernel on CPUs
               (passes/fuse_dwpw.py; default on).
TIR_FUSE_EXPAND 0 / 1: with TIR_FUSE_DWPW, the 1x1 expand in front of it joins that kernel:
               a whole inverted-residual block per kernel (passes/fuse_dwpw.py; default on).
TIR_HUGE_WORKSPACE 0: the workspace stays 64-byte aligned and unadvised even from 2 MiB on
               (codegen/entry.py; default on: huge-page aligned, MADV_HUGEPAGE).
TIR_DUMP_DIR also receives every OpenCL kernel as opencl/<kernel>.cl.
TIR_OPENCL_PLATFORM  a case-insensitive substring of the OpenCL platform name: only those
               platforms are used (default: the first GPU of any platform, else any device).
               Read by devices.py and by compiled OpenCL libraries (runtime/opencl/).
TIR_OPENCL_LIBRARY   the OpenCL library a compiled OpenCL model dlopens (default
               libOpenCL.so, then libOpenCL.so.1, then the Android vendor paths).
TIR_IDLE_PROBE  auto (default): `tir tune` asks whether the cores are idle, and hand data to
               each other at their usual pace, before it trusts a multi-thread timing of the
               whole model (autotune/idle.py); idle: it assumes they
               are (no probe); busy: it assumes a core is busy. The test suite sets idle, so
               tuning runs in child processes do not depend on the test machine's load.
TIR_RPC_DOWN_S  seconds a `tir tune --rpc` server that could not be reached is skipped before
               it is tried again (default 30).
"""

from __future__ import annotations

import os
from pathlib import Path


def debug_level() -> int:
    try:
        return int(os.environ.get("TIR_DEBUG", "0") or 0)
    except ValueError:
        return 1


def dump_dir() -> Path | None:
    d = os.environ.get("TIR_DUMP_DIR")
    return Path(d) if d else None


def cache_dir() -> Path:
    d = os.environ.get("TIR_CACHE_DIR")
    if d:
        return Path(d)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "tensorir"


def write_cache_file(path: Path, data: bytes) -> None:
    """`data` into the cache file `path`, atomically: written beside it under this process's
    name, then renamed, so a concurrent compile never reads a partial file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def _switch(name: str) -> bool:
    """An on/off knob that is on unless set to 0, false, off or empty."""
    return os.environ.get(name, "1").strip().lower() not in ("0", "false", "off", "")


IDLE_PROBE_MODES = ("auto", "idle", "busy")


def idle_probe_mode() -> str:
    """TIR_IDLE_PROBE: auto, idle or busy (an unknown value: auto)."""
    mode = os.environ.get("TIR_IDLE_PROBE", "auto").strip().lower()
    return mode if mode in IDLE_PROBE_MODES else "auto"


def layout_enabled() -> bool:
    return _switch("TIR_LAYOUT")


def fuse_dwpw_enabled() -> bool:
    return _switch("TIR_FUSE_DWPW")


def fuse_expand_enabled() -> bool:
    return _switch("TIR_FUSE_EXPAND")


def merge_rows_enabled() -> bool:
    """TIR_MERGE_ROWS=0: 1x1 convs keep their rows (ops/conv_rows.py)."""
    return _switch("TIR_MERGE_ROWS")


def huge_workspace_enabled() -> bool:
    """TIR_HUGE_WORKSPACE=0: no huge-page alignment and advice for the workspace."""
    return _switch("TIR_HUGE_WORKSPACE")


def opencl_platform() -> str:
    """TIR_OPENCL_PLATFORM ("" : any platform)."""
    return os.environ.get("TIR_OPENCL_PLATFORM", "")


def rpc_down_s() -> float:
    """TIR_RPC_DOWN_S (default 30 seconds)."""
    return float(os.environ.get("TIR_RPC_DOWN_S", "30") or 30)
