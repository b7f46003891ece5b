"""One-time llvmlite initialization (llvmlite >= 0.44 initializes the core itself)."""

from __future__ import annotations

import functools


@functools.cache
def init_llvm() -> None:
    import llvmlite.binding as llvm

    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    llvm.initialize_native_asmparser()
