"""What every TFLite converter shares: the registry (`CONVERTERS`, filled by the `converter`
decorator as the tflite_ops_* modules are imported: tflite_ops.py imports them all) and the
helpers that apply a fused activation and pick an op's layout.

Layout-neutral ops follow their inputs: they run on the channels-first twins when an input
has one and all have one rank (`follows_nchw`), constants broadcast to that rank and transposed
(`operand_nchw`), else in TFLite's order; `set_output` stores the result in the layout chosen.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tensorir.errors import UnsupportedOpError
from tensorir.frontend.tflite_context import TfliteContext, to_cf
from tensorir.frontend.tflite_reader import TflOp
from tensorir.graph.graph import Value

Converter = Callable[[TfliteContext, TflOp], None]
CONVERTERS: dict[str, Converter] = {}

# fused_activation_function: ActivationFunctionType -> (graph op, attrs)
_ACTIVATIONS: dict[int, tuple[str, dict[str, Any]] | None] = {
    0: None,
    1: ("relu", {}),
    2: ("clip", {"min": -1.0, "max": 1.0}),
    3: ("clip", {"min": 0.0, "max": 6.0}),
    4: ("tanh", {}),
}


def converter(*codes: str) -> Callable[[Converter], Converter]:
    def deco(fn: Converter) -> Converter:
        for c in codes:
            if c in CONVERTERS:
                raise RuntimeError(f"TFLite op {c} has two converters")
            CONVERTERS[c] = fn
        return fn

    return deco


# ---- helpers ------------------------------------------------------------------------------
def activation(ctx: TfliteContext, op: TflOp, v: Value) -> Value:
    """v with the op's fused activation function applied."""
    code = int(op.options.get("FusedActivationFunction", 0))
    if code not in _ACTIVATIONS:
        raise UnsupportedOpError(f"{op.label}: fused activation function {code} is not supported")
    act = _ACTIVATIONS[code]
    return v if act is None else ctx.add(act[0], [v], act[1], op)


def set_output(ctx: TfliteContext, op: TflOp, v: Value, nchw: bool) -> None:
    """Output 0 of op: `v`, channels-first (its twin) when `nchw`."""
    (ctx.set_nchw if nchw else ctx.set_nhwc)(op, 0, v)


def follows_nchw(ctx: TfliteContext, ins: Sequence[int]) -> bool:
    """Whether an op on tensors `ins` runs on NCHW twins: all rank 4 (constants aside) and one has a twin."""
    live = [i for i in ins if ctx.const_of(i) is None]
    if not live or not any(ctx.has_twin(i) for i in live):
        return False
    rank = ctx.rank(live[0])
    return rank >= 3 and all(ctx.rank(i) == rank for i in live)


def _live_rank(ctx: TfliteContext, ins: Sequence[int]) -> int:
    return max(ctx.rank(i) for i in ins if ctx.const_of(i) is None)


def operand_nchw(ctx: TfliteContext, i: int, rank: int) -> Value:
    """Tensor i as an operand of an NCHW op: constants broadcast to rank 4, then transposed."""
    data = ctx.const_of(i)
    if data is None:
        return ctx.nchw(i)
    if data.size == 1 and data.ndim <= 1:
        return ctx.const_operand(i, (), ())
    return ctx.const_operand(i, (1,) * (rank - data.ndim) + data.shape, to_cf(rank))


def first_operand(ctx: TfliteContext, op: TflOp) -> tuple[Value, bool]:
    """The op's first input in the layout it has (its channels-first twin when it has one), and
    whether that is channels-first."""
    i = op.inputs[0]
    nchw = ctx.has_twin(i)
    return (ctx.nchw(i) if nchw else ctx.nhwc(i)), nchw


def elementwise_operands(ctx: TfliteContext, op: TflOp, count: int = 2) -> tuple[list[Value], bool]:
    """The op's first `count` inputs in one layout (channels-first when they follow a twin:
    follows_nchw), and whether that is channels-first."""
    ins = op.inputs[:count]
    if follows_nchw(ctx, ins):
        return [operand_nchw(ctx, i, _live_rank(ctx, ins)) for i in ins], True
    return [ctx.nhwc(i) for i in ins], False
