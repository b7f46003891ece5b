"""A recurrence with a constant R reads R^T in gate blocks (rnn.block_rt, rearranged at
compile time by conv_algorithms._recurrence): one parallel iteration of a step's product
streams one contiguous block instead of H slices a row apart. Checked: the rearrangement and
its inverse, which cells take it (one product over all of R's columns: LSTM, RNN, GRU with
linear_before_reset), the kernel's IR (the block's rows read k * width apart), and compiled
models against onnxruntime at 1 and 2 threads (max |err| <= 1e-5, as the other RNN tests;
2e-5 for the 256-wide tanh RNN, whose sums over 256 terms the plain rt gives the same 1.4e-5
for: the block only changes where each weight is read from, not the order of the sums)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import tensorir as tir
from tensorir.frontend.onnx import from_onnx
from tensorir.ops.kernel import build_kernel
from tensorir.ops.rnn import block_rt, unblock_rt
from tensorir.target import get_target
from tests.frontend.rnn_models import ort_outputs, rnn_model

HOST = get_target("host")
TOL = 1e-5


def test_block_rt_puts_each_blocks_rows_together():
    rt = np.arange(2 * 3 * 8, dtype=np.float32).reshape(2, 3, 8)  # dirs 2, H 3, G*H 8
    blocked = block_rt(rt, 4)
    assert blocked.shape == rt.shape
    flat = blocked.reshape(2, -1)
    assert flat[0, :12].tolist() == [0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19]  # block 0, rows 0-2
    assert np.array_equal(unblock_rt(blocked, 4), rt)


def _spec(op: str, **kw: Any):
    g = from_onnx(rnn_model(op, **kw)[0])
    nid = next(n for n in g.op_nodes() if g.node(n).op == "recurrence")
    types = [g.type_of(v) for v in g.inputs_of(nid)]
    return build_kernel("recurrence", types, g.node(nid).attr, HOST, const_args=frozenset({1}))


@pytest.mark.parametrize(
    ("op", "kw", "blocked"),
    [
        ("LSTM", {"hidden": 64}, True),
        ("GRU", {"hidden": 64, "linear_before_reset": 1}, True),
        ("RNN", {"hidden": 256}, True),
        ("GRU", {"hidden": 64}, False),  # two products (the reset gate's apart): plain rt
        ("LSTM", {"hidden": 4}, False),  # one block: nothing to rearrange
    ],
)
def test_which_cells_read_blocks(op, kw, blocked):
    func, spec = _spec(op, **kw)
    width = spec.attrs.get("rt_block", 0)
    assert bool(width) == blocked and (1 in spec.transforms) == blocked
    if blocked:
        hidden = kw["hidden"]
        assert f"*{hidden * width} + k*{width}" in str(func), "a block's rows read k * width apart"


@pytest.mark.parametrize(
    ("op", "kw", "tol"),
    [
        ("LSTM", {"hidden": 64, "batch": 2, "direction": "bidirectional", "lens": [5, 3], "init": True}, TOL),
        ("GRU", {"hidden": 64, "batch": 1, "linear_before_reset": 1, "layout": 1, "init": True}, TOL),
        ("RNN", {"hidden": 256, "batch": 1, "direction": "reverse"}, 2 * TOL),
    ],
)
@pytest.mark.parametrize("threads", [1, 2])
def test_blocked_models_match_onnxruntime(op, kw, tol, threads):
    kw = {"seq": 5, "inp": 7, **kw}
    model, feeds = rnn_model(op, **kw)
    mod = tir.compile(model, target="host")
    mod.set_num_threads(threads)
    for a, b in zip(mod.run(feeds), ort_outputs(op, kw, feeds), strict=True):
        assert a.shape == b.shape
        assert float(np.max(np.abs(a - b))) <= tol
