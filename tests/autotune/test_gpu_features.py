"""GPU features of OpenCL loop nests (autotune/gpu_features.py): launch shape, occupancy,
local memory, barriers, coalescing and vector width; zeros for CPU nests."""

from __future__ import annotations

import math

import numpy as np
from pytest import approx

from autotune.gpu_features import GPU_FEATURE_NAMES, gpu_features
from autotune.knob_features import KNOB_OFFSET
from autotune.measure import MeasureOptions, Measurer
from autotune.task import Task
from tensorir.graph.types import TensorType
from tensorir.ops.workload import workload_key
from tensorir.target import get_target

NVIDIA = get_target("opencl:nvidia")


def _task(op: str, shapes: list, attrs: dict | None = None) -> Task:
    ins = tuple(TensorType(s) for s in shapes)
    attrs = attrs or {}
    return Task(key=workload_key(op, ins, attrs), op=op, in_types=ins, attrs=attrs, flops=1)


def _features(task: Task, config: dict, target=NVIDIA) -> dict[str, float]:
    nest, _ = task.build(config, target, passes=False)
    prof = target.device_profile() if target.kind == "opencl" else None
    return dict(zip(GPU_FEATURE_NAMES, map(float, gpu_features(nest, prof)), strict=True))


def test_cpu_nests_have_no_gpu_features():
    f = _features(_task("dense", [(64, 48), (40, 48)]), {}, get_target("host"))
    assert not any(f.values())


def test_tiled_gemm_launch_local_memory_and_barriers():
    cfg = {"threads_x": 8, "threads_y": 4, "rows": 2, "cols": 2, "tile_k": 8}
    f = _features(_task("dense", [(64, 48), (40, 48)]), cfg)
    assert f["wg_size"] == approx(math.log2(1 + 32))
    groups = math.ceil(64 / 8) * math.ceil(40 / 16)  # rows: 4 x 2, cols: 8 x 2
    assert f["n_groups"] == approx(math.log2(1 + groups))
    assert f["occupancy"] == approx(min(groups / 132, 8) / 8) and 0 < f["wave_eff"] <= 1
    assert f["wg_fill"] == approx(32 / 1024)
    assert f["local_mem"] > 0 and f["barriers"] > 0  # the shared panels of A and B^T


def test_elementwise_on_nchw4c_is_coalesced_float4_and_conv_weights_broadcast():
    relu = _features(_task("relu", [(1, 8, 14, 14, 4)]), {"vector": 4})
    assert relu["coalesced"] == 1.0 and relu["vector_width"] == approx(math.log2(5))
    assert relu["local_mem"] == 0 and relu["barriers"] == 0
    conv = _features(
        _task("conv2d_nchwc", [(1, 8, 14, 14, 4), (8, 8, 3, 3, 4, 4)], {"pads": (1, 1, 1, 1)}), {}
    )
    assert conv["broadcast"] > 0  # adjacent work-items are adjacent pixels: one weight vector


def test_measured_gpu_candidates_carry_gpu_features():
    with Measurer(MeasureOptions(target="opencl:pocl", workers=1, repeat=2)) as m:
        (r,) = m.measure(_task("dense", [(64, 48), (40, 48)]), [{}])
    assert r.error is None, r.error
    gpu = r.features[KNOB_OFFSET - len(GPU_FEATURE_NAMES) : KNOB_OFFSET]
    assert np.all(np.isfinite(gpu)) and gpu[0] > 0
