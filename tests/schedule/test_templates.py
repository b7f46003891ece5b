"""Every template and algorithm, for every layer shape of the zoo models, with random legal
knob values, matches the reference.

The workloads are the tuning tasks (autotune.task.extract_tasks) of resnet18, resnet50,
mobilenet_v2_224 and bert_encoder, optimized as the compiler does, de-duplicated by workload
key across models. For each task and each algorithm of its space, one config is a random
sample of that algorithm's branch (seeded by a crc32 of key + algorithm, so a failure
reproduces); the kernel is built with it (Task.build, as the tuner does), run on random
inputs (Winograd kernels on the transformed weight) and compared with Task.reference on the
original inputs: max|err| <= tol * max|ref| + 1e-5. TIR_TEMPLATE_SAMPLES=N checks N random
configs per case instead of one (a wider, slower sweep).

A sampled config must be legal: every value in a knob's choices has to build, so a
ScheduleError here is a template bug (its space offers a value it cannot apply).
"""

from __future__ import annotations

import os
import random
import zlib

import numpy as np
import pytest

from autotune.task import Task, extract_tasks, load_graph
from benchmarks import zoo
from tensorir.graph.types import np_dtype
from tensorir.ops.kernel import scratch_arrays
from tensorir.ops.registry import get_op
from tensorir.runtime.jit import compile_host
from tensorir.schedule.schedule import ScheduleError

MODELS = ("resnet18", "resnet50", "mobilenet_v2_224", "bert_encoder")

# relative to max|ref|; Winograd's transforms lose precision with the tile size m
TOLERANCE = {"winograd2": 2e-6, "winograd4": 4e-5, "winograd6": 6e-5}
DEFAULT_TOL = 1e-4
ABS_FLOOR = 1e-5
SAMPLES = int(os.environ.get("TIR_TEMPLATE_SAMPLES", "1"))


def _collect() -> dict[str, tuple[str, Task]]:
    """{workload key: (first model it occurs in, task)} over MODELS, in model order."""
    tasks: dict[str, tuple[str, Task]] = {}
    for name in MODELS:
        for task in extract_tasks(load_graph(zoo.build(name))):
            tasks.setdefault(task.key, (name, task))
    return tasks


TASKS = _collect()


def _cases() -> list:
    cases = []
    for i, (key, (model, task)) in enumerate(TASKS.items()):
        for algo in task.space().algorithms:
            label = f"{model}-{i}-{task.label}-{algo or 'default'}"
            cases.append(pytest.param(key, algo, id=label))
    return cases


def sample_config(task: Task, algorithm: str, index: int = 0) -> dict:
    """A random config of `algorithm`'s branch (hash-stable seed: crc32 of key + algorithm)."""
    salt = f"|{index}" if index else ""
    rng = random.Random(zlib.crc32(f"{task.key}|{algorithm}{salt}".encode()))
    cfg = {k.name: rng.choice(k.choices) for k in task.space().knobs(algorithm)}
    if algorithm:
        cfg["algorithm"] = algorithm
    return cfg


def run_task(task: Task, cfg: dict, seed: int = 0) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(kernel outputs under cfg, reference outputs) on the task's random inputs."""
    func, spec = task.build(cfg)
    inputs = task.random_inputs(seed)
    args = list(inputs)
    for i, transform in spec.transforms.items():
        args[i] = transform(args[i])
    args = [np.require(a, requirements="C") for a in args]
    out_types = get_op(task.op).infer(list(task.in_types), task.attrs)
    outs = [np.empty(t.shape, np_dtype(t.dtype)) for t in out_types]
    compile_host(func)(*args, *outs, *scratch_arrays(func))
    return outs, task.reference(inputs)


def test_cases_cover_all_algorithms():
    algos = {a for _, t in TASKS.values() for a in t.space().algorithms}
    assert {"direct", "im2col", "winograd2", "winograd4", "winograd6", ""} <= algos
    ops = {t.op if t.op != "fused" else t.label.split("+")[0] for _, t in TASKS.values()}
    assert {"conv2d_nchwc", "dense", "matmul", "max_pool"} <= ops


@pytest.mark.parametrize(("key", "algorithm"), _cases())
def test_template_matches_reference(key: str, algorithm: str):
    _, task = TASKS[key]
    for index in range(SAMPLES):
        check_config(task, algorithm, sample_config(task, algorithm, index))


def check_config(task: Task, algorithm: str, cfg: dict) -> None:
    try:
        outs, refs = run_task(task, cfg)
    except ScheduleError as e:  # a value from the space the template cannot apply: a bug
        pytest.fail(f"sampled config {cfg} is illegal for {task}: {e}")
    tol = TOLERANCE.get(algorithm, DEFAULT_TOL)
    assert len(outs) == len(refs)
    for got, ref in zip(outs, refs, strict=True):
        ref = np.asarray(ref)
        assert got.shape == ref.shape
        err = float(np.max(np.abs(got.astype(np.float64) - ref))) if ref.size else 0.0
        bound = tol * float(np.max(np.abs(ref))) + ABS_FLOOR if ref.size else 0.0
        assert err <= bound, f"{task} config {cfg}: max|err| {err:.3g} > {bound:.3g}"


def test_every_knob_has_a_cost_model_slot():
    """The cost model encodes knobs by name (autotune/knob_features.py): every knob and every
    word value of the zoo's spaces must have a slot, or tuning would lose that signal."""
    from autotune.knob_features import _SLOT, _WORD

    missing = set()
    for _, task in TASKS.values():
        for knobs in task.space().branches.values():
            for k in knobs:
                if k.name not in _SLOT:
                    missing.add(k.name)
                words = {c for c in k.choices if isinstance(c, str) and c != "auto"}
                missing |= {f"{k.name}={w}" for w in words - set(_WORD)}
    assert not missing, f"knobs without a cost-model slot: {sorted(missing)}"
