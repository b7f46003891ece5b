"""The LLVM backend: CPU kernels as machine code (x86-64, aarch64) in one shared library.

codegen   loop IR -> LLVM IR -> one ELF object of every kernel (codegen/llvm.py; cached)
package   + the C entry module (codegen/entry.py) + weights, linked by ld.lld
          (compiler_link.py)
load      this machine's architecture: loaded in process (runtime/module.py);
          linux-arm64: run under qemu-aarch64 (runtime/qemu.py); android-arm64: an
          artifact to copy to the device (it cannot run here)
jit       one kernel through MCJIT (runtime/jit.py)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tensorir.backends.base import Backend

if TYPE_CHECKING:
    from tensorir.compiler import Build
    from tensorir.loop.ir import LoopFunc
    from tensorir.target import Target


class LLVMBackend(Backend):
    kind = "llvm"

    def codegen(self, build: Build, out: Path) -> Path:
        from tensorir.compiler_link import write_kernels_object

        return write_kernels_object(build, out)

    def package(self, build: Build, rendered: Path, out: Path, weights: str) -> Path:
        from tensorir.compiler_link import write_artifact

        return write_artifact(build, rendered, out, weights)

    def load(self, directory: Path, manifest: dict) -> Any:
        from tensorir.target import host_target

        arch = manifest["triple"].split("-")[0]
        if arch == host_target().arch:
            from tensorir.runtime.module import Module

            return Module(directory)
        if "android" in manifest["triple"]:
            from tensorir.runtime.artifact import Artifact

            return Artifact(directory)
        from tensorir.runtime.qemu import QemuModule

        return QemuModule(directory)

    def jit(self, func: LoopFunc, target: Target) -> Callable[..., None]:
        from tensorir.runtime.jit import compile_host

        return compile_host(func, target)
