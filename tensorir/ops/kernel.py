"""Build one op's kernel: compute definition + schedule -> loop function -> machine code.

func = op_kernel("relu", [TensorType((4, 16))], {}, get_target("host"))
outs = run_op("conv", [x, w], attrs)          # compiled for the host and run
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tensorir.errors import TirError
from tensorir.graph.types import TensorType, np_dtype
from tensorir.loop.ir import Buffer, LoopFunc, Seq
from tensorir.ops.dwpw import is_dwpw, schedule_dwpw_nchwc
from tensorir.ops.registry import NoScheduleError, get_op, schedule_for
from tensorir.schedule import Schedule, create_schedule, lower, placeholder
from tensorir.schedule.defaults import schedule_injective
from tensorir.schedule.space import Space, discover_space, pin, use_config
from tensorir.schedule.te import PlaceholderOp, Tensor
from tensorir.target import Target, get_target

if TYPE_CHECKING:
    from tensorir.ops.conv_algorithms import Specialized

ScheduleFn = Callable[[Schedule, Sequence[Tensor], Target], None]


def op_compute(op: str, in_types: Sequence[TensorType], attrs: dict[str, Any]) -> tuple[list, list]:
    """Placeholders for the inputs and the op's output tensors, checked against inference."""
    opdef = get_op(op)
    fn = opdef.extra.get("compute")
    if fn is None:
        raise TirError(f"op '{op}' has no compute definition")
    ins = [argument(t, f"in{i}") for i, t in enumerate(in_types)]
    want = opdef.infer(list(in_types), attrs)
    if all(t.size == 0 for t in want):  # nothing to compute: a kernel that does nothing
        return ins, [empty_tensor(t.shape, t.dtype, f"out{k}") for k, t in enumerate(want)]
    outs = fn(*ins, **attrs)
    outs = list(outs) if isinstance(outs, tuple | list) else [outs]
    got = [TensorType(o.shape, o.dtype) for o in outs]
    if got != [TensorType(t.shape, t.dtype) for t in want]:
        raise TirError(f"compute of '{op}' gives {got}, shape inference says {want}")
    return ins, outs


def empty_tensor(shape: Sequence[int], dtype: str, name: str) -> Tensor:
    """A tensor with a zero dimension: a kernel argument no loop reads or writes (a compute
    returns one for an empty output; `placeholder` and `compute` need positive extents)."""
    shape = tuple(int(d) for d in shape)
    if 0 not in shape or min(shape) < 0:
        raise TirError(f"empty_tensor: shape {list(shape)} is not empty")
    return Tensor(name, shape, dtype, PlaceholderOp(name, shape, dtype))


def argument(t: TensorType, name: str) -> Tensor:
    """The placeholder of an input; an empty one when the input has no elements."""
    return empty_tensor(t.shape, t.dtype, name) if t.size == 0 else placeholder(t.shape, t.dtype, name)


def op_kernel(
    op: str,
    in_types: Sequence[TensorType],
    attrs: dict[str, Any],
    target: Target | str = "host",
    name: str | None = None,
    schedule: ScheduleFn | None = None,
    config: Mapping[str, Any] | None = None,
    passes: bool = True,
) -> LoopFunc:
    """Lower `op` on these input types with its default (or the given) schedule; `config`
    sets the template's knobs (schedule/space.py; missing knobs take their defaults).
    `passes=False`: the loop nest before simplify / vectorize / unroll (annotated loops; what
    the tuner's cost model reads — an order of magnitude cheaper to produce)."""
    target = get_target(target)
    builder = get_op(op).extra.get("kernel")  # registry.register_kernel
    with use_config(config):
        if builder is not None:
            return builder(list(in_types), attrs, target, name or op, passes)
        ins, outs = op_compute(op, in_types, attrs)
        if all(isinstance(t.op, PlaceholderOp) for t in outs):  # all empty: nothing to compute
            params = tuple(Buffer(t.name, t.shape, t.dtype) for t in [*ins, *outs])
            return LoopFunc(name or op, params, Seq(()))
        s = create_schedule(outs)
        sched = schedule or default_schedule(op, attrs, target)
        sched(s, outs, target)
        return lower(s, [*ins, *outs], name=name or op, passes=passes)


def build_kernel(
    op: str,
    in_types: Sequence[TensorType],
    attrs: dict[str, Any],
    target: Target | str = "host",
    config: Mapping[str, Any] | None = None,
    name: str | None = None,
    const_args: frozenset[int] | None = None,
    passes: bool = True,
) -> tuple[LoopFunc, Specialized]:
    """The kernel of a graph node under `config`, after the algorithm choice (which may
    rewrite the op and its weight input: apply `spec.transforms` to those constants)."""
    from tensorir.ops.conv_algorithms import specialize

    target = get_target(target)
    with use_config(config):
        spec = specialize(op, in_types, attrs, target, const_args)
    with pin("algorithm", spec.algorithm):
        func = op_kernel(spec.op, spec.in_types, dict(spec.attrs), target, name, config=config, passes=passes)
    return func, spec


def kernel_space(
    op: str, in_types: Sequence[TensorType], attrs: dict[str, Any], target: Target | str = "host"
) -> Space:
    """The knobs the op's template reads on these inputs (per algorithm)."""
    target = get_target(target)

    def build() -> None:
        from tensorir.ops.conv_algorithms import specialize

        spec = specialize(op, in_types, attrs, target)
        with pin("algorithm", spec.algorithm):
            _, outs = op_compute(spec.op, spec.in_types, dict(spec.attrs))
            if not all(isinstance(t.op, PlaceholderOp) for t in outs):
                default_schedule(spec.op, dict(spec.attrs), target)(create_schedule(outs), outs, target)

    return discover_space(build)


def default_schedule(op: str, attrs: dict[str, Any], target: Target | None = None) -> ScheduleFn:
    """The op's own schedule for `target.kind` (llvm when no target); a fused group uses its
    anchor's (the anchor schedules inline the elementwise epilogue into the stage that writes
    the output). Another kind (opencl) with no schedule for the op raises `NoScheduleError`:
    the compiler runs that op on the CPU.

        default_schedule("softmax", {"axis": -1}, get_target("opencl"))  # the GPU template
    """
    kind = "llvm" if target is None else target.kind
    if op == "fused" and kind == "llvm" and is_dwpw(attrs["body"]):  # passes/fuse_dwpw.py
        return schedule_dwpw_nchwc
    if op == "fused" and attrs["body"].anchor is not None:
        body = attrs["body"]
        op = body.steps[body.anchor].op
    elif op == "fused" and kind != "llvm":  # an elementwise chain: each step must have one
        for step in attrs["body"].steps:
            default_schedule(step.op, dict(step.attrs), target)
    if kind == "llvm":
        return get_op(op).extra.get("schedule") or schedule_injective
    fn = schedule_for(get_op(op), kind)
    if fn is None:
        raise NoScheduleError(f"op '{op}' has no {kind} schedule")
    return fn


def run_op(
    op: str,
    inputs: Sequence[np.ndarray],
    attrs: dict[str, Any],
    target: Target | str = "host",
    config: Mapping[str, Any] | None = None,
) -> list[np.ndarray]:
    """Compile `op` for `target` (with the template knobs in `config`) and run it here,
    through the target's backend (backends/: the host JIT for llvm)."""
    from tensorir.backends import get_backend

    in_types = [TensorType.of(np.asarray(a)) for a in inputs]
    func = op_kernel(op, in_types, attrs, target, config=config)
    out_types = get_op(op).infer(in_types, attrs)
    outs = [np.empty(t.shape, np_dtype(t.dtype)) for t in out_types]
    args = [np.require(a, requirements="C") for a in inputs]  # ascontiguousarray makes 0-d 1-d
    get_backend(target).jit(func, get_target(target))(*args, *outs, *scratch_arrays(func))
    return outs


def scratch_arrays(func: LoopFunc) -> list[np.ndarray]:
    """Fresh workspace for the intermediates `func` keeps outside registers."""
    n = func.attrs.get("num_scratch", 0)
    bufs = func.params[len(func.params) - n :] if n else ()
    return [np.empty(b.shape, np_dtype(b.dtype)) for b in bufs]
