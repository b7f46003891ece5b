"""Code generation: loop IR -> LLVM IR -> native code (host JIT, ARM64 objects/libraries), and
loop IR -> OpenCL C. The LLVM entry points load llvmlite on first use, so the OpenCL renderer
and the GPU tuner's pure-Python part work on a machine without it."""

from typing import Any

_LLVM = ("build_module", "emit_assembly", "emit_object", "optimize")


def __getattr__(name: str) -> Any:
    if name in _LLVM:
        from tensorir.codegen import llvm

        return getattr(llvm, name)
    raise AttributeError(f"module 'tensorir.codegen' has no attribute {name!r}")


__all__ = list(_LLVM)
