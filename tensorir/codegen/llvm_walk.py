"""Small analyses over loop IR that code generation needs: free variables and buffer use."""

from __future__ import annotations

from dataclasses import dataclass, field

from tensorir.loop import ir
from tensorir.loop.visitor import children


@dataclass
class Usage:
    """What a statement uses from its surroundings."""

    free_vars: list[ir.Var] = field(default_factory=list)
    loaded: list[ir.Buffer] = field(default_factory=list)
    stored: list[ir.Buffer] = field(default_factory=list)
    has_parallel: bool = False

    @property
    def buffers(self) -> list[ir.Buffer]:
        return list(dict.fromkeys(self.loaded + self.stored))


def usage(node: ir.Stmt | ir.Expr) -> Usage:
    u = Usage()
    _walk(node, frozenset(), frozenset(), u)
    return u


def _walk(node: object, bound: frozenset, local: frozenset, u: Usage) -> None:
    if isinstance(node, ir.Var):
        if node not in bound and node not in u.free_vars:
            u.free_vars.append(node)
        return
    if isinstance(node, ir.Load | ir.Store | ir.Prefetch) and node.buffer not in local:
        lst = u.stored if isinstance(node, ir.Store) else u.loaded
        if node.buffer not in lst:
            lst.append(node.buffer)
    if isinstance(node, ir.For):
        u.has_parallel |= node.kind == ir.ForKind.PARALLEL
        for x in (node.start, node.extent):
            _walk(x, bound, local, u)
        _walk(node.body, bound | {node.var}, local, u)
        return
    if isinstance(node, ir.LetStmt):
        _walk(node.value, bound, local, u)
        _walk(node.body, bound | {node.var}, local, u)
        return
    if isinstance(node, ir.Allocate):
        _walk(node.body, bound, local | {node.buffer}, u)
        return
    for c in children(node):  # For and LetStmt, whose var is no child, returned above
        _walk(c, bound, local, u)
