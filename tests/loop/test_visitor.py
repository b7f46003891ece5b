from tensorir.loop.ir import BinOp, Buffer, Call, Const, For, ForKind, Load, Seq, Store, Var
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


def test_a_node_keeps_its_hash_but_pickles_without_it():
    import pickle

    e = BinOp("+", Var("i"), BinOp("*", Var("j"), Const(4)))
    assert hash(e) == hash(BinOp("+", Var("i"), BinOp("*", Var("j"), Const(4))))
    assert (e.lanes, e.dtype) == (1, "int64")
    assert {"_hash", "lanes", "dtype"} <= set(vars(e))  # kept beside the fields
    assert set(e.__getstate__()) == {"op", "a", "b"}  # a string's hash differs per process
    back = pickle.loads(pickle.dumps(e))
    assert back == e and "_hash" not in vars(back) and hash(back) == hash(e)


def test_walks_skip_leaf_fields_only():
    x = Var("x", "float32")
    assert children(Var("i")) == [] and children(Const(1)) == []
    assert children(For(Var("i"), Const(0), Const(4), ForKind.SERIAL, Seq(()))) == [
        Const(0),
        Const(4),
        Seq(()),
    ]
    call = Call("exp", (x, Const(1.0, "float32")), "float32")
    assert children(call) == [x, Const(1.0, "float32")]
