"""Weights prepared at start-up: a CPU build's transformed constants, computed by tir_create
instead of stored in the weights blob.

A Winograd conv reads U = G w G^T, alpha^2 / 9 times the size of its packed weight w (1.78x
for F(2x2, 3x3), 4x for F(4x4, 3x3)). A CPU (LLVM) build stores w and, per transformed
constant, a *prepare call*: the transform's own kernel (a `KernelTransform`'s op, e.g.
winograd_weight_nchwc) reading Arg("weight", ...) and writing Arg("prepared", ...), U's
64-byte aligned offset in the prepared block that tir_create allocates and fills once, before
any run (codegen/entry.py); the conv reads U there. MNN does the same when it creates a
session.

The weights only prepare calls read (a Winograd conv's packed 3x3 weight that no other kernel
reads) are laid out last in the blob (`sources_last`), and tir_create hands their pages back to
the system once the prepare calls have run (madvise MADV_DONTNEED; `weights_released_bytes`
in manifest.json). Resident memory after loading and four runs, untuned builds, before ->
after: ResNet-18 167.6 -> 131.7 MiB (37.7 MB released), ResNet-50 151.6 -> 120.3 MiB,
DenseNet-121 85.4 -> 79.6 MiB (embedded weights; ResNet-18 from weights.bin the same).
Start-up with weights.bin, ResNet-18, medians of 12 fresh processes: 41.4 -> 45.4 ms
(quartiles 36-48 and 39-48 ms); embedded 15.7 -> 14.6.

Only `KernelTransform`s are prepared, and only in LLVM builds: the transforms that do not grow
the data (dense panels, conv_wide, Strassen's operands) stay at compile time, and an OpenCL
build keeps all of its own (its kernels read constants from the blob's device copy).

    prepared = Prepared("tir_")                                # the build's symbol prefix
    arg = prepared.place(key, weight_arg, w_type, transform)   # Arg("prepared", offset)
    prepared.calls, prepared.entries, prepared.size            # plan, manifest, bytes
    funcs = lower_prepares(prepared, target)                   # their kernels
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tensorir.errors import TirError
from tensorir.graph.types import TensorType
from tensorir.loop.ir import LoopFunc
from tensorir.ops.conv_algorithms import KernelTransform
from tensorir.ops.registry import get_op
from tensorir.passes.memory_plan import ALIGN
from tensorir.plan import Arg, Copy, KernelCall, LoopSpan
from tensorir.target import Target
from tensorir.weight_blob import WeightBlob


@dataclass(frozen=True)
class PrepareKernel:
    """The kernel of one transform on one weight type: `op` with `attrs` on a `w_type` input."""

    symbol: str
    op: str
    attrs: tuple[tuple[str, Any], ...]
    w_type: TensorType


class Prepared:
    """The prepared block of one build as it is laid out: where each transformed constant
    lives, the prepare calls that write them (in order), their manifest entries and the
    kernels they call (one per distinct op, attrs and weight type)."""

    def __init__(self, prefix: str = "tir_") -> None:
        self.prefix = prefix
        self.size = 0
        self.offsets: dict[Hashable, int] = {}
        self.calls: list[KernelCall] = []
        self.entries: list[dict[str, Any]] = []
        self.kernels: dict[tuple, PrepareKernel] = {}

    def place(self, key: Hashable, weight: Arg, w_type: TensorType, transform: KernelTransform) -> Arg:
        """Where `transform` of the constant at `weight` (of type `w_type`) lives; the first
        time for a `key`, a prepare call that writes it."""
        if key not in self.offsets:
            kern = self._kernel(transform, w_type)
            out = get_op(transform.op).infer([w_type], dict(transform.attrs))[0]
            dst = Arg("prepared", self.reserve(key, out.nbytes))
            call = KernelCall(kern.symbol, (weight, dst), "cpu", (w_type.nbytes, out.nbytes))
            self.add([call], [{"op": kern.op, "attrs": dict(kern.attrs)}])
        return Arg("prepared", self.offsets[key])

    def reserve(self, key: Hashable, nbytes: int) -> int:
        """`nbytes` of the block for `key` (64-byte aligned): their offset."""
        self.offsets[key] = self.size
        self.size += nbytes + (-nbytes) % ALIGN
        return self.offsets[key]

    def add(self, calls: Sequence[KernelCall], entries: Sequence[dict[str, Any]]) -> None:
        """Prepare calls, in order, each with its manifest entry (symbol and args are added)."""
        for c, e in zip(calls, entries, strict=True):
            self.calls.append(c)
            self.entries.append({"symbol": c.symbol, **e, "args": [a.to_json() for a in c.args]})

    def _kernel(self, transform: KernelTransform, w_type: TensorType) -> PrepareKernel:
        key = (transform.op, transform.attrs, w_type)
        if key not in self.kernels:
            symbol = f"{self.prefix}prep{len(self.kernels)}_{transform.op}"
            self.kernels[key] = PrepareKernel(symbol, transform.op, transform.attrs, w_type)
        return self.kernels[key]


def lower_prepares(prepared: Prepared | None, target: Target) -> list[LoopFunc]:
    """The kernels the prepare calls run, lowered with their op's default schedule and the
    loop passes (each reads its weight and writes its result: no scratch)."""
    from tensorir.ops.kernel import op_kernel

    funcs = []
    for k in prepared.kernels.values() if prepared else ():
        func = op_kernel(k.op, [k.w_type], dict(k.attrs), target, name=k.symbol)
        if func.attrs.get("num_scratch", 0) or len(func.params) != 2:
            raise TirError(f"prepare kernel {k.symbol}: expected (weight, result) parameters only")
        funcs.append(func)
    return funcs


class BoundCalls(Protocol):
    """What sources_last rewrites of compiler.Bound (bind_plan's result, one module up): the
    model's kernel calls and final copies, and its loops (a build with loops keeps its layout)."""

    calls: list[KernelCall]
    copies: list[Copy]
    loops: list[LoopSpan]


def sources_last(weights: WeightBlob, bound: BoundCalls, prepared: Prepared | None) -> tuple[int, int]:
    """Move the weights that only prepare calls read (a Winograd conv's packed 3x3 weight, once
    U is made) to the end of the blob, rewriting every weight argument (model calls, their
    guards, final copies, prepare calls and their manifest entries): (first byte, end) of that
    tail, which tir_create hands back to the system after the prepare calls (codegen/entry.py);
    (0, 0) when there is none. A build with loops keeps its layout (a loop body's weights are a
    chunk of the blob, read at offsets inside it)."""
    if prepared is None or not prepared.calls or bound.loops:
        return 0, 0
    model_args = [a for c in bound.calls for a in (*c.args, *(flag for flag, _ in c.guard))]
    model_args += [a for cp in bound.copies for a in (cp.src, cp.dst)]
    read = {weights.chunk_at(a.index) for a in model_args if a.kind == "weight"}
    prep = {weights.chunk_at(a.index) for c in prepared.calls for a in c.args if a.kind == "weight"}
    tail = sorted(prep - read)
    if not tail:
        return 0, 0
    remap, first = weights.move_to_end(tail)

    def move(a: Arg) -> Arg:
        return Arg("weight", remap(a.index)) if a.kind == "weight" else a

    def moved(c: KernelCall) -> KernelCall:
        guard = tuple((move(flag), p) for flag, p in c.guard)
        return dataclasses.replace(c, args=tuple(move(a) for a in c.args), guard=guard)

    bound.calls[:] = [moved(c) for c in bound.calls]
    bound.copies[:] = [dataclasses.replace(cp, src=move(cp.src), dst=move(cp.dst)) for cp in bound.copies]
    prepared.calls = [moved(c) for c in prepared.calls]
    for c, e in zip(prepared.calls, prepared.entries, strict=True):
        e["args"] = [a.to_json() for a in c.args]
    return first, weights.size
