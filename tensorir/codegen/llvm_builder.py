"""A small LLVM IR text builder: module context (declarations, metadata, helper functions)
and a function builder (SSA temporaries, blocks, entry-block allocas).

IR is emitted as text with opaque pointers; llvmlite parses it. Text keeps every flag,
attribute and metadata node in plain sight (and in `TIR_DEBUG` dumps).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tensorir.target import Target


@dataclass(frozen=True)
class Val:
    """An emitted value: an SSA name or literal, with its loop-IR dtype and lane count."""

    ref: str
    dtype: str
    lanes: int = 1


class ModuleContext:
    """Everything module-level that function emitters add to as they go."""

    def __init__(self, target: Target, name: str = "tir"):
        self.target = target
        self.name = name
        self.decls: dict[str, str] = {}
        self.functions: list[str] = []
        self.metadata: list[str] = []
        self.helpers: set[str] = set()
        self.symbols: set[str] = set()
        self._md = 0

    # ---- declarations / helper functions --------------------------------------------
    def declare(self, name: str, decl: str) -> str:
        """Add `declare ...` once; returns '@name'."""
        self.decls.setdefault(name, decl)
        return f"@{name}"

    def intrinsic(self, name: str, ret: str, args: list[str], attrs: str = "") -> str:
        return self.declare(name, f"declare {ret} @{name}({', '.join(args)}) {attrs}".rstrip())

    def helper(self, name: str, make: Callable[[], str]) -> str:
        """Define an internal helper function once (vmath functions); returns '@name'."""
        if name not in self.helpers:
            self.helpers.add(name)
            self.functions.append(make())
        return f"@{name}"

    def unique_symbol(self, base: str) -> str:
        name, k = base, 1
        while name in self.symbols:
            name, k = f"{base}_{k}", k + 1
        self.symbols.add(name)
        return name

    # ---- metadata ---------------------------------------------------------------------
    def md(self, body: str, distinct: bool = False) -> str:
        ref = f"!{self._md}"
        self._md += 1
        self.metadata.append(f"{ref} = {'distinct ' if distinct else ''}!{{{body}}}")
        return ref

    def loop_md(self, hints: list[str]) -> str:
        """A distinct self-referencing loop ID carrying `hints` (e.g. '!"llvm.loop.unroll.full"')."""
        ref = f"!{self._md}"
        self._md += 1
        parts = [ref] + [self.md(h) for h in hints]
        self.metadata.append(f"{ref} = distinct !{{{', '.join(parts)}}}")
        return ref

    # ---- attributes -------------------------------------------------------------------
    def fn_attrs(self) -> str:
        """Attributes every generated function carries (same set: inlining stays legal)."""
        t = self.target
        attrs = ["nounwind", '"no-builtins"', f'"target-cpu"="{t.cpu}"']
        if t.features:
            attrs.append(f'"target-features"="{t.features}"')
        if t.arch == "x86_64":
            attrs.append(f'"min-legal-vector-width"="{t.vector_bits}"')
            attrs.append(f'"prefer-vector-width"="{t.vector_bits}"')
        return " ".join(attrs)

    def text(self, datalayout: str) -> str:
        head = [f'; ModuleID = "{self.name}"', f'target datalayout = "{datalayout}"']
        head.append(f'target triple = "{self.target.triple}"')
        body = [*head, "", *self.decls.values(), "", *self.functions, "", *self.metadata]
        return "\n".join(body) + "\n"


class FuncBuilder:
    """Instruction emission for one function: temporaries, labels, the current block."""

    def __init__(self, ctx: ModuleContext):
        self.ctx = ctx
        self.lines: list[str] = []
        self.allocas: list[str] = []
        self._n = 0
        self.block = "entry"

    def tmp(self) -> str:
        self._n += 1
        return f"%t{self._n}"

    def label(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}{self._n}"

    def emit(self, line: str) -> None:
        self.lines.append("  " + line)

    def op(self, rhs: str) -> str:
        """Emit `%tN = rhs`; returns '%tN'."""
        t = self.tmp()
        self.emit(f"{t} = {rhs}")
        return t

    def alloca(self, ty: str, align: int) -> str:
        t = self.tmp()
        self.allocas.append(f"  {t} = alloca {ty}, align {align}")
        return t

    def start_block(self, label: str) -> None:
        self.lines.append(f"{label}:")
        self.block = label

    def br(self, label: str, md: str = "") -> None:
        self.emit(f"br label %{label}{md}")

    def cbr(self, cond: str, then: str, orelse: str) -> None:
        self.emit(f"br i1 {cond}, label %{then}, label %{orelse}")

    def body_text(self) -> str:
        return "\n".join(["entry:", *self.allocas, *self.lines])
