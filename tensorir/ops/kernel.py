"""Build one op's kernel: compute definition + schedule -> loop function -> machine code.

func = op_kernel("relu", [TensorType((4, 16))], {}, get_target("host"))
outs = run_op("conv", [x, w], attrs)          # compiled for the host and run
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tensorir.errors import TirError
from tensorir.graph.types import TensorType, np_dtype
from tensorir.loop.ir import LoopFunc
from tensorir.ops.registry import get_op
from tensorir.schedule import Schedule, create_schedule, lower, placeholder
from tensorir.schedule.defaults import schedule_injective
from tensorir.schedule.te import Tensor
from tensorir.target import Target, get_target

ScheduleFn = Callable[[Schedule, Sequence[Tensor], Target], None]


def op_compute(op: str, in_types: Sequence[TensorType], attrs: dict[str, Any]) -> tuple[list, list]:
    """Placeholders for the inputs and the op's output tensors, checked against inference."""
    opdef = get_op(op)
    fn = opdef.extra.get("compute")
    if fn is None:
        raise TirError(f"op '{op}' has no compute definition")
    ins = [placeholder(t.shape, t.dtype, f"in{i}") for i, t in enumerate(in_types)]
    outs = fn(*ins, **attrs)
    outs = list(outs) if isinstance(outs, tuple | list) else [outs]
    want = opdef.infer(list(in_types), attrs)
    got = [TensorType(o.shape, o.dtype) for o in outs]
    if got != [TensorType(t.shape, t.dtype) for t in want]:
        raise TirError(f"compute of '{op}' gives {got}, shape inference says {want}")
    return ins, outs


def op_kernel(
    op: str,
    in_types: Sequence[TensorType],
    attrs: dict[str, Any],
    target: Target | str = "host",
    name: str | None = None,
    schedule: ScheduleFn | None = None,
) -> LoopFunc:
    """Lower `op` on these input types with its default (or the given) schedule."""
    target = get_target(target)
    ins, outs = op_compute(op, in_types, attrs)
    s = create_schedule(outs)
    sched = schedule or get_op(op).extra.get("schedule") or schedule_injective
    sched(s, outs, target)
    return lower(s, [*ins, *outs], name=name or op)


def run_op(
    op: str, inputs: Sequence[np.ndarray], attrs: dict[str, Any], target: Target | str = "host"
) -> list[np.ndarray]:
    """Compile `op` for the host and run it; outputs in op order."""
    from tensorir.runtime.jit import compile_host

    in_types = [TensorType.of(np.asarray(a)) for a in inputs]
    func = op_kernel(op, in_types, attrs, target)
    out_types = get_op(op).infer(in_types, attrs)
    outs = [np.empty(t.shape, np_dtype(t.dtype)) for t in out_types]
    args = [np.require(a, requirements="C") for a in inputs]  # ascontiguousarray makes 0-d 1-d
    compile_host(func, target)(*args, *outs, *scratch_arrays(func))
    return outs


def scratch_arrays(func: LoopFunc) -> list[np.ndarray]:
    """Fresh workspace for the intermediates `func` keeps outside registers."""
    n = func.attrs.get("num_scratch", 0)
    bufs = func.params[len(func.params) - n :] if n else ()
    return [np.empty(b.shape, np_dtype(b.dtype)) for b in bufs]
