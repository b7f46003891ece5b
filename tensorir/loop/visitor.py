"""Generic walkers over loop IR: a read-only `Visitor`, a rebuilding `Mutator`, `substitute`.

Both work on any frozen-dataclass node (so the tensor-expression nodes of
`tensorir.schedule.te` are walked too): children are the fields holding an `Expr`, a
`Stmt` or a tuple of them. A subclass overrides `visit_<ClassName>` for the nodes it cares
about and calls `self.generic(node)` to recurse into the rest.

NOTE: the variable a `For` / `LetStmt` binds is a definition, not a use: the walkers do
not visit `For.var` / `LetStmt.var` as expressions (so `substitute` never rewrites them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from tensorir.loop.ir import Expr, For, LetStmt, LoopFunc, Stmt, Var

Node = Expr | Stmt

_BINDERS: dict[type, str] = {For: "var", LetStmt: "var"}


def _is_child(v: object) -> bool:
    return isinstance(v, Expr | Stmt)


_FIELDS: dict[type, tuple[str, ...]] = {}
# field annotations that never hold a node: such fields are not looked at during a walk
# (most nodes are Vars and Consts, whose fields are all of these)
_LEAF_TYPES = {"str", "int", "bool", "float", "int | float | bool", "Buffer", "ForKind", "dict", "Tensor"}


def _fields(cls: type) -> tuple[str, ...]:
    """The fields of a node class that may hold a child, the variable a loop binds left out
    (cached: dataclasses.fields is slow on hot paths)."""
    names = _FIELDS.get(cls)
    if names is None:
        skip = _BINDERS.get(cls)
        names = _FIELDS[cls] = tuple(
            f.name
            for f in dataclasses.fields(cls)  # type: ignore[arg-type]
            if f.name != skip and str(f.type) not in _LEAF_TYPES
        )
    return names


def children(node: object) -> list[Node]:
    """The direct sub-expressions and sub-statements of `node`, in field order."""
    out: list[Node] = []
    for name in _fields(type(node)):
        v = getattr(node, name)
        if _is_child(v):
            out.append(v)
        elif isinstance(v, tuple):
            out.extend(x for x in v if _is_child(x))
    return out


class Visitor:
    """Read-only walk; override `visit_<Class>` and call `self.generic(node)` to recurse."""

    def visit(self, node: Any) -> None:
        if isinstance(node, LoopFunc):
            self.visit(node.body)
            return
        method = getattr(self, "visit_" + type(node).__name__, None)
        if method is not None:
            method(node)
        else:
            self.generic(node)

    def generic(self, node: Any) -> None:
        for c in children(node):
            self.visit(c)


class Mutator:
    """Rebuilding walk: `visit` returns the (possibly new) node; unchanged subtrees are kept."""

    def visit(self, node: Any) -> Any:
        if isinstance(node, LoopFunc):
            body = self.visit(node.body)
            return node if body is node.body else dataclasses.replace(node, body=body)
        method = getattr(self, "visit_" + type(node).__name__, None)
        if method is not None:
            return method(node)
        return self.generic(node)

    def generic(self, node: Any) -> Any:
        changes: dict[str, object] = {}
        for name in _fields(type(node)):
            v = getattr(node, name)
            if _is_child(v):
                nv = self.visit(v)
            elif isinstance(v, tuple) and any(_is_child(x) for x in v):
                items = tuple(self.visit(x) if _is_child(x) else x for x in v)
                nv = v if all(a is b for a, b in zip(items, v, strict=True)) else items
            else:
                continue
            if nv is not v:
                changes[name] = nv
        return dataclasses.replace(node, **changes) if changes else node


class _Substituter(Mutator):
    def __init__(self, mapping: Mapping[Expr, Expr]) -> None:
        self.mapping = mapping

    def visit(self, node: Any) -> Any:
        if isinstance(node, Expr):
            hit = self.mapping.get(node)
            if hit is not None:
                return hit
        return super().visit(node)


def substitute(node: Any, mapping: Mapping[Expr, Expr]) -> Any:
    """Replace every occurrence of each key (a Var, or any expression) by its value."""
    if not mapping:
        return node
    return _Substituter(mapping).visit(node)


def walk(node: Any) -> Iterator[Node]:
    """Every node under `node` (itself included), parents before children."""
    if isinstance(node, LoopFunc):
        node = node.body
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(children(n)))


def free_vars(node: Any) -> set[Var]:
    """Vars used in `node` (loop vars bound inside `node` included)."""
    return {n for n in walk(node) if type(n) is Var}


def uses_var(node: Any, var: Expr) -> bool:
    return any(n == var for n in walk(node))


def map_exprs(node: Any, fn: Callable[[Expr], Expr | None]) -> Any:
    """Bottom-up rewrite: `fn` sees each expression after its children were rewritten;
    it returns a replacement or None to keep the node."""

    class _Map(Mutator):
        def visit(self, n: Any) -> Any:
            out = super().visit(n)
            if isinstance(out, Expr):
                rep = fn(out)
                return out if rep is None else rep
            return out

    return _Map().visit(node)
