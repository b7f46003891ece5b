"""TFLite converters for what transformer blocks lower to beside FULLY_CONNECTED: BATCH_MATMUL
(attention scores and their weighted sum) and GATHER (with REDUCE_PROD and SHAPE, the converter's
shape arithmetic for Dense layers on 3-D tensors, which folds to constants at import).

These ops work in TFLite's own axis order: their operands are read as stored (`ctx.nhwc`), as
the attention tensors of a transformer have no channels-first twin.
"""

from __future__ import annotations

from tensorir.errors import UnsupportedOpError
from tensorir.frontend.tflite import TfliteContext, TflOp
from tensorir.frontend.tflite_ops_common import converter
from tensorir.graph.graph import Value


def _adjoint(ctx: TfliteContext, v: Value) -> Value:
    """v with its last two axes swapped (folded for a constant)."""
    rank = ctx.graph.type_of(v).ndim
    return ctx.transpose(v, (*range(rank - 2), rank - 1, rank - 2))


@converter("BATCH_MATMUL")
def batch_matmul(ctx: TfliteContext, op: TflOp) -> None:
    a, b = ctx.input(op, 0), ctx.input(op, 1)
    if op.options.get("AdjX"):
        a = _adjoint(ctx, a)
    if op.options.get("AdjY"):
        b = _adjoint(ctx, b)
    ctx.set_nhwc(op, 0, ctx.add("matmul", [a, b], None, op))


@converter("GATHER")
def gather(ctx: TfliteContext, op: TflOp) -> None:
    if int(op.options.get("BatchDims", 0)):
        raise UnsupportedOpError(f"{op.label}: batch_dims != 0 is not supported")
    rank = ctx.rank(op.inputs[0])
    axis = int(op.options.get("Axis", 0)) % rank
    ctx.set_nhwc(op, 0, ctx.add("gather", [ctx.input(op, 0), ctx.input(op, 1)], {"axis": axis}, op))
