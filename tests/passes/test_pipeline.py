"""optimize(): the graph pass pipeline, its debug output, and every zoo model end to end."""

from __future__ import annotations

import collections
import functools

import numpy as np
import pytest

from benchmarks import zoo
from tensorir.frontend.onnx import from_onnx
from tensorir.graph.graph import Graph
from tensorir.graph.printer import print_graph
from tensorir.graph.types import TensorType
from tensorir.graph.verify import verify
from tensorir.pipeline import optimize
from tensorir.runtime.reference import run_reference

from .helpers import assert_same_results, const

PASSES = [
    "canonicalize",
    "fold constants",
    "fold batchnorm",
    "simplify",
    "hard swish",
    "transpose sink",
    "conv1d lift",
    "conv_transpose unshuffle",
    "dead code",
    "cse",
]


def _mlp() -> Graph:
    """gemm -> batch_norm -> relu, plus a dead branch and a duplicated reshape."""
    g = Graph("mlp")
    x = g.add_input("x", TensorType((2, 4)))
    (h,) = g.add_node("gemm", [x, const(g, (3, 4), 1), const(g, (3,), 2)], {"trans_b": 1})
    rng = np.random.default_rng(5)
    params = [g.add_const(rng.uniform(0.5, 1.5, 3).astype(np.float32)) for _ in range(4)]
    (b,) = g.add_node("batch_norm", [h, *params])
    (r,) = g.add_node("relu", [b])
    (f1,) = g.add_node("reshape", [r], {"shape": (6,)})
    (f2,) = g.add_node("reshape", [r], {"shape": (6,)})
    (s,) = g.add_node("add", [f1, f2])
    g.add_node("exp", [r])  # dead
    g.set_outputs([("y", s)])
    return g


def test_optimize_returns_a_new_verified_graph():
    g = _mlp()
    text = print_graph(g)
    out = optimize(g, fuse=False, layout=False)
    verify(out)
    assert print_graph(g) == text, "the input graph is left as it was"
    assert print_graph(out, constants=False).splitlines() == [
        "graph mlp(%x: f32[2,4]) {",
        "  %17 = dense(%x, %c16) : f32[2,3]",
        "  %19 = add(%17, %c18) : f32[2,3]",
        "  %9 = relu(%19) : f32[2,3]",
        "  %10 = reshape(%9) shape=(6,) : f32[6]",
        "  %12 = add(%10, %10) : f32[6]",
        "  return %12 as y",
        "}",
    ]
    assert_same_results(g, out)
    fused = optimize(g)  # the default pipeline also fuses the dense epilogue
    assert "body=dense+add+relu" in print_graph(fused)
    assert_same_results(g, fused)


def test_debug_level_2_prints_each_pass_and_marks_unchanged(monkeypatch, capsys):
    monkeypatch.setenv("TIR_DEBUG", "2")
    optimize(_mlp())
    err = capsys.readouterr().err
    lines = [line.removeprefix("[tir] ") for line in err.splitlines() if line.startswith("[tir]")]
    stages = [line.split(":")[0] for line in lines]
    round2 = [p + " (round 2)" for p in PASSES[:8]]
    fusion = ["layout", "fuse ops", "fuse dwpw", "fuse expand"]
    assert stages == ["fold qdq", *PASSES[:8], *round2, *PASSES[8:], *fusion]
    unchanged = [line.split(":")[0] for line in lines if line.endswith("(unchanged)")]
    # fold qdq found no quantized product; round 1: canonicalize rewrote the gemm, fold
    # batchnorm folded into the dense; round 2 found nothing; dead code removed the exp, cse
    # merged the reshapes; layout found no conv; fuse ops fused dense + add + relu; fuse dwpw
    # and fuse expand found no depthwise conv
    quiet = [
        "fold qdq",
        "fold constants",
        "simplify",
        "hard swish",
        "transpose sink",
        "conv1d lift",
        "conv_transpose unshuffle",
        *round2,
        "layout",
        "fuse dwpw",
        "fuse expand",
    ]
    assert unchanged == quiet
    assert err.count("graph mlp(") == len(stages) - len(unchanged)  # only changed passes print
    assert "dense(%x, %c16)" in err


def test_matmul_by_a_folded_transpose_becomes_dense():
    g = Graph("mm")
    x = g.add_input("x", TensorType((2, 3)))
    (wt,) = g.add_node("transpose", [const(g, (4, 3))], {"perm": (1, 0)})
    (y,) = g.add_node("matmul", [x, wt])
    g.set_outputs([("y", y)])
    out = optimize(g)
    assert [out.node(n).op for n in out.op_nodes()] == ["dense"]
    assert_same_results(g, out)


def test_debug_level_0_is_quiet(monkeypatch, capsys):
    monkeypatch.delenv("TIR_DEBUG", raising=False)
    monkeypatch.delenv("TIR_DUMP_DIR", raising=False)
    optimize(_mlp())
    assert capsys.readouterr().err == ""


def test_dump_dir_gets_one_file_per_stage(monkeypatch, tmp_path):
    monkeypatch.setenv("TIR_DUMP_DIR", str(tmp_path))
    optimize(_mlp())
    names = sorted(p.name.split("_", 1)[1] for p in tmp_path.iterdir())
    assert "canonicalize.txt" in names and "cse.txt" in names and "fold_batchnorm.txt" in names


# ---- the zoo --------------------------------------------------------------------------
@functools.cache
def _zoo(name: str) -> tuple[Graph, dict[str, np.ndarray], list[np.ndarray]]:
    model = zoo.build_for_tests(name)
    g = from_onnx(model)
    feeds = zoo.sample_inputs(model)
    return g, feeds, run_reference(g, feeds)


def _ops(g: Graph) -> collections.Counter:
    return collections.Counter(g.node(n).op for n in g.nx.nodes)


@pytest.mark.parametrize("name", list(zoo.MODELS))
def test_zoo_model_keeps_its_outputs(name, record_property):
    g, feeds, expected = _zoo(name)
    out = optimize(g)
    ops = _ops(out)
    print(f"\n{name}: {len(g)} -> {len(out)} nodes ({_ops(g)['constant']} -> {ops['constant']} constants)")
    record_property("nodes_before", len(g))
    record_property("nodes_after", len(out))
    assert ops["gemm"] == 0 and ops["batch_norm"] == 0 and ops["identity"] == 0
    for (out_name, _), a, b in zip(g.outputs, expected, run_reference(out, feeds), strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5, err_msg=f"{name}/{out_name}")
    if name.startswith("resnet"):  # every conv kept (BN folded into it), before layout and fusion
        unfused = _ops(optimize(g, fuse=False, layout=False))
        assert _ops(g)["batch_norm"] > 0 and unfused["conv"] == _ops(g)["conv"]
        assert len(out) < len(g)
