"""Shared checks for the graph-pass tests: printed before/after and numerics."""

from __future__ import annotations

import textwrap

import numpy as np

from tensorir.graph.graph import Graph, Value
from tensorir.graph.printer import print_graph
from tensorir.graph.types import TensorType, np_dtype
from tensorir.graph.verify import verify
from tensorir.passes import Pass, copy_graph
from tensorir.runtime.reference import run_reference


def const(g: Graph, shape: tuple[int, ...], seed: int = 0, dtype: str = "float32") -> Value:
    """A seeded random constant."""
    rng = np.random.default_rng(seed)
    return g.add_const(rng.standard_normal(shape).astype(dtype))


def random_inputs(g: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for nid in g.graph_inputs():
        node = g.node(nid)
        t: TensorType = node.outputs[0]
        dt = np_dtype(t.dtype)
        if dt.kind == "f":
            feeds[node.name] = rng.standard_normal(t.shape).astype(dt)
        elif dt.kind == "b":
            feeds[node.name] = rng.integers(0, 2, t.shape).astype(bool)
        else:
            feeds[node.name] = rng.integers(-3, 4, t.shape).astype(dt)
    return feeds


def assert_same_results(before: Graph, after: Graph, rtol: float = 1e-5, atol: float = 1e-5) -> None:
    """Both graphs give the same outputs (reference executor) on seeded random inputs."""
    for seed in (0, 1):
        feeds = random_inputs(before, seed)
        for name, a, b in zip(
            [n for n, _ in before.outputs],
            run_reference(before, feeds),
            run_reference(after, feeds),
            strict=True,
        ):
            assert a.shape == b.shape and a.dtype == b.dtype, name
            np.testing.assert_allclose(b, a, rtol=rtol, atol=atol, err_msg=name)


def check_pass(g: Graph, pass_: Pass, expected: str | None) -> Graph:
    """Run `pass_` on `g`: the printed result is `expected` (None: unchanged, and the pass
    says so), the graph verifies, and the outputs are those of the original graph."""
    before = copy_graph(g)
    changed = pass_(g)
    verify(g)
    if expected is None:
        assert not changed
        assert print_graph(g) == print_graph(before)
    else:
        assert changed
        assert print_graph(g).splitlines() == textwrap.dedent(expected).strip().splitlines()
    assert_same_results(before, g)
    return g


def onnx_model(
    nodes: list, name: str, x_shape: list[int], y_shape: list[int], weights: dict[str, np.ndarray]
):
    """An opset-17 ONNX model of `nodes` with one float input x, one output y and the
    initializers `weights`."""
    import onnx
    import onnx.helper as oh
    import onnx.numpy_helper

    graph = oh.make_graph(
        nodes,
        name,
        [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x_shape)],
        [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, y_shape)],
        [onnx.numpy_helper.from_array(v, k) for k, v in weights.items()],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
