"""What a backend declares: its stages after lowering (see tensorir/backends/__init__.py).

A backend is stateless; the compile's data (a `compiler.Build`) passes through its stages.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tensorir.compiler import Build
    from tensorir.loop.ir import LoopFunc
    from tensorir.target import Target


class Backend(ABC):
    kind: str  # the Target.kind it compiles for

    @abstractmethod
    def codegen(self, build: Build, out: Path) -> Any:
        """Render every kernel of `build` (machine code, kernel source); what `package` links.
        `out` is the folder being written (for intermediate files)."""

    @abstractmethod
    def package(self, build: Build, rendered: Any, out: Path, weights: str) -> Path:
        """Write the deployable folder: library, C header, manifest, weights if external."""

    @abstractmethod
    def load(self, directory: Path, manifest: dict) -> Any:
        """The compiled folder as a runnable module here, or a TirError saying where it runs."""

    @abstractmethod
    def jit(self, func: LoopFunc, target: Target) -> Callable[..., None]:
        """One kernel compiled and loaded into this process: call it with numpy arrays (the
        loop function's parameters in order); used by run_op and Strassen's leaf kernels."""
