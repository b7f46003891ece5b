"""Single-node LSTM / GRU / RNN models with random weights, and onnxruntime's outputs for them.

onnxruntime has no batch-major (layout 1) kernels, so for layout 1 its outputs come from the
same model in layout 0 on transposed inputs, transposed back.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnx.helper as oh

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
F32, I32 = onnx.TensorProto.FLOAT, onnx.TensorProto.INT32


def rnn_model(
    op: str,
    hidden: int = 5,
    seq: int = 4,
    batch: int = 3,
    inp: int = 3,
    direction: str = "forward",
    layout: int = 0,
    lens: list[int] | None = None,
    init: bool = False,
    peep: bool = False,
    bias: bool = True,
    **attrs: Any,
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """One `op` node (opset 14): weights as initializers; X, the sequence lengths and the
    initial states (with `init`) as graph inputs; every output requested. Returns the model
    and its feeds."""
    dirs = 2 if direction == "bidirectional" else 1
    gh = GATES[op] * hidden
    rng = np.random.default_rng(0)
    xs = (batch, seq, inp) if layout else (seq, batch, inp)
    states = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    feeds = {"X": rng.standard_normal(xs).astype(np.float32)}
    inputs = [oh.make_tensor_value_info("X", F32, xs)]
    inits = [_weight("W", rng, (dirs, gh, inp), 0.5), _weight("R", rng, (dirs, gh, hidden), 0.5)]
    names = ["X", "W", "R", "", "", "", "", ""]
    if bias:
        inits.append(_weight("B", rng, (dirs, 2 * gh), 1.0))
        names[3] = "B"
    if lens is not None:
        feeds["L"] = np.asarray(lens, np.int32)
        inputs.append(oh.make_tensor_value_info("L", I32, (batch,)))
        names[4] = "L"
    for k, name in enumerate(("H0", "C0") if op == "LSTM" else ("H0",)):
        if init:
            feeds[name] = rng.standard_normal(states).astype(np.float32)
            inputs.append(oh.make_tensor_value_info(name, F32, states))
            names[5 + k] = name
    if peep:
        inits.append(_weight("P", rng, (dirs, 3 * hidden), 1.0))
        names[7] = "P"
    while names[-1] == "":
        names.pop()
    outs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    extra = {"layout": layout} if layout else {}
    node = oh.make_node(op, names, outs, hidden_size=hidden, direction=direction, **extra, **attrs)
    graph = oh.make_graph(
        [node], "rnn", inputs, [oh.make_tensor_value_info(o, F32, None) for o in outs], inits
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 14)]), feeds


def _weight(name: str, rng: np.random.Generator, shape: tuple[int, ...], scale: float) -> onnx.TensorProto:
    data = (rng.standard_normal(shape) * scale).astype(np.float32)
    return oh.make_tensor(name, F32, shape, data.ravel())


def ort_outputs(op: str, kw: dict[str, Any], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime's outputs of rnn_model(op, **kw) on `feeds` (layout 1 through layout 0)."""
    import onnxruntime as ort

    layout = kw.get("layout", 0)
    model, _ = rnn_model(op, **{**kw, "layout": 0})
    if layout:
        feeds = {k: v.transpose(1, 0, 2) if v.ndim == 3 else v for k, v in feeds.items()}
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    outs = sess.run(None, feeds)
    if not layout:
        return outs
    return [outs[0].transpose(2, 0, 1, 3)] + [o.transpose(1, 0, 2) for o in outs[1:]]
