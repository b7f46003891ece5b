"""LSTM / GRU / RNN against onnxruntime for the options ONNX's node tests leave out: both
directions with per-batch sequence lengths (one of them 0), layout 1, initial states, clip,
peepholes, input_forget, linear_before_reset and the alternative activations with their
alpha / beta (consumed in order by the activations that take them, as onnxruntime does).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tensorir.frontend.onnx import from_onnx
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


def test_graph_is_a_projection_and_one_recurrence() -> None:
    """The input projection is one dense over every step; the steps are one recurrence node
    (not unrolled in the graph), reading R transposed."""
    model, _ = rnn_model("GRU", seq=6, direction="bidirectional")
    ops = [n.op for n in (from_onnx(model).node(i) for i in from_onnx(model).op_nodes())]
    assert ops.count("dense") == 1 and ops.count("recurrence") == 1, ops
    assert "transpose" in ops, ops
