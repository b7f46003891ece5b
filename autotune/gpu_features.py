"""GPU features of a kernel's loop nest, for the cost model of OpenCL devices.

The CPU loop features (features.py) see a GPU nest's `group.*` / `local.*` loops as plain
loops; what decides a GPU kernel's speed is how that work maps onto the device:

  wg_size        -- log of the work-group size (product of the local.* extents).
  n_groups       -- log of the number of work-groups (product of the group.* extents).
  occupancy      -- work-groups per compute unit of the profile, capped at 8, / 8 (a rough
                    measure of latency hiding; 0 for CPU nests).
  wave_eff       -- groups / (ceil(groups / CUs) * CUs): how full the last wave is.
  wg_fill        -- work-group size / the device's max work-group size.
  local_mem      -- local (shared) memory bytes per work-group / the device's local memory.
  barriers       -- log of the number of barriers in the nest (static).
  coalesced      -- fraction of the global loads and stores (by trip-weighted count) where
                    adjacent local.x work-items touch adjacent elements (or vectors).
  broadcast      -- fraction where all local.x work-items read the same element.
  vector_width   -- log of the widest global access (float4: 4 lanes).

A CPU nest (no GPU loops) gets zeros: one feature vector layout serves both, and the cost
model is kept per device anyway (costmodel-<device key>.json).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tensorir.loop import ir
from tensorir.loop.simplify import simplify
from tensorir.loop.visitor import children, substitute, walk

GPU_FEATURE_NAMES = (
    "wg_size",
    "n_groups",
    "occupancy",
    "wave_eff",
    "wg_fill",
    "local_mem",
    "barriers",
    "coalesced",
    "broadcast",
    "vector_width",
)
NUM_GPU_FEATURES = len(GPU_FEATURE_NAMES)
_GPU = (ir.ForKind.GPU_BLOCK, ir.ForKind.GPU_THREAD)


def _log(x: float) -> float:
    return math.log2(1.0 + max(0.0, x))


def gpu_features(func: ir.LoopFunc, profile: Any = None) -> np.ndarray:
    """float32 vector of NUM_GPU_FEATURES (module docstring); zeros for a CPU nest."""
    out = np.zeros(NUM_GPU_FEATURES, dtype=np.float32)
    launch: dict[str, int] = {}
    for n in walk(func.body):
        if isinstance(n, ir.For) and n.kind in _GPU and isinstance(n.extent, ir.Const):
            launch[n.thread] = max(launch.get(n.thread, 1), int(n.extent.value))
    if not launch:
        return out
    wg = math.prod(v for k, v in launch.items() if k.startswith("local."))
    groups = math.prod(v for k, v in launch.items() if k.startswith("group."))
    cus = getattr(profile, "compute_units", 1) or 1
    max_wg = getattr(profile, "max_work_group_size", 1024) or 1024
    local_bytes = getattr(profile, "local_mem_bytes", 0) or 0
    shared = sum(
        b.size * ir_bytes(b.dtype)
        for b in _buffers(func)
        if b.scope == "shared"  # one allocation per work-group
    )
    coalesced, broadcast, width = _global_access_stats(func, _local_x_var(func))
    values = {
        "wg_size": _log(wg),
        "n_groups": _log(groups),
        "occupancy": min(groups / cus, 8.0) / 8.0,
        "wave_eff": groups / (math.ceil(groups / cus) * cus),
        "wg_fill": wg / max_wg,
        "local_mem": shared / local_bytes if local_bytes else _log(shared),
        "barriers": _log(sum(isinstance(n, ir.Barrier) for n in walk(func.body))),
        "coalesced": coalesced,
        "broadcast": broadcast,
        "vector_width": _log(width),
    }
    for i, name in enumerate(GPU_FEATURE_NAMES):
        out[i] = values[name]
    return out


def ir_bytes(dtype: str) -> int:
    from tensorir.dtypes import dtype_bits

    return max(1, dtype_bits(dtype) // 8)


def _buffers(func: ir.LoopFunc) -> list[ir.Buffer]:
    return [n.buffer for n in walk(func.body) if isinstance(n, ir.Allocate)]


def _local_x_var(func: ir.LoopFunc) -> ir.Var | None:
    for n in walk(func.body):
        if isinstance(n, ir.For) and n.thread == "local.x":
            return n.var
    return None


def _accesses(node: Any, loops: tuple[ir.For, ...] = ()) -> list[tuple[Any, tuple[ir.For, ...]]]:
    """Every global Load / Store with the loops around it."""
    out = []
    if isinstance(node, ir.Load | ir.Store) and node.buffer.scope == "global":
        out.append((node, loops))
    inner = (*loops, node) if isinstance(node, ir.For) else loops
    for child in children(node):
        out += _accesses(child, inner)
    return out


def _step(index: ir.Expr, var: ir.Var, loops: tuple[ir.For, ...]) -> int | None:
    """How far the index moves when `var` goes 0 -> 1 (every other loop var at its start)."""
    zero = {lp.var: lp.start for lp in loops if lp.var is not var}
    at = [simplify(substitute(index, {**zero, var: ir.Const(k, var.dtype)})) for k in (0, 1)]
    if not all(isinstance(e, ir.Const) for e in at):
        return None
    return int(at[1].value) - int(at[0].value)


def _global_access_stats(func: ir.LoopFunc, tx: ir.Var | None) -> tuple[float, float, int]:
    """(coalesced fraction, broadcast fraction, widest lanes) over global loads and stores:
    coalesced when work-item tx+1 touches the element (or vector) after tx's."""
    n = coalesced = broadcast = 0
    width = 1
    for node, loops in _accesses(func.body):
        idx = node.index.base if isinstance(node.index, ir.Ramp) else node.index
        lanes = node.index.lanes if isinstance(node.index, ir.Ramp) else 1
        for lp in loops:  # a vectorized loop (before lowering) is the vector's lanes
            if lp.kind is ir.ForKind.VECTORIZED and _step(idx, lp.var, loops) == 1:
                lanes = max(lanes, int(lp.extent.value) if isinstance(lp.extent, ir.Const) else 1)
        width = max(width, lanes)
        n += 1
        step = _step(idx, tx, loops) if tx is not None else None
        broadcast += step == 0
        coalesced += step is not None and abs(step) == lanes
    return (coalesced / n, broadcast / n, width) if n else (0.0, 0.0, width)
