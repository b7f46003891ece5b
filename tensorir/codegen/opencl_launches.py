"""A loop function as one or more OpenCL launches.

OpenCL has no barrier across work-groups, so a root nest must not read what an earlier root
nest wrote into a global scratch buffer (the workspace a kernel writes between its own
nests, e.g. the partial sums of a split-K conv, ops/conv_splitk_gpu.py) within one launch.
`split_launches` cuts the function's root nests there: each part becomes a loop function of
its own with the same parameters (a kernel of its own when rendered), and the in-order
command queue runs them one after the other:

    for ... gpu_block: ... part[...] = acc          ->  f        (launch 1)
    for ... gpu_block: ... y[...] = sum(part[...])  ->  f_then1  (launch 2)

A function whose nests do not read each other's scratch stays one launch.
"""

from __future__ import annotations

from tensorir.loop import ir
from tensorir.loop.visitor import walk


def _scratch(func: ir.LoopFunc) -> set[ir.Buffer]:
    n = func.attrs.get("num_scratch", 0)
    return set(func.params[len(func.params) - n :]) if n else set()


def _touched(stmt: ir.Stmt, kind: type, bufs: set[ir.Buffer]) -> set[ir.Buffer]:
    return {n.buffer for n in walk(stmt) if isinstance(n, kind)} & bufs


def split_launches(func: ir.LoopFunc) -> list[ir.LoopFunc]:
    """`func`'s root nests grouped into launches (module docstring), in order."""
    scratch = _scratch(func)
    if not scratch:
        return [func]
    allocs: list[ir.Buffer] = []
    body = func.body
    while isinstance(body, ir.Allocate):
        allocs.append(body.buffer)
        body = body.body
    stmts = body.stmts if isinstance(body, ir.Seq) else (body,)
    parts: list[list[ir.Stmt]] = [[]]
    written: set[ir.Buffer] = set()  # scratch the current part writes
    for st in stmts:
        if parts[-1] and _touched(st, ir.Load, scratch) & written:
            parts.append([])
            written = set()
        parts[-1].append(st)
        written |= _touched(st, ir.Store, scratch)
    if len(parts) == 1:
        return [func]
    out = []
    for k, part in enumerate(parts):
        stmt: ir.Stmt = ir.Seq(tuple(part))
        for buf in reversed(allocs):
            stmt = ir.Allocate(buf, stmt)
        name = func.name if k == 0 else f"{func.name}_then{k}"
        out.append(ir.LoopFunc(name, func.params, stmt, dict(func.attrs)))
    return out


def join_sources(sources: list[str], seen: set[str] | None = None) -> str:
    """OpenCL C sources concatenated into one program: each helper function (a `static
    inline` line) and pragma is kept only where it first appears (`seen`: those lines of
    sources joined before, updated)."""
    seen = set() if seen is None else seen
    lines = []
    for source in sources:
        for line in source.splitlines():
            if line.startswith(("static inline ", "#pragma ")):
                if line in seen:
                    continue
                seen.add(line)
            lines.append(line)
    return "\n".join(lines) + "\n"
