"""The op registry: one registration per op, holding everything tensorir knows about it.

An op has a shape/dtype inference function, a numpy reference implementation and its
traits, all declared where it is registered:

    @register_op("relu", infer=same_as(0), pattern="elementwise", gpu="injective")
    def relu(x):
        return np.maximum(x, 0)

A reference takes the input arrays positionally and the node's attributes as keyword
arguments, and returns one array or a tuple of arrays. The reference is the oracle for
all compiled code and what constant folding runs. Compute definitions and schedules
attach to the same `OpDef` (`register_compute`, `register_schedule`).

Traits (read through the accessors below, never by op name elsewhere):

- `pattern`: "elementwise" (one output element from the same element of each broadcast
  input: fuse_ops chains them, the layout pass packs them), "injective" (data movement
  and per-element ops that are not fused), "reduction", "anchor" (fuse_ops grows a group
  from it, absorbing the elementwise chain after it) or "opaque";
- `tunable`: its template has knobs worth a tuning record (compiler manifest);
- `layout`: how the layout pass (passes/layout.py) handles packed NCHW[x]c activations:
  "conv" (becomes conv2d_nchwc), "pool" (the same pool over (H, W, c)), "global_avg" /
  "global_max" (reduce_mean / reduce_max over (H, W)), None (unpacked first);
- `flops(ins, attrs, out) -> int`: operations of one node, a multiply-add counting 2
  (default: one per output element);
- `gpu`: the GPU template family of its "opencl" schedule (ops/gpu_schedules.py): "injective",
  "rows", "gemm" (ops/gemm_gpu.py), "conv_nchwc" (ops/conv_gpu.py), "winograd"
  (ops/winograd_gpu.py); None: runs on the CPU.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tensorir.errors import TirError
from tensorir.graph.types import TensorType

InferFn = Callable[[list[TensorType], dict[str, Any]], list[TensorType]]
RefFn = Callable[..., Any]
FlopsFn = Callable[[list[TensorType], Mapping[str, Any], TensorType], int]

PATTERNS = ("elementwise", "injective", "reduction", "anchor", "opaque")
LAYOUTS = ("conv", "pool", "global_avg", "global_max")
GPU_FAMILIES = ("injective", "rows", "gemm", "conv_nchwc", "winograd")


@dataclass
class OpDef:
    name: str
    infer: InferFn
    reference: RefFn
    pattern: str = "opaque"
    tunable: bool = False
    layout: str | None = None
    flops: FlopsFn | None = None
    gpu: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # compute, schedule, schedules

    def run_reference(self, inputs: list[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        out = self.reference(*inputs, **attrs)
        outs = list(out) if isinstance(out, tuple | list) else [out]
        return [np.asarray(o) for o in outs]


OPS: dict[str, OpDef] = {}


def register_op(
    name: str,
    infer: InferFn,
    *,
    pattern: str,
    tunable: bool = False,
    layout: str | None = None,
    flops: FlopsFn | None = None,
    gpu: str | None = None,
) -> Callable[[RefFn], RefFn]:
    """Register op `name` with its reference (the decorated function) and traits."""
    _check_trait(name, "pattern", pattern, PATTERNS)
    _check_trait(name, "layout", layout, (None, *LAYOUTS))
    _check_trait(name, "gpu", gpu, (None, *GPU_FAMILIES))

    def deco(fn: RefFn) -> RefFn:
        if name in OPS:
            raise RuntimeError(f"op '{name}' registered twice")
        OPS[name] = OpDef(name, infer, fn, pattern, tunable, layout, flops, gpu)
        return fn

    return deco


def _check_trait(op: str, trait: str, value: Any, allowed: tuple) -> None:
    if value not in allowed:
        raise RuntimeError(f"op '{op}': {trait}={value!r} is not one of {allowed}")


def register_compute(name: str, schedule: Callable | None = None) -> Callable[[Callable], Callable]:
    """Attach a compute definition (and optionally a default schedule) to a registered op.

    A compute takes te placeholders positionally and the attributes as keywords and
    returns the output tensor(s); a schedule is `schedule(s, outputs, target)`.

        @register_compute("relu", schedule=schedule_injective)
        def relu_compute(x, **attrs):
            return compute(x.shape, lambda *i: max_(x[i], 0.0), name="relu")
    """

    def deco(fn: Callable) -> Callable:
        opdef = OPS[name]
        if "compute" in opdef.extra:
            raise RuntimeError(f"op '{name}' has two compute definitions")
        opdef.extra["compute"] = fn
        if schedule is not None:
            opdef.extra["schedule"] = schedule
        return fn

    return deco


def register_kernel(name: str) -> Callable[[Callable], Callable]:
    """Attach a kernel builder to a registered op whose kernel is more than one compute under
    one schedule (the recurrence: its step lowered once inside a loop over time, rnn_compute.py).
    `builder(in_types, attrs, target, name, passes) -> LoopFunc`; `ops.kernel.op_kernel` calls
    it instead of compute + schedule + lower, under the same knob config."""

    def deco(fn: Callable) -> Callable:
        opdef = OPS[name]
        if "compute" in opdef.extra or "kernel" in opdef.extra:
            raise RuntimeError(f"op '{name}' has a compute definition or kernel builder already")
        opdef.extra["kernel"] = fn
        return fn

    return deco


class NoScheduleError(TirError):
    """The op has no schedule for this kind of target (the compiler runs it on the CPU)."""


def register_schedule(name: str, kind: str) -> Callable[[Callable], Callable]:
    """Attach the schedule of op `name` for targets of `kind` ("opencl", ...); the "llvm"
    schedule is the one given to `register_compute`. A GPU template sits beside the CPU one:

        @register_schedule("softmax", "opencl")
        def schedule_softmax_gpu(s, outputs, target): ...
    """

    def deco(fn: Callable) -> Callable:
        schedules = OPS[name].extra.setdefault("schedules", {})
        if kind in schedules:
            raise RuntimeError(f"op '{name}' has two {kind} schedules")
        schedules[kind] = fn
        return fn

    return deco


def schedule_for(opdef: OpDef, kind: str) -> Callable | None:
    """The op's schedule for targets of `kind` (None: it has none)."""
    if kind == "llvm":
        return opdef.extra.get("schedule")
    return opdef.extra.get("schedules", {}).get(kind)


def get_op(name: str) -> OpDef:
    _load_all()
    try:
        return OPS[name]
    except KeyError:
        raise TirError(f"unknown graph op '{name}'") from None


def all_ops() -> dict[str, OpDef]:
    _load_all()
    return dict(OPS)


# ---- trait accessors: what fuse_ops, the layout pass, the compiler and flops read ----------
def _opdef(op: str) -> OpDef | None:
    _load_all()
    return OPS.get(op)


def op_pattern(op: str) -> str:
    """The op's fusion pattern (PATTERNS); graph pseudo-ops (input, constant) are opaque."""
    d = _opdef(op)
    return d.pattern if d else "opaque"


def is_elementwise(op: str) -> bool:
    return op_pattern(op) == "elementwise"


def is_anchor(op: str) -> bool:
    """Whether fuse_ops grows a group from `op`, absorbing the elementwise chain after it."""
    return op_pattern(op) == "anchor"


def kernel_op(op: str, attrs: Mapping[str, Any]) -> str:
    """The op whose template drives a kernel: a fused node's anchor step, else `op`."""
    body = attrs.get("body") if op == "fused" else None
    if body is not None and body.anchor is not None:
        return body.steps[body.anchor].op
    return op


def is_tunable(op: str, attrs: Mapping[str, Any] | None = None) -> bool:
    """Whether a kernel (a fused one by its anchor, given `attrs`) has knobs worth tuning."""
    d = _opdef(kernel_op(op, attrs or {}))
    return bool(d and d.tunable)


def layout_rule(op: str) -> str | None:
    """How the layout pass treats `op` on packed activations (LAYOUTS; None: unpack first)."""
    d = _opdef(op)
    return d.layout if d else None


def gpu_template(op: str) -> str | None:
    """The GPU template family of the op's "opencl" schedule (None: it has none)."""
    d = _opdef(op)
    return d.gpu if d else None


def op_flops(op: str, ins: list[TensorType], attrs: Mapping[str, Any], out: TensorType) -> int:
    """Operations of one `op` node with inputs `ins` and (first) output `out`."""
    d = _opdef(op)
    if d is not None and d.flops is not None:
        return int(d.flops(ins, attrs, out))
    return out.size


def per_output(k: int) -> FlopsFn:
    """A flops trait: `k` operations per output element (softmax, norms: 5)."""
    return lambda ins, attrs, out: k * out.size


def reduction_flops(ins: list[TensorType], attrs: Mapping[str, Any], out: TensorType) -> int:
    """A flops trait: one operation per input element (or per output, if more)."""
    return max(ins[0].size, out.size)


def window_flops(ins: list[TensorType], attrs: Mapping[str, Any], out: TensorType) -> int:
    """A flops trait for pools: one operation per window element of each output."""
    window = math.prod(int(k) for k in attrs.get("kernel_shape", ()))
    return max(ins[0].size, out.size * window)


_loaded = False


def _load_all() -> None:
    """Import every op family module so its registrations run."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    import importlib
    import pkgutil

    import tensorir.ops as pkg

    for mod in pkgutil.iter_modules(pkg.__path__):
        if mod.name not in ("registry", "infer", "kernel"):
            importlib.import_module(f"tensorir.ops.{mod.name}")
    # every op's `gpu` template attached now that all are registered: gpu_schedules attaches
    # them when imported, which the alphabetical walk above does before ops/p*.py register
    from tensorir.ops.gpu_schedules import register_gpu_schedules

    register_gpu_schedules()
