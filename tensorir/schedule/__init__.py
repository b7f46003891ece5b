"""Tensor expressions, schedules (recorded as traces) and lowering to loop IR.

from tensorir.schedule import placeholder, reduce_axis, compute, sum_, create_schedule, lower
A = placeholder((64, 32), "float32", "A"); B = placeholder((32, 16), "float32", "B")
k = reduce_axis(32, "k")
C = compute((64, 16), lambda i, j: sum_(A[i, k] * B[k, j], axis=k), name="C")
s = create_schedule([C])
io, ii = s[C].split(C.op.axis[0], factor=8)
s[C].parallel(io)
func = lower(s, [A, B, C], name="matmul")
"""

from tensorir.schedule.lower import lower
from tensorir.schedule.schedule import MAX_LANES, Schedule, ScheduleError, Stage, create_schedule
from tensorir.schedule.te import (
    IterVar,
    Tensor,
    TensorExprError,
    all_,
    any_,
    call,
    cast,
    compute,
    if_then_else,
    max_,
    min_,
    placeholder,
    prod_,
    reduce_axis,
    select,
    sum_,
)
from tensorir.schedule.trace import Instruction, Trace, TraceError, verify_trace_roundtrip

__all__ = [
    "MAX_LANES",
    "Instruction",
    "IterVar",
    "Schedule",
    "ScheduleError",
    "Stage",
    "Tensor",
    "TensorExprError",
    "Trace",
    "TraceError",
    "all_",
    "any_",
    "call",
    "cast",
    "compute",
    "create_schedule",
    "if_then_else",
    "lower",
    "max_",
    "min_",
    "placeholder",
    "prod_",
    "reduce_axis",
    "select",
    "sum_",
    "verify_trace_roundtrip",
]
