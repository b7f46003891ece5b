"""Backends: one object per `Target.kind` that owns everything after lowering.

    backend = get_backend(target)              # "llvm" -> LLVMBackend, "opencl" -> OpenCLBackend
    build = pipeline.compile_model(model, target)
    objects = backend.codegen(build)           # render every kernel (LLVM objects / OpenCL C)
    backend.package(build, objects, out)       # one shared library + header + manifest
    mod = backend.load(out)                    # run it here (or a clear error where it cannot)
    run = backend.jit(loop_func, target)       # one kernel, callable on numpy arrays

The compiler hands a backend backend-neutral data (tensorir/plan.py and loop IR) and never
imports a code generator itself; a new backend is one more module registered below.
"""

from __future__ import annotations

from tensorir.backends.base import Backend
from tensorir.errors import TirError
from tensorir.target import Target, get_target

__all__ = ["Backend", "backend_for_manifest", "get_backend"]


def _registry() -> dict[str, type[Backend]]:
    from tensorir.backends.llvm import LLVMBackend

    kinds: dict[str, type[Backend]] = {"llvm": LLVMBackend}
    try:
        from tensorir.backends.opencl import OpenCLBackend
    except ImportError:  # the OpenCL backend is optional until it lands
        return kinds
    kinds["opencl"] = OpenCLBackend
    return kinds


def get_backend(target: Target | str) -> Backend:
    """The backend that compiles for `target` (chosen by its kind)."""
    kind = get_target(target).kind
    kinds = _registry()
    if kind not in kinds:
        raise TirError(f"no backend for target kind {kind!r}; known kinds: {', '.join(kinds)}")
    return kinds[kind]()


def backend_for_manifest(manifest: dict) -> Backend:
    """The backend that wrote a compiled folder (its manifest's "backend", default llvm)."""
    kind = manifest.get("backend", "llvm")
    kinds = _registry()
    if kind not in kinds:
        raise TirError(f"compiled folder of backend {kind!r}, which this tensorir does not have")
    return kinds[kind]()
