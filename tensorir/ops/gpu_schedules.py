"""Applies the `gpu` trait: each op registered with `gpu=FAMILY` gets that family's template
as its "opencl" schedule (`register_schedule(op, "opencl")`).

Families: "injective" and "rows" (schedule/gpu/) are generic and attached here; "gemm"
(ops/gemm_gpu.py) and "conv_nchwc" (ops/conv_gpu.py) register their ops themselves, so here
their modules are only imported. An op without the trait has no "opencl" schedule:
`default_schedule(op, attrs, target)` raises `NoScheduleError` for it and the compiler runs
it on the CPU. A schedule registered explicitly for an op wins over its family's template.

    from tensorir.ops.kernel import op_kernel
    func = op_kernel("softmax", [TensorType((2, 10))], {"axis": -1}, get_target("opencl"))
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from tensorir.ops.registry import GPU_FAMILIES, OPS, register_schedule
from tensorir.schedule.gpu.injective import schedule_injective_gpu
from tensorir.schedule.gpu.rows import schedule_rows_gpu

KIND = "opencl"

TEMPLATES: dict[str, Callable] = {"injective": schedule_injective_gpu, "rows": schedule_rows_gpu}
SELF_REGISTERING = {
    "gemm": "tensorir.ops.gemm_gpu",
    "conv_nchwc": "tensorir.ops.conv_gpu",
    "winograd": "tensorir.ops.winograd_gpu",
}
assert set(TEMPLATES) | set(SELF_REGISTERING) == set(GPU_FAMILIES)


def register_gpu_schedules() -> None:
    """Attach each registered op's `gpu` template as its "opencl" schedule."""
    for module in SELF_REGISTERING.values():
        importlib.import_module(module)
    for name, opdef in list(OPS.items()):
        fn = TEMPLATES.get(opdef.gpu or "")
        if fn is not None and KIND not in opdef.extra.get("schedules", {}):
            register_schedule(name, KIND)(fn)


def _load_ops() -> None:
    import pkgutil

    import tensorir.ops as pkg

    for mod in pkgutil.iter_modules(pkg.__path__):
        if mod.name.endswith("_compute") or mod.name in ("fused", "layout"):
            importlib.import_module(f"tensorir.ops.{mod.name}")


_load_ops()
register_gpu_schedules()
