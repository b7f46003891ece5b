from tensorir.loop.ir import Buffer, Const, For, ForKind, Load, Store, Var
from tensorir.loop.visitor import Mutator, Visitor, children, free_vars, map_exprs, substitute, walk

i, j = Var("i"), Var("j")
A = Buffer("A", (16,))
LOOP = For(i, Const(0), Const(4), ForKind.SERIAL, Store(A, i * 4 + j, Load(A, j)))


def test_substitute_replaces_uses_not_the_binder():
    out = substitute(LOOP, {i: Var("z"), j: Const(2)})
    assert out.var == i
    assert out.body == Store(A, Var("z") * 4 + Const(2), Load(A, Const(2)))


def test_unchanged_subtrees_are_shared():
    out = substitute(LOOP, {Var("q"): Const(1)})
    assert out is LOOP
    assert Mutator().visit(LOOP) is LOOP


def test_walk_children_and_free_vars():
    assert [type(c).__name__ for c in children(LOOP)] == ["Const", "Const", "Store"]
    assert free_vars(LOOP) == {i, j}
    assert sum(1 for n in walk(LOOP) if isinstance(n, Load)) == 1


def test_visitor_dispatch_and_map_exprs():
    seen = []

    class Loads(Visitor):
        def visit_Load(self, e):
            seen.append(e.index)

    Loads().visit(LOOP)
    assert seen == [j]
    doubled = map_exprs(LOOP, lambda e: Const(e.value * 2) if isinstance(e, Const) and e.value == 4 else None)
    assert doubled.extent == Const(8) and doubled.body.index == i * 8 + j
