"""The op registry: one registration per op, holding everything tensorir knows about it.

An op has a shape/dtype inference function and a numpy reference implementation.
The reference is the oracle for all compiled code and what constant folding runs.
Later parts (compute definitions, default schedules, tuning spaces) attach to the
same `OpDef`.

    @register_op("relu", infer=same_as(0))
    def relu(x):
        return np.maximum(x, 0)

A reference takes the input arrays positionally and the node's attributes as
keyword arguments, and returns one array or a tuple of arrays.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tensorir.errors import TirError
from tensorir.graph.types import TensorType

InferFn = Callable[[list[TensorType], dict[str, Any]], list[TensorType]]
RefFn = Callable[..., Any]


@dataclass
class OpDef:
    name: str
    infer: InferFn
    reference: RefFn
    extra: dict[str, Any] = field(default_factory=dict)

    def run_reference(self, inputs: list[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        out = self.reference(*inputs, **attrs)
        outs = list(out) if isinstance(out, tuple | list) else [out]
        return [np.asarray(o) for o in outs]


OPS: dict[str, OpDef] = {}


def register_op(name: str, infer: InferFn, **extra: Any) -> Callable[[RefFn], RefFn]:
    def deco(fn: RefFn) -> RefFn:
        if name in OPS:
            raise RuntimeError(f"op '{name}' registered twice")
        OPS[name] = OpDef(name, infer, fn, dict(extra))
        return fn

    return deco


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
