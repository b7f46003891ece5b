"""Which GPU (OpenCL) template schedules each op: the table `register_gpu_schedules` applies.

An op missing here has no "opencl" schedule: `default_schedule(op, attrs, target)` raises
`NoScheduleError` for it and the compiler runs it on the CPU. Templates: schedule/gpu/
(injective, rows) and the op-specific ones beside the ops (conv_gpu.py, gemm_gpu.py).

    from tensorir.ops.kernel import op_kernel
    func = op_kernel("softmax", [TensorType((2, 10))], {"axis": -1}, get_target("opencl"))
"""

from __future__ import annotations

from tensorir.ops.registry import OPS, register_schedule
from tensorir.schedule.gpu.injective import schedule_injective_gpu
from tensorir.schedule.gpu.rows import schedule_rows_gpu

KIND = "opencl"

ELEMENTWISE = (
    "abs add cast ceil clip cos div elu equal erf exp floor gelu greater greater_equal hard_sigmoid "
    "hard_swish identity leaky_relu less less_equal log logical_and logical_not logical_or logical_xor "
    "maximum minimum mish mod mul neg pow prelu reciprocal relu reshape round selu sigmoid sign sin "
    "softplus softsign sqrt sub tanh where batch_norm fused"
).split()
MOVEMENT = (
    "concat depth_to_space expand gather gather_elements pad slice space_to_depth split tile "
    "transpose resize layout_transform"
).split()
ROWS = (
    "argmax argmin reduce_l1 reduce_l2 reduce_log_sum reduce_log_sum_exp reduce_max reduce_mean "
    "reduce_min reduce_prod reduce_sum reduce_sum_square softmax log_softmax layer_norm instance_norm "
    "max_pool avg_pool global_avg_pool global_max_pool conv conv_transpose einsum"
).split()


def register_gpu_schedules() -> None:
    """Attach the table's templates as the ops' "opencl" schedules (ops already registered)."""
    from tensorir.ops import conv_gpu, gemm_gpu  # noqa: F401  (op-specific templates register themselves)

    for names, fn in (
        (ELEMENTWISE, schedule_injective_gpu),
        (MOVEMENT, schedule_injective_gpu),
        (ROWS, schedule_rows_gpu),
    ):
        for name in names:
            if name in OPS and KIND not in OPS[name].extra.get("schedules", {}):
                register_schedule(name, KIND)(fn)


def _load_ops() -> None:
    import importlib
    import pkgutil

    import tensorir.ops as pkg

    for mod in pkgutil.iter_modules(pkg.__path__):
        if mod.name.endswith("_compute") or mod.name in ("fused", "layout"):
            importlib.import_module(f"tensorir.ops.{mod.name}")


_load_ops()
register_gpu_schedules()
