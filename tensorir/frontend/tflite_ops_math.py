"""TFLite converters for math beyond the activations: SQUARE, LOG, RSQRT, SQUARED_DIFFERENCE, the
comparisons (EQUAL, NOT_EQUAL, LESS, LESS_EQUAL, GREATER, GREATER_EQUAL: bool outputs) and
SELECT / SELECT_V2 (what `tf.where` and DivNoNan convert to; Spotify Basic Pitch's log-magnitude
normalization uses all but RSQRT).

Elementwise, so each follows its operands' layout as the binary ops of tflite_ops.py do: on the
channels-first twins when an operand has one (tflite_ops_common.elementwise_operands).
"""

from __future__ import annotations

from tensorir.frontend.tflite import TfliteContext, TflOp
from tensorir.frontend.tflite_ops_common import converter, elementwise_operands, first_operand, set_output
from tensorir.graph.graph import Value

_COMPARE = {
    "EQUAL": "equal",
    "LESS": "less",
    "LESS_EQUAL": "less_equal",
    "GREATER": "greater",
    "GREATER_EQUAL": "greater_equal",
}


@converter("SQUARE")
def square(ctx: TfliteContext, op: TflOp) -> None:
    x, nchw = first_operand(ctx, op)
    set_output(ctx, op, ctx.add("mul", [x, x], None, op), nchw)


@converter("LOG")
def log(ctx: TfliteContext, op: TflOp) -> None:
    x, nchw = first_operand(ctx, op)
    set_output(ctx, op, ctx.add("log", [x], None, op), nchw)


@converter("RSQRT")
def rsqrt(ctx: TfliteContext, op: TflOp) -> None:
    x, nchw = first_operand(ctx, op)
    set_output(ctx, op, ctx.add("reciprocal", [ctx.add("sqrt", [x], None, op)], None, op), nchw)


@converter("SQUARED_DIFFERENCE")
def squared_difference(ctx: TfliteContext, op: TflOp) -> None:
    args, nchw = elementwise_operands(ctx, op)
    d = ctx.add("sub", args, None, op)
    set_output(ctx, op, ctx.add("mul", [d, d], None, op), nchw)


def _compare(ctx: TfliteContext, op: TflOp) -> None:
    args, nchw = elementwise_operands(ctx, op)
    set_output(ctx, op, ctx.add(_COMPARE[op.code], args, None, op), nchw)


for _code in _COMPARE:
    converter(_code)(_compare)


@converter("NOT_EQUAL")
def not_equal(ctx: TfliteContext, op: TflOp) -> None:
    args, nchw = elementwise_operands(ctx, op)
    set_output(ctx, op, ctx.add("logical_not", [ctx.add("equal", args, None, op)], None, op), nchw)


@converter("SELECT", "SELECT_V2")
def select(ctx: TfliteContext, op: TflOp) -> None:
    """where(condition, x, y); SELECT_V2 broadcasts the three, SELECT also takes a rank-1
    condition for a higher-rank x that picks whole rows (along the first axis)."""
    cond_rank, x_rank = ctx.rank(op.inputs[0]), ctx.rank(op.inputs[1])
    if op.code == "SELECT" and cond_rank == 1 and x_rank > 1:
        cond = _rows(ctx, op, ctx.input(op, 0), x_rank)
        args: list[Value] = [cond, ctx.input(op, 1), ctx.input(op, 2)]
        return set_output(ctx, op, ctx.add("where", args, None, op), False)
    args, nchw = elementwise_operands(ctx, op, 3)
    set_output(ctx, op, ctx.add("where", args, None, op), nchw)


def _rows(ctx: TfliteContext, op: TflOp, cond: Value, rank: int) -> Value:
    """A rank-1 condition (n,) as (n, 1, ..., 1) of `rank` axes."""
    (n,) = ctx.graph.type_of(cond).shape
    return ctx.add("reshape", [cond], {"shape": (n,) + (1,) * (rank - 1)}, op)
