"""Code generation: loop IR -> LLVM IR -> native code (host JIT, ARM64 objects/libraries)."""

from tensorir.codegen.llvm import build_module, emit_assembly, emit_object, optimize

__all__ = ["build_module", "emit_assembly", "emit_object", "optimize"]
