"""The `fused` op: a small chain of graph ops executed as one kernel.

`fuse_ops` replaces, e.g., conv -> add(bias) -> relu by one node

    %9 = fused(%x, %w, %b) body=conv+add+relu : f32[1,64,56,56]

whose `body` lists the steps. A step reads external inputs (argument k) or the output
of an earlier step. Shape inference, the numpy reference and the compute definition
all run the steps in order, so a fused node means exactly what the chain meant.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tensorir.graph.types import TensorType
from tensorir.ops.registry import get_op, op_flops, register_compute, register_op


@dataclass(frozen=True)
class Step:
    op: str
    attrs: tuple[tuple[str, Any], ...]
    args: tuple[int, ...]  # k < n_inputs: external input k; else output of step k - n_inputs


@dataclass(frozen=True)
class FusedBody:
    steps: tuple[Step, ...]
    n_inputs: int
    anchor: int | None = None  # index of the step whose schedule drives the kernel

    def __str__(self) -> str:
        return "+".join(s.op for s in self.steps)


def _run(body: FusedBody, inputs: list, apply) -> Any:
    values = list(inputs)
    for step in body.steps:
        (out,) = apply(step, [values[a] for a in step.args])
        values.append(out)
    return values[-1]


def _infer(ins: list[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
    body: FusedBody = attrs["body"]
    return [_run(body, ins, lambda s, xs: get_op(s.op).infer(xs, dict(s.attrs)))]


def _fused_flops(ins: list[TensorType], attrs: Mapping[str, Any], out: TensorType) -> int:
    """The sum of its steps' counts, on the types shape inference gives them."""
    counts: list[int] = []

    def step(s: Step, xs: list[TensorType]) -> list[TensorType]:
        ys = get_op(s.op).infer(xs, dict(s.attrs))
        counts.append(op_flops(s.op, xs, dict(s.attrs), ys[0]))
        return ys

    _run(attrs["body"], list(ins), step)
    return sum(counts)


@register_op("fused", infer=_infer, pattern="opaque", flops=_fused_flops, gpu="injective")
def fused(*inputs, body: FusedBody):
    return _run(body, list(inputs), lambda s, xs: get_op(s.op).run_reference(xs, dict(s.attrs)))


def _compute_step(index: int, step: Step, tensors: list) -> list:
    from tensorir.schedule.te import name_scope

    fn = get_op(step.op).extra.get("compute")
    if fn is None:
        from tensorir.errors import TirError

        raise TirError(f"op '{step.op}' has no compute definition")
    with name_scope(f"f{index}_"):
        out = fn(*tensors, **dict(step.attrs))
    return list(out) if isinstance(out, tuple | list) else [out]


@register_compute("fused")
def fused_compute(*inputs, body: FusedBody):
    steps = iter(range(len(body.steps)))
    return _run(body, list(inputs), lambda s, xs: _compute_step(next(steps), s, xs))
