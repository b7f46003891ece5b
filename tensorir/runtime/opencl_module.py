"""An OpenCL model folder (manifest "backend": "opencl") loaded into this process.

    mod = OpenCLModule("build/")        # tir_create: finds the OpenCL device, builds or loads the program
    print(mod.device_name)              # "Portable Computing Language / pthread-..."
    outs = mod.run({"input": x})        # list of arrays in graph output order
    rows = mod.profile({"input": x})    # per step: symbol, op, seconds (OpenCL profiling events)

The program binary is cached in `config.cache_dir()/opencl/<model sha>.bin` (the folder may be
read-only); the runtime checks its header (source hash, device, driver) before using it.
A missing OpenCL driver, platform or device is a TirError with the runtime's one line.
"""

from __future__ import annotations

import ctypes
import hashlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tensorir import config
from tensorir.errors import TirError
from tensorir.graph.types import np_dtype
from tensorir.runtime.lengths import model_outputs, trim
from tensorir.runtime.module import check_feeds, export_folder, load_host_manifest

Feeds = Mapping[str, np.ndarray] | Sequence[np.ndarray]


def program_cache_path(manifest: Mapping[str, Any], library: Path) -> Path:
    """Where the compiled program binary of this model is cached."""
    key = manifest.get("model_sha256") or hashlib.sha256(str(library.resolve()).encode()).hexdigest()
    return config.cache_dir() / "opencl" / f"{key[:32]}.bin"


class OpenCLModule:
    """A loaded OpenCL model library: run, bind, profile, export (as runtime.module.Module)."""

    def __init__(self, directory: str | Path, program_cache: str | Path | None = "auto") -> None:
        self.dir = Path(directory)
        self.manifest = load_host_manifest(self.dir)
        lib_path = self.dir / self.manifest["library"]
        self.lib = ctypes.CDLL(str(lib_path.resolve()))
        self._declare()
        weights = self.manifest.get("weights_file")
        wpath = str((self.dir / weights).resolve()).encode() if weights else None
        if program_cache == "auto":
            program_cache = program_cache_path(self.manifest, lib_path)
            program_cache.parent.mkdir(parents=True, exist_ok=True)
        self.program_cache = Path(program_cache) if program_cache else None
        cpath = str(self.program_cache).encode() if self.program_cache else None
        self.handle = self.lib.tir_create(wpath, cpath)
        if not self.handle:
            raise TirError(f"{self.dir}: {self.last_error()}")
        self.inputs = self.manifest["inputs"]
        self.buffers = self.manifest["outputs"]  # every output buffer, length companions too
        self.outputs = model_outputs(self.buffers)

    def _declare(self) -> None:
        lib, p = self.lib, ctypes.c_void_p
        lib.tir_create.restype = p
        lib.tir_create.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
        lib.tir_destroy.argtypes = [p]
        lib.tir_run.restype = ctypes.c_int
        lib.tir_run.argtypes = [p, p, p]
        lib.tir_profile.restype = ctypes.c_int
        lib.tir_profile.argtypes = [p, p, p, ctypes.POINTER(ctypes.c_double)]
        lib.tir_last_error.restype = ctypes.c_char_p
        lib.tir_device_name.restype = ctypes.c_char_p
        lib.tir_device_name.argtypes = [p]
        lib.tir_program_from_cache.restype = ctypes.c_int
        lib.tir_program_from_cache.argtypes = [p]
        lib.tir_set_num_threads.argtypes = [ctypes.c_int32]
        lib.tir_get_num_threads.restype = ctypes.c_int32

    def __del__(self) -> None:
        handle = getattr(self, "handle", None)
        if handle:
            self.lib.tir_destroy(handle)
            self.handle = None

    def last_error(self) -> str:
        return (self.lib.tir_last_error() or b"").decode(errors="replace")

    @property
    def device_name(self) -> str:
        """'<platform> / <device>' the model runs on."""
        return self.lib.tir_device_name(self.handle).decode(errors="replace")

    @property
    def program_from_cache(self) -> bool:
        """True when tir_create took the program binary from the cache file."""
        return bool(self.lib.tir_program_from_cache(self.handle))

    # ---- running --------------------------------------------------------------------
    def set_num_threads(self, n: int) -> None:
        """Threads of the CPU steps' parallel loops."""
        self.lib.tir_set_num_threads(int(n))

    def _buffers(
        self, inputs: Feeds
    ) -> tuple[list[np.ndarray], list[np.ndarray], ctypes.Array, ctypes.Array]:
        feeds = check_feeds(self.inputs, inputs)
        outs = [np.empty(t["shape"], np_dtype(t["dtype"])) for t in self.buffers]
        return feeds, outs, _pointers(feeds), _pointers(outs)

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise TirError(f"{self.dir}: {what} failed: {self.last_error()}")

    def run(self, inputs: Feeds) -> list[np.ndarray]:
        _, outs, ins, outp = self._buffers(inputs)
        self._check(self.lib.tir_run(self.handle, ins, outp), "tir_run")
        return trim(self.buffers, outs)

    def bind(self, inputs: Feeds) -> Callable[[], list[np.ndarray]]:
        """Check inputs once; the returned function runs the model on them (for timing)."""
        feeds, outs, ins, outp = self._buffers(inputs)

        def call() -> list[np.ndarray]:
            self._check(self.lib.tir_run(self.handle, ins, outp), "tir_run")
            return trim(self.buffers, outs)

        call.keep = (feeds, ins, outp)  # type: ignore[attr-defined]
        return call

    def profile(self, inputs: Feeds, repeat: int = 10) -> list[dict[str, Any]]:
        """Median seconds of every step over `repeat` runs: GPU steps from OpenCL profiling
        events, CPU steps from the host clock (transfers excluded)."""
        _, _, ins, outp = self._buffers(inputs)
        steps = self.manifest["kernels"]
        self._check(self.lib.tir_run(self.handle, ins, outp), "tir_run")  # warm-up
        times = np.zeros((repeat, len(steps)))
        buf = (ctypes.c_double * max(len(steps), 1))()
        for r in range(repeat):
            self._check(self.lib.tir_profile(self.handle, ins, outp, buf), "tir_profile")
            times[r] = buf[: len(steps)]
        med = np.median(times, axis=0) * 1e-6
        return [
            {
                "symbol": k["symbol"],
                "op": k.get("op", ""),
                "node": k.get("node", ""),
                "seconds": float(s),
                "device": k.get("device", "gpu"),
            }
            for k, s in zip(steps, med, strict=True)
        ]

    # ---- files ----------------------------------------------------------------------
    def export(self, out: str | Path) -> Path:
        return export_folder(self.dir, out)


def _pointers(arrays: Sequence[np.ndarray]) -> ctypes.Array:
    return (ctypes.c_void_p * max(len(arrays), 1))(*[a.ctypes.data for a in arrays])
