"""A compiled model loaded into this process (host artifacts) through its C entry points.

mod = tensorir.load("build/")        # or tensorir.compile(model) for a fresh one
mod.set_num_threads(2)
outs = mod.run({"input": x})         # list of arrays in graph output order
times = mod.profile({"input": x})    # per-kernel seconds
"""

from __future__ import annotations

import ctypes
import functools
import json
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tensorir.errors import InputError, TirError
from tensorir.graph.types import np_dtype
from tensorir.runtime.lengths import model_outputs, trim


def check_feeds(
    specs: Sequence[Mapping[str, Any]], inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray]
) -> list[np.ndarray]:
    """Inputs (by name, or in order) as contiguous arrays matching the manifest's specs."""
    names = [t["name"] for t in specs]
    if not isinstance(inputs, Mapping):
        inputs = dict(zip(names, inputs, strict=False))
    unknown = sorted(set(inputs) - set(names))
    if unknown:
        raise InputError(f"unknown input {unknown[0]!r}; the model's inputs are {names}")
    feeds = []
    for t in specs:
        name, dtype = t["name"], np_dtype(t["dtype"])
        if name not in inputs:
            raise InputError(f"missing input {name!r}; the model's inputs are {names}")
        a = np.asarray(inputs[name])
        if list(a.shape) != t["shape"]:
            raise InputError(f"input {name!r} has shape {list(a.shape)}, the model expects {t['shape']}")
        if a.dtype != dtype and not np.can_cast(a.dtype, dtype, "same_kind"):
            raise InputError(f"input {name!r} has dtype {a.dtype}, the model expects {t['dtype']}")
        feeds.append(np.ascontiguousarray(a, dtype=dtype))
    return feeds


def load_host_manifest(directory: Path, hint: str = "") -> dict[str, Any]:
    """The manifest of a compiled folder whose library runs on this machine (a TirError when
    the folder holds none, or a library for another architecture; `hint` ends that line)."""
    from tensorir.target import host_target

    path = directory / "manifest.json"
    if not path.exists():
        raise TirError(f"{directory}: not a compiled model (no manifest.json)")
    manifest = json.loads(path.read_text())
    triple = manifest["triple"]
    if triple.split("-")[0] != host_target().arch:
        where = f"{directory}: built for {manifest['target']} ({triple})"
        raise TirError(f"{where}; run it on that device {hint}".rstrip())
    return manifest


class Module:
    """A loaded model library: run, profile, export."""

    def __init__(self, directory: str | Path) -> None:
        self.dir = Path(directory)
        qemu = "(tir run DIR runs linux-arm64 builds under qemu-aarch64)"
        self.manifest = load_host_manifest(self.dir, qemu)
        self.lib = ctypes.CDLL(str((self.dir / self.manifest["library"]).resolve()))
        self._declare()
        weights = self.manifest.get("weights_file")
        arg = str(self.dir / weights).encode() if weights else None
        self.handle = self.lib.tir_create(arg)
        if not self.handle:
            raise TirError(f"{self.dir}: tir_create failed (cannot read {weights})")
        self.inputs = self.manifest["inputs"]
        self.buffers = self.manifest["outputs"]  # every output buffer, length companions too
        self.outputs = model_outputs(self.buffers)

    def _declare(self) -> None:
        lib = self.lib
        lib.tir_create.restype = ctypes.c_void_p
        lib.tir_create.argtypes = [ctypes.c_char_p]
        lib.tir_destroy.argtypes = [ctypes.c_void_p]
        lib.tir_run.restype = ctypes.c_int32
        lib.tir_run.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        lib.tir_set_num_threads.argtypes = [ctypes.c_int32]
        lib.tir_get_num_threads.restype = ctypes.c_int32
        lib.tir_workspace.restype = ctypes.c_void_p
        lib.tir_workspace.argtypes = [ctypes.c_void_p]
        lib.tir_weights.restype = ctypes.c_void_p
        lib.tir_weights.argtypes = [ctypes.c_void_p]

    def __del__(self) -> None:
        handle = getattr(self, "handle", None)
        if handle:
            self.lib.tir_destroy(handle)
            self.handle = None

    # ---- running --------------------------------------------------------------------
    def set_num_threads(self, n: int) -> None:
        self.lib.tir_set_num_threads(int(n))

    def _feeds(self, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray]) -> list[np.ndarray]:
        return check_feeds(self.inputs, inputs)

    def _pointers(self, arrays: Sequence[np.ndarray]) -> ctypes.Array:
        return (ctypes.c_void_p * max(len(arrays), 1))(*[a.ctypes.data for a in arrays])

    def run(self, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray]) -> list[np.ndarray]:
        feeds = self._feeds(inputs)
        outs = self._out_buffers()
        rc = self.lib.tir_run(self.handle, self._pointers(feeds), self._pointers(outs))
        if rc != 0:
            raise TirError(f"tir_run returned {rc}")
        return trim(self.buffers, outs)

    def _out_buffers(self) -> list[np.ndarray]:
        return [np.empty(t["shape"], np_dtype(t["dtype"])) for t in self.buffers]

    def bind(self, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray]):
        """Check inputs once; the returned function runs the model on them (for timing)."""
        feeds = self._feeds(inputs)
        outs = self._out_buffers()
        ins, outp = self._pointers(feeds), self._pointers(outs)
        keep = (feeds, outs)

        def call() -> list[np.ndarray]:
            self.lib.tir_run(self.handle, ins, outp)
            return trim(self.buffers, keep[1])

        return call

    # ---- profiling ------------------------------------------------------------------
    def kernel_calls(self, inputs: Mapping[str, np.ndarray]) -> tuple[list[Callable[[], Any]], dict]:
        """(one call per kernel of the manifest, in model order, over the model's own memory;
        the base addresses of its arguments by kind), after one run on `inputs`. The calls
        hold the feeds and outputs they point into."""
        feeds = self._feeds(inputs)
        outs = self._out_buffers()
        self.run(dict(zip([t["name"] for t in self.inputs], feeds, strict=True)))
        bases = {
            "input": [a.ctypes.data for a in feeds],
            "output": [a.ctypes.data for a in outs],
            "workspace": self.lib.tir_workspace(self.handle),
            "weight": self.lib.tir_weights(self.handle),
            "prepared": self._prepared(),
        }
        calls = []
        for k in self.manifest["kernels"]:
            fn = getattr(self.lib, k["symbol"])
            ptrs = [self._address(bases, kind, i) for kind, i in k["args"]]
            fn.argtypes = [ctypes.c_void_p] * len(ptrs)
            calls.append(functools.partial(fn, *ptrs))
        for call in calls:  # the buffers the pointers lead into live as long as any call
            call.kept = (feeds, outs)  # type: ignore[attr-defined]
        return calls, bases

    def profile(self, inputs: Mapping[str, np.ndarray], repeat: int = 10) -> list[dict[str, Any]]:
        """Median seconds of every kernel over `repeat` passes through the model: each pass
        calls the kernels one by one in model order over the model's own memory, so a kernel
        meets the caches its neighbours leave it (the times add up to a run)."""
        calls, _ = self.kernel_calls(inputs)
        times = np.zeros((repeat, len(calls)))
        for r in range(repeat):
            for j, call in enumerate(calls):
                t0 = time.perf_counter()
                call()
                times[r, j] = time.perf_counter() - t0
        med = np.median(times, axis=0)
        return [
            {"symbol": k["symbol"], "op": k["op"], "node": k.get("node", ""), "seconds": float(s)}
            for k, s in zip(self.manifest["kernels"], med, strict=True)
        ]

    def _prepared(self) -> int | None:
        """The prepared-weights block (None: the plan prepares nothing, or a library from
        before tir_prepared)."""
        if not self.manifest.get("prepared_bytes"):
            return None
        fn = self.lib.tir_prepared
        fn.restype, fn.argtypes = ctypes.c_void_p, [ctypes.c_void_p]
        return fn(self.handle)

    @staticmethod
    def _address(bases: dict[str, Any], kind: str, index: int) -> int:
        if kind in ("input", "output"):
            return bases[kind][index]
        return bases[kind] + index

    # ---- files ----------------------------------------------------------------------
    def export(self, out: str | Path) -> Path:
        return export_folder(self.dir, out)


def export_folder(src: Path, out: str | Path) -> Path:
    """Copy a compiled folder (library, header, manifest, weights) to `out`."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file():
            shutil.copy2(f, out / f.name)
    return out


def load(directory: str | Path) -> Module:
    """Load a host artifact written by `tir compile` / `Module.export`."""
    return Module(directory)
