"""recurrence: the time loop of an ONNX LSTM / GRU / RNN, after its input projection.

The ONNX frontend (frontend/onnx_rnn.py) splits a recurrent node in two: the input projection
of every time step at once, X W^T + biases, an ordinary `dense` (one GEMM, tuned like any
other), and this op, which runs the steps in order. Its kernel (rnn_compute.py) is one loop
over time in the generated code.

Inputs (layout 0; layout 1 swaps seq and batch in xproj and Y, dirs and batch in the states):

    xproj (seq, batch, dirs, G*H)  X W^T + Wb (+ Rb where it is added outside the reset gate)
    rt    (dirs, H, G*H)           R transposed (a transpose of R, folded when R is constant)
    h0    (dirs, batch, H)         the initial hidden state (zeros when the model gives none)
    c0    (dirs, batch, H)         LSTM: the initial cell state
    lens  (batch,) int32           attr `lens`: sequence lengths (steps past one keep the state,
                                   and their outputs are zeros; a length of 0 gives
                                   zero final states, as onnxruntime does)
    p     (dirs, 3H)               LSTM, attr `peepholes`: P (i, o, f)
    rbh   (dirs, H)                GRU with linear_before_reset and a bias: Rbh, inside the reset

Outputs: Y (seq, dirs, batch, H), Y_h (dirs, batch, H) and, for LSTM, Y_c (dirs, batch, H).

Gates in ONNX order: LSTM i, o, f, c (G = 4), GRU z, r, h (G = 3), RNN one (G = 1).
`directions` is ("forward",), ("reverse",) or ("forward", "reverse"); `acts` per direction
the activations (name, alpha, beta): LSTM (f, g, h), GRU (f, g), RNN (f). A reverse direction
with sequence lengths runs each batch entry's own steps backwards from its last one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from tensorir.errors import ShapeError
from tensorir.graph.types import TensorType
from tensorir.ops.infer import Types
from tensorir.ops.registry import register_op

GATES = {"lstm": 4, "gru": 3, "rnn": 1}
NUM_ACTS = {"lstm": 3, "gru": 2, "rnn": 1}
DEFAULT_ACTS = {"lstm": ("Sigmoid", "Tanh", "Tanh"), "gru": ("Sigmoid", "Tanh"), "rnn": ("Tanh",)}

# name -> (uses alpha, uses beta, default alpha, default beta). The defaults are onnxruntime's
# (what models are checked against): 0 where it has none, so ThresholdedRelu's is 0, not the
# ThresholdedRelu operator's 1, and Affine / ScaledTanh without values give 0.
ACTIVATIONS: dict[str, tuple[bool, bool, float, float]] = {
    "Relu": (False, False, 0.0, 0.0),
    "Tanh": (False, False, 0.0, 0.0),
    "Sigmoid": (False, False, 0.0, 0.0),
    "Affine": (True, True, 0.0, 0.0),
    "LeakyRelu": (True, False, 0.01, 0.0),
    "ThresholdedRelu": (True, False, 0.0, 0.0),
    "ScaledTanh": (True, True, 0.0, 0.0),
    "HardSigmoid": (True, True, 0.2, 0.5),
    "Elu": (True, False, 1.0, 0.0),
    "Softsign": (False, False, 0.0, 0.0),
    "Softplus": (False, False, 0.0, 0.0),
}

Act = tuple[str, float, float]
Extra = dict[str, np.ndarray]  # the optional inputs by name: c0, lens, p, rbh
Step = Callable[..., tuple[np.ndarray, ...]]  # (x_t, *states) -> new states


def np_activation(name: str, alpha: float, beta: float) -> Callable[[np.ndarray], np.ndarray]:
    """The activation `name` on numpy arrays (float64 in the reference)."""
    table: dict[str, Callable[[np.ndarray], np.ndarray]] = {
        "Relu": lambda x: np.maximum(x, 0),
        "Tanh": np.tanh,
        "Sigmoid": lambda x: 1 / (1 + np.exp(-x)),
        "Affine": lambda x: alpha * x + beta,
        "LeakyRelu": lambda x: np.where(x >= 0, x, alpha * x),
        "ThresholdedRelu": lambda x: np.where(x >= alpha, x, 0.0),
        "ScaledTanh": lambda x: alpha * np.tanh(beta * x),
        "HardSigmoid": lambda x: np.clip(alpha * x + beta, 0, 1),
        "Elu": lambda x: np.where(x >= 0, x, alpha * (np.exp(np.minimum(x, 0)) - 1)),
        "Softsign": lambda x: x / (1 + np.abs(x)),
        "Softplus": lambda x: np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x))),
    }
    return table[name]


def state_shape(layout: int, dirs: int, batch: int, hidden: int) -> tuple[int, ...]:
    return (batch, dirs, hidden) if layout else (dirs, batch, hidden)


def _infer(ins: Types, attrs: dict[str, Any]) -> Types:
    cell, layout, dirs = attrs["cell"], attrs["layout"], len(attrs["directions"])
    xp, rt, h0 = ins[:3]
    if xp.ndim != 4 or rt.ndim != 3:
        raise ShapeError(f"recurrence: xproj must be 4-D and rt 3-D, got {xp} and {rt}")
    seq, batch = (xp.shape[1], xp.shape[0]) if layout else xp.shape[:2]
    hidden = rt.shape[1]
    gh = GATES[cell] * hidden
    if xp.shape[2:] != (dirs, gh) or rt.shape != (dirs, hidden, gh):
        raise ShapeError(f"recurrence ({cell}, {dirs} directions, hidden {hidden}): xproj {xp}, rt {rt}")
    state = state_shape(layout, dirs, batch, hidden)
    if h0.shape != state or (cell == "lstm" and ins[3].shape != state):
        raise ShapeError(f"recurrence: initial states must be {list(state)}, got {[t for t in ins[2:4]]}")
    want = input_names(attrs)
    if len(ins) != len(want):
        raise ShapeError(f"recurrence ({cell}) takes inputs {want} with these attributes, got {len(ins)}")
    y = (batch, seq, dirs, hidden) if layout else (seq, dirs, batch, hidden)
    outs = [TensorType(y, xp.dtype), TensorType(state, xp.dtype)]
    return outs + ([TensorType(state, xp.dtype)] if cell == "lstm" else [])


def _flops(ins: Types, attrs: Any, out: TensorType) -> int:
    xp, rt = ins[:2]
    steps = math.prod(xp.shape[:2])
    return 2 * steps * rt.shape[0] * rt.shape[1] * rt.shape[2] + 10 * out.size


def block_rt(rt: np.ndarray, width: int) -> np.ndarray:
    """rt (dirs, H, G*H) with its elements reordered into blocks of `width` gate columns, each
    block's H rows contiguous (the shape stays): what one parallel iteration of the kernel's
    step product reads becomes one stream instead of H slices a row apart."""
    dirs, hidden, gh = rt.shape
    blocks = rt.reshape(dirs, hidden, gh // width, width).transpose(0, 2, 1, 3)
    return np.ascontiguousarray(blocks).reshape(dirs, hidden, gh)


def unblock_rt(rt: np.ndarray, width: int) -> np.ndarray:
    """The inverse of block_rt."""
    dirs, hidden, gh = rt.shape
    return rt.reshape(dirs, gh // width, hidden, width).transpose(0, 2, 1, 3).reshape(dirs, hidden, gh)


def input_names(attrs: Mapping[str, Any]) -> list[str]:
    """The recurrence's inputs in order (module docstring): xp, rt, h0[, c0][, lens][, p][, rbh]."""
    names = ["xp", "rt", "h0"] + (["c0"] if attrs["cell"] == "lstm" else [])
    flags = (("lens", attrs["lens"]), ("p", attrs.get("peepholes")), ("rbh", attrs.get("rbh")))
    return names + [n for n, on in flags if on]


@register_op("recurrence", infer=_infer, pattern="opaque", flops=_flops)
def recurrence(
    xproj: np.ndarray,
    rt: np.ndarray,
    h0: np.ndarray,
    *rest: np.ndarray,
    cell: str,
    layout: int,
    directions: tuple[str, ...],
    acts: tuple[tuple[Act, ...], ...],
    clip: float | None,
    lens: bool,
    peepholes: bool = False,
    rbh: bool = False,
    linear_before_reset: int = 0,
    input_forget: int = 0,
    rt_block: int = 0,
) -> tuple[np.ndarray, ...]:
    """The steps in float64, one direction at a time, batch entries masked past their length
    (`rt_block`: rt's elements are in gate blocks, block_rt)."""
    if rt_block:
        rt = unblock_rt(rt, rt_block)
    names = input_names({"cell": cell, "lens": lens, "peepholes": peepholes, "rbh": rbh})
    extra = dict(zip(names[3:], rest, strict=True))
    xp = np.asarray(xproj, np.float64)
    if layout:  # to layout 0: (seq, batch, dirs, GH) and states (dirs, batch, H)
        xp = xp.transpose(1, 0, 2, 3)
    seq, batch = xp.shape[:2]
    hidden = rt.shape[1]
    lengths = np.full(batch, seq) if not lens else np.clip(extra["lens"].astype(np.int64), 0, seq)
    states = [np.asarray(s, np.float64) for s in [h0] + ([extra["c0"]] if cell == "lstm" else [])]
    states = [s.transpose(1, 0, 2) if layout else s for s in states]
    y = np.zeros((seq, len(directions), batch, hidden))
    finals = []
    for d, direction in enumerate(directions):
        flag = linear_before_reset if cell == "gru" else input_forget
        step = _CELLS[cell](rt[d].astype(np.float64), acts[d], clip, extra, d, flag)
        state = [np.where(lengths[:, None] > 0, s[d], 0.0) for s in states]  # length 0: zeros (ORT)
        for s in range(seq):
            valid = s < lengths
            tt = np.where(valid, s if direction == "forward" else lengths - 1 - s, 0)
            new = step(xp[tt, np.arange(batch), d], *state)
            state = [np.where(valid[:, None], n, o) for n, o in zip(new, state, strict=True)]
            y[np.where(valid, tt, s), d, np.arange(batch)] = np.where(valid[:, None], state[0], 0.0)
        finals.append(state)
    dtype = xproj.dtype
    outs = [y.transpose(2, 0, 1, 3) if layout else y]
    for k in range(len(states)):
        st = np.stack([f[k] for f in finals])
        outs.append(st.transpose(1, 0, 2) if layout else st)
    return tuple(o.astype(dtype) for o in outs)


def _clipped(clip: float | None) -> Callable[[np.ndarray], np.ndarray]:
    return (lambda x: x) if clip is None else (lambda x: np.clip(x, -clip, clip))


def _acts(acts: tuple[Act, ...]) -> list[Callable[[np.ndarray], np.ndarray]]:
    return [np_activation(*a) for a in acts]


def _lstm(
    rt: np.ndarray, acts: tuple[Act, ...], clip: float | None, extra: Extra, d: int, input_forget: int
) -> Step:
    f, g, h = _acts(acts)
    cl = _clipped(clip)
    hidden = rt.shape[0]
    pi, po, pf = np.split(extra["p"][d].astype(np.float64), 3) if "p" in extra else (0.0, 0.0, 0.0)

    def step(x: np.ndarray, hp: np.ndarray, cp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        gates = x + hp @ rt
        gi, go, gf, gc = (gates[:, k * hidden : (k + 1) * hidden] for k in range(4))
        i = f(cl(gi + pi * cp))
        fg = 1 - i if input_forget else f(cl(gf + pf * cp))
        c = fg * cp + i * g(cl(gc))
        o = f(cl(go + po * c))
        return o * h(c), c

    return step


def _gru(rt: np.ndarray, acts: tuple[Act, ...], clip: float | None, extra: Extra, d: int, lbr: int) -> Step:
    f, g = _acts(acts)
    cl = _clipped(clip)
    hidden = rt.shape[0]
    rbh = extra["rbh"][d].astype(np.float64) if "rbh" in extra else 0.0

    def step(x: np.ndarray, hp: np.ndarray) -> tuple[np.ndarray]:
        zr = x[:, : 2 * hidden] + hp @ rt[:, : 2 * hidden]
        z, r = f(cl(zr[:, :hidden])), f(cl(zr[:, hidden:]))
        rh = rt[:, 2 * hidden :]
        pre = x[:, 2 * hidden :] + (r * (hp @ rh + rbh) if lbr else (r * hp) @ rh)
        return ((1 - z) * g(cl(pre)) + z * hp,)

    return step


def _rnn(rt: np.ndarray, acts: tuple[Act, ...], clip: float | None, extra: Extra, d: int, flag: int) -> Step:
    (f,) = _acts(acts)
    cl = _clipped(clip)

    def step(x: np.ndarray, hp: np.ndarray) -> tuple[np.ndarray]:
        return (f(cl(x + hp @ rt)),)

    return step


_CELLS = {"lstm": _lstm, "gru": _gru, "rnn": _rnn}
