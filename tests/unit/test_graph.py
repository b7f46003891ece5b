"""Graph IR: construction, printing, verification, shape inference and the reference executor."""

from __future__ import annotations

import numpy as np
import pytest

from tensorir.errors import InputError, ModelError, ShapeError
from tensorir.graph.graph import Graph, Value
from tensorir.graph.printer import print_graph
from tensorir.graph.types import Node, TensorType
from tensorir.graph.verify import verify
from tensorir.runtime.reference import run_reference


def _small_graph() -> Graph:
    g = Graph("small")
    x = g.add_input("x", TensorType((2, 3)))
    b = g.add_const(np.arange(3, dtype=np.float32), "bias")
    (s,) = g.add_node("add", [x, b], name="plus")
    (r,) = g.add_node("relu", [s], name="act")
    (c,) = g.add_node("greater", [r, b], name="cmp")
    g.set_outputs([("y", r), ("mask", c)])
    return g


def test_tensor_type_normalizes_and_prints():
    t = TensorType([1, 3, 224, 224], "float32")
    assert t.shape == (1, 3, 224, 224) and t.size == 150528 and t.nbytes == 602112
    assert str(t) == "f32[1,3,224,224]"
    assert str(TensorType((4,), "int64")) == "i64[4]"
    assert TensorType((2,), np.dtype("float16")).dtype == "float16"


def test_printer_shows_ops_types_and_outputs():
    text = print_graph(_small_graph())
    assert text.splitlines() == [
        "graph small(%x: f32[2,3]) {",
        "  %c1 = constant f32[3] [0.,1.,2.]",
        "  %2 = add(%x, %c1) : f32[2,3]",
        "  %3 = relu(%2) : f32[2,3]",
        "  %4 = greater(%3, %c1) : bool[2,3]",
        "  return %3 as y, %4 as mask",
        "}",
    ]


def test_shape_inference_broadcasts_and_names_node_on_error():
    g = Graph()
    x = g.add_input("x", TensorType((4, 1, 5)))
    y = g.add_input("y", TensorType((3, 1)))
    (z,) = g.add_node("mul", [x, y])
    assert g.type_of(z) == TensorType((4, 3, 5))
    with pytest.raises(ShapeError, match="node 'bad' .*\\[4, 1, 5\\] and \\[2\\]"):
        g.add_node("add", [x, g.add_const(np.zeros(2, np.float32))], name="bad")


def test_verify_accepts_valid_and_rejects_stale_types():
    g = _small_graph()
    verify(g)
    nid = g.op_nodes()[0]
    node = g.node(nid)
    g.replace_node(nid, Node(node.op, node.attrs, (TensorType((9,)),), node.name))
    with pytest.raises(ModelError, match="'plus'.*differ from inferred"):
        verify(g)


def test_verify_rejects_cycle():
    g = _small_graph()
    first, last = g.op_nodes()[0], g.op_nodes()[-1]
    g.nx.add_edge(last, first, src=0, dst=2)
    with pytest.raises(ModelError, match="cycle"):
        verify(g)


def test_replace_uses_rewires_consumers_and_outputs():
    g = _small_graph()
    (plus,) = [n for n in g.op_nodes() if g.node(n).name == "plus"]
    x = Value(g.graph_inputs()[0])
    g.replace_uses(Value(plus), x)
    g.remove_node(plus)
    verify(g)
    assert "relu(%x)" in print_graph(g)


def test_reference_executor_matches_numpy():
    g = _small_graph()
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    y, mask = run_reference(g, {"x": x})
    bias = np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(y, np.maximum(x + bias, 0))
    np.testing.assert_array_equal(mask, np.maximum(x + bias, 0) > bias)


def test_reference_executor_checks_inputs():
    g = _small_graph()
    with pytest.raises(InputError, match="'x' has shape \\[3\\]"):
        run_reference(g, {"x": np.zeros(3, np.float32)})
    with pytest.raises(InputError, match="unknown input 'q'"):
        run_reference(g, {"x": np.zeros((2, 3), np.float32), "q": np.zeros(1)})


def test_debug_levels_print_and_dump(tmp_path, monkeypatch, capsys):
    from tensorir.debug import stage

    monkeypatch.setenv("TIR_DEBUG", "2")
    monkeypatch.setenv("TIR_DUMP_DIR", str(tmp_path))
    with stage("build small graph") as st:
        st.result = _small_graph()
    err = capsys.readouterr().err
    assert "[tir] build small graph:" in err and "%3 = relu(%2)" in err
    (dumped,) = tmp_path.glob("*_build_small_graph.txt")
    assert "graph small(" in dumped.read_text()
