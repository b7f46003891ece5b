"""Measuring OpenCL candidates on PoCL through the same Measurer the CPU tuner uses: the
OpenCL builder renders the kernel, the OpenCL runner times it with profiling events after
checking its outputs against the numpy reference (rtol 1e-3 of max |ref| + atol 1e-5, the
Measurer's defaults). PoCL must be present: these tests fail, never skip, without it."""

from __future__ import annotations

import math
import random

import numpy as np

from autotune.builders import OpenCLBuilder, builder_for
from autotune.measure import MeasureOptions, Measurer
from autotune.runners import OpenCLRunner, runner_for
from autotune.task import Task
from tensorir.graph.types import TensorType
from tensorir.ops.workload import workload_key
from tensorir.plan import GpuKernel
from tensorir.target import get_target
from tests.autotune.test_measure import WrongReferenceTask

POCL = MeasureOptions(target="opencl:pocl", workers=1, repeat=3)


def _dense(cls=Task, m=64, k=48, n=40) -> Task:
    ins = (TensorType((m, k)), TensorType((n, k)))
    return cls(key=workload_key("dense", ins, {}), op="dense", in_types=ins, attrs={}, flops=2 * m * k * n)


def test_the_target_kind_picks_the_builder_and_runner():
    gpu, host = get_target("opencl:pocl"), get_target("host")
    assert isinstance(builder_for(gpu), OpenCLBuilder) and isinstance(runner_for(gpu, POCL), OpenCLRunner)
    assert runner_for(gpu, POCL).profile == "pocl"
    assert not isinstance(builder_for(host), OpenCLBuilder)
    built = builder_for(gpu).build(_dense(), {})
    assert isinstance(built.kernel, GpuKernel) and "__kernel" in built.kernel.source


def test_gpu_template_configs_are_measured_on_pocl():
    """The GEMM template's space (threads, register tile, tile_k) sampled: every candidate
    builds, its result matches, and it gets device timings and cost-model features."""
    task = _dense()
    space = task.space("opencl:pocl")
    assert {"threads_x", "threads_y", "tile_k"} <= {k.name for k in space.knobs()}
    rng = random.Random(0)
    configs = [space.default(), *(space.sample(rng) for _ in range(3))]
    with Measurer(POCL) as m:
        results = m.measure(task, configs)
    for r in results:
        assert r.error is None, (r.config, r.error)
        assert len(r.costs) == 3 and all(0 < c < 1 for c in r.costs)
        assert math.isfinite(r.spread)
        assert isinstance(r.features, np.ndarray) and np.all(np.isfinite(r.features))


def test_a_wrong_gpu_result_is_an_error_not_a_timing():
    with Measurer(POCL) as m:
        (r,) = m.measure(_dense(WrongReferenceTask), [{}])
    assert r.error is not None and "wrong result" in r.error and r.cost == math.inf
