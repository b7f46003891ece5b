"""Measurer: good configs time, illegal / crashing / hanging / wrong candidates become errors,
and the Measurer keeps working after each (its worker is restarted)."""

from __future__ import annotations

import dataclasses
import math
import os
import time

import numpy as np
import pytest

from autotune.measure import MeasureOptions, Measurer
from autotune.task import Task
from tensorir.graph.types import TensorType
from tensorir.ops.workload import workload_key

# Fast timing: the candidates are tiny and the machine is shared.
FAST = {"workers": 1, "repeat": 3, "min_repeat_s": 0.001}

# The misbehaving tasks below are module-level classes: spawned workers unpickle them by
# reference (importing tests.autotune.test_measure). A config marks the misbehaviour with
# an extra key, stripped before the real kernel is built.


def _strip(config):
    return {k: v for k, v in (config or {}).items() if not k.startswith("test_")}


@dataclasses.dataclass
class CrashTask(Task):
    """`test_exit` in the config: the worker exits with code 3 while building."""

    def build(self, config, target="host", name=None, passes=True):
        if config and config.get("test_exit"):
            os._exit(3)
        return super().build(_strip(config), target, name, passes)


@dataclasses.dataclass
class HangTask(Task):
    """`test_hang` in the config: building takes a minute."""

    def build(self, config, target="host", name=None, passes=True):
        if config and config.get("test_hang"):
            time.sleep(60)
        return super().build(_strip(config), target, name, passes)


@dataclasses.dataclass
class RunMisbehaviourTask(Task):
    """`test_run` in the config: the kernel builds fine, but preparing its inputs at run time
    (the spec's input transform, applied in `_WorkerState.run`) hangs or segfaults."""

    def build(self, config, target="host", name=None, passes=True):
        func, spec = super().build(_strip(config), target, name, passes)
        mode = (config or {}).get("test_run")
        if mode is None:
            return func, spec
        inner = spec.transforms.get(0, lambda x: x)

        def transform(x):
            if mode == "hang":
                time.sleep(60)
            elif mode == "segfault":
                import ctypes

                ctypes.string_at(0)
            return inner(x)

        return func, dataclasses.replace(spec, transforms={**spec.transforms, 0: transform})


@dataclasses.dataclass
class WrongReferenceTask(Task):
    """The numpy reference is off by one, so every kernel's result is 'wrong'."""

    def reference(self, inputs):
        return [r + 1 for r in super().reference(inputs)]


def _matmul(cls=Task, m=32, k=64, n=48) -> Task:
    ins = (TensorType((m, k)), TensorType((k, n)))
    return cls(key=workload_key("matmul", ins, {}), op="matmul", in_types=ins, attrs={}, flops=2 * m * k * n)


def _assert_good(r, repeat=FAST["repeat"]):
    assert r.error is None, r.error
    assert not r.lost
    assert math.isfinite(r.cost) and r.cost > 0
    assert len(r.costs) == repeat and all(c > 0 for c in r.costs)
    assert math.isfinite(r.spread) and r.spread >= 0
    assert isinstance(r.features, np.ndarray) and r.features.ndim == 1 and r.features.size > 0
    assert np.all(np.isfinite(r.features))
    assert r.build_s > 0


def _assert_failed(r, *words):
    assert r.error is not None
    for w in words:
        assert w in r.error, (w, r.error)
    assert r.cost == math.inf and r.spread == math.inf


def test_good_and_illegal_configs_in_one_batch():
    task = _matmul()
    space = task.space()
    default = space.default()
    with Measurer(MeasureOptions(**FAST)) as m:
        good, illegal, after = m.measure(task, [default, {"gemm_rows": 999}, {**default, "gemm_rows": 4}])
        _assert_good(good)
        assert good.config == default
        _assert_failed(illegal, "build failed", "gemm_rows", "999")
        assert illegal.features is None and illegal.costs == []
        _assert_good(after)  # the next config of the same batch is unaffected


def test_features_legal_and_illegal():
    task = _matmul()
    default = task.space().default()
    configs = [default, {"gemm_rows": 999}, {**default, "gemm_rows": 2}, {"gemm_pack_b": "maybe"}]
    with Measurer(MeasureOptions(**{**FAST, "workers": 2})) as m:
        feats = m.features(task, configs)
        measured = m.measure(task, [default])[0]
    assert len(feats) == 4
    assert feats[1] is None and feats[3] is None
    for f in (feats[0], feats[2]):
        assert isinstance(f, np.ndarray) and f.shape == feats[0].shape and np.all(np.isfinite(f))
    assert not np.array_equal(feats[0], feats[2])
    # the features of a measured candidate are those the search scores it by
    assert np.array_equal(measured.features, feats[0])


def test_build_crash_restarts_worker():
    task = _matmul(CrashTask)
    default = task.space().default()
    with Measurer(MeasureOptions(**FAST)) as m:
        crashed, after = m.measure(task, [{**default, "test_exit": True}, default])
        _assert_failed(crashed, "build crashed the worker", "exit code 3")
        _assert_good(after)  # built by the restarted worker, same batch
        (again,) = m.measure(task, [{**default, "gemm_rows": 4}])
        _assert_good(again)


def test_build_hang_times_out():
    # 5 s, not less: a restarted worker's start-up (spawn + imports) counts against it too
    task = _matmul(HangTask)
    default = task.space().default()
    with Measurer(MeasureOptions(**FAST, build_timeout_s=5)) as m:
        t0 = time.monotonic()
        hung, after = m.measure(task, [{**default, "test_hang": True}, default])
        assert time.monotonic() - t0 < 40
        _assert_failed(hung, "build timed out")
        _assert_good(after)
        (again,) = m.measure(task, [{**default, "gemm_rows": 4}])
        _assert_good(again)


@pytest.mark.parametrize(
    ("mode", "words"),
    [("hang", ["run timed out"]), ("segfault", ["run crashed the worker", "exit code -11"])],
)
def test_run_hang_or_crash(mode, words):
    task = _matmul(RunMisbehaviourTask)
    default = task.space().default()
    with Measurer(MeasureOptions(**FAST, run_timeout_s=3)) as m:
        bad, later = m.measure(task, [{**default, "test_run": mode}, default])
        _assert_failed(bad, *words)
        # built by the worker that was then killed: not measured, and not an error either
        assert later.lost and later.error is None and later.costs == []
        (again,) = m.measure(task, [default])
        _assert_good(again)


def test_wrong_result_detected():
    task = _matmul(WrongReferenceTask)
    with Measurer(MeasureOptions(**FAST)) as m:
        (r,) = m.measure(task, [task.space().default()])
        _assert_failed(r, "wrong result")
        assert r.features is not None  # it built; only the check failed
    with Measurer(MeasureOptions(**FAST, check=False)) as m:
        (r,) = m.measure(task, [task.space().default()])
        _assert_good(r)


def test_cold_timings_wake_the_pool_before_each_timed_call(monkeypatch):
    """Each cold timing flushes the caches, reads the activations back, then wakes the thread
    pool (jit.wake_pool) and only then starts the clock: the flush outlasts the workers'
    spin, and their futex wake-up (150-180 us on the Zen 5 VM) is not what a model's kernel
    pays. The order is checked: wake, clock, call, per timing."""
    from autotune import runners
    from tensorir.runtime import jit

    events = []
    monkeypatch.setattr(jit, "wake_pool", lambda: events.append("wake"))
    clock = time.perf_counter
    monkeypatch.setattr(runners.time, "perf_counter", lambda: events.append("clock") or clock())
    costs = runners.cold_timings(lambda: events.append("call"), [np.ones(4)], 3)
    assert len(costs) == 3 and all(c >= 0 for c in costs)
    assert events == ["wake", "clock", "call", "clock"] * 3
