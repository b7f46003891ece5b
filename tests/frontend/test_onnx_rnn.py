"""LSTM / GRU / RNN against onnxruntime for the options ONNX's node tests leave out: both
directions with per-batch sequence lengths (one of them 0), layout 1, initial states, clip,
peepholes, input_forget, linear_before_reset and the alternative activations with their
alpha / beta (consumed in order by the activations that take them, as onnxruntime does), on
the reference path and compiled for this CPU; and the shape of the compiled code: one GEMM for
the input projection, one kernel looping over time.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import tensorir as tir
from tensorir.errors import ModelError
from tensorir.frontend.onnx import from_onnx
from tensorir.graph.graph import Graph
from tensorir.ops.kernel import op_kernel
from tensorir.runtime.reference import run_reference
from tests.frontend.rnn_models import ort_outputs, rnn_model

TOL = 1e-5  # max |ours - ort| (fp32, outputs in [-1, 1] or near)

CASES: list[tuple[str, dict[str, Any]]] = [
    ("LSTM", {}),
    ("LSTM", {"direction": "bidirectional", "lens": [4, 2, 0], "init": True, "peep": True, "clip": 0.7}),
    ("LSTM", {"direction": "reverse", "layout": 1, "init": True, "input_forget": 1, "lens": [3, 4, 1]}),
    (
        "LSTM",
        {
            "direction": "bidirectional",
            "bias": False,
            "activations": ["Sigmoid", "Softplus", "ThresholdedRelu", "Relu", "Tanh", "Sigmoid"],
            "activation_alpha": [0.1],
        },
    ),
    ("GRU", {"direction": "reverse", "init": True}),
    ("GRU", {"direction": "bidirectional", "linear_before_reset": 1, "lens": [1, 4, 3], "init": True}),
    ("GRU", {"clip": 0.9, "init": True}),
    (
        "GRU",
        {
            "direction": "bidirectional",
            "layout": 1,
            "lens": [3, 0, 4],
            "activations": ["HardSigmoid", "Elu", "ScaledTanh", "Softsign"],
            "activation_alpha": [0.3, 0.7, 0.8],
            "activation_beta": [0.4, 1.5],
        },
    ),
    ("GRU", {"linear_before_reset": 1, "clip": 0.4, "bias": False}),
    ("RNN", {"direction": "reverse", "lens": [0, 2, 4], "clip": 1.5}),
    (
        "RNN",
        {
            "direction": "bidirectional",
            "layout": 1,
            "init": True,
            "activations": ["Affine", "LeakyRelu"],
            "activation_alpha": [0.5, 0.2],
            "activation_beta": [0.1],
        },
    ),
]


def case_id(case: tuple[str, dict[str, Any]]) -> str:
    op, kw = case
    return "-".join([op, *(f"{k}={v}" if not isinstance(v, list) else k for k, v in kw.items())])


def check(ours: list[np.ndarray], ref: list[np.ndarray], what: str) -> None:
    assert len(ours) == len(ref), what
    for k, (a, b) in enumerate(zip(ours, ref, strict=True)):
        assert a.shape == b.shape, f"{what}: output {k} is {a.shape}, onnxruntime's {b.shape}"
        err = float(np.max(np.abs(a - b)))
        assert err <= TOL, f"{what}: output {k} is off by {err:.3g}"


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_reference_matches_onnxruntime(case: tuple[str, dict[str, Any]]) -> None:
    op, kw = case
    model, feeds = rnn_model(op, **kw)
    check(run_reference(from_onnx(model), feeds), ort_outputs(op, kw, feeds), case_id(case))


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_compiled_matches_onnxruntime(case: tuple[str, dict[str, Any]]) -> None:
    op, kw = case
    model, feeds = rnn_model(op, **kw)
    mod = tir.compile(model, target="host")
    check(mod.run(feeds), ort_outputs(op, kw, feeds), case_id(case))
    assert [k["op"] for k in mod.manifest["kernels"]][-1] == "recurrence"


def test_graph_is_a_projection_and_one_recurrence() -> None:
    """The input projection is one dense over every step; the steps are one recurrence node
    (not unrolled in the graph), reading R transposed."""
    g = from_onnx(rnn_model("GRU", seq=6, direction="bidirectional")[0])
    ops = [g.node(i).op for i in g.op_nodes()]
    assert ops.count("dense") == 1 and ops.count("recurrence") == 1, ops
    assert "transpose" in ops, ops


def _recurrence_ir(g: Graph) -> str:
    nid = next(n for n in g.op_nodes() if g.node(n).op == "recurrence")
    in_types = [g.type_of(v) for v in g.inputs_of(nid)]
    return str(op_kernel("recurrence", in_types, g.node(nid).attr, "host"))


def test_recurrence_kernel_loops_over_time() -> None:
    """The kernel's body is one serial loop over the 7 steps; inside it the product over the
    previous hidden state (a k loop reading R^T), the state updates in place (Y_c, Y_h) and the
    step's row of Y, stored at an index that depends on the step."""
    g = from_onnx(rnn_model("LSTM", seq=7, hidden=16, direction="bidirectional", lens=[7, 3, 5])[0])
    lines = _recurrence_ir(g).splitlines()
    assert lines[1].strip() == "for time in range(0, 7):", lines[:3]
    assert sum("range(0, 7)" in ln for ln in lines) == 1
    body = "\n".join(lines[2:])
    assert "for k in range(0, 16):" in body
    stores = [ln.split("[", 1)[0].strip() for ln in lines if "] = " in ln]
    assert {"Y_c", "Y_h", "Y"} <= set(stores), stores
    assert any(ln.strip().startswith("Y[ramp(select(time < ") for ln in lines)


def test_large_steps_run_their_product_in_parallel() -> None:
    """A step with 1024 x 256 multiply-adds splits its product over threads; the time loop
    stays serial around it. Two threads give the same outputs as onnxruntime."""
    kw: dict[str, Any] = {"hidden": 256, "batch": 1, "inp": 16, "seq": 3}
    model, feeds = rnn_model("LSTM", **kw)
    text = _recurrence_ir(from_onnx(model))
    assert text.index("for time in range(0, 3):") < text.index("parallel(")
    mod = tir.compile(model, target="host")
    mod.set_num_threads(2)
    check(mod.run(feeds), ort_outputs("LSTM", kw, feeds), "hidden 128")


def test_malformed_input_is_one_clear_error() -> None:
    """An X that is not 3-D (as a branch built for another input size gives) is a ModelError
    naming the node."""
    model, _ = rnn_model("LSTM")
    x = model.graph.input[0].type.tensor_type.shape
    x.dim.add().dim_value = 1
    with pytest.raises(ModelError, match=r"node 'Y' \(LSTM\): X, W and R must be 3-D, X is \[4, 3, 3, 1\]"):
        from_onnx(model)
