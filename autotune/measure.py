"""Measuring candidate kernels safely: worker processes, time-outs, checked results.

    with Measurer(MeasureOptions(workers=2)) as m:
        results = m.measure(task, [cfg1, cfg2, ...])     # one MeasureResult per config

Each worker is a spawned process holding the current task's inputs and reference outputs,
and the builder and runner of the target's kind (autotune/builders.py, autotune/runners.py).
Candidates are *built* in parallel (lowering + code generation, one per worker at a time),
then *run* one after another (so timings do not compete for the cores): warm-up, the first
run's outputs checked against the numpy reference, then `repeat` timings. A build that
raises, a wrong result, a crash (the worker dies) or a hang (no answer within the time-out:
the worker is killed) becomes a result with `error` set and cost inf; the worker is
restarted and the tuner goes on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import multiprocessing as mp
import os
import time
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any, Protocol

import numpy as np

from autotune.builders import Built, builder_for
from autotune.runners import WrongResult, runner_for
from autotune.task import Task
from tensorir.target import Target


@dataclasses.dataclass(frozen=True)
class MeasureOptions:
    target: str = "host"
    workers: int = 2
    threads: int | None = None  # kernel threads while timing (None: all cores)
    number: int | None = None  # calls per timing (None: from min_repeat_s)
    repeat: int = 5
    min_repeat_s: float = 0.02
    warmup: int = 1
    # Kernels meet cold caches, as inside a model (its weights come from memory; the previous
    # kernel's output is still warm): caches flushed before each timed call, the activations
    # read back in. On an H100 the cold time of ResNet-18's convs equalled their time in the
    # model (1.3-1.9x the warm one; benchmarks/cold_caches.py); False: back-to-back calls, warm.
    cold: bool = True
    check: bool = True
    rtol: float = 1e-3  # result check: max |err| <= rtol * max |ref| + atol
    atol: float = 1e-5
    build_timeout_s: float = 120.0
    run_timeout_s: float = 30.0
    max_builds_per_worker: int = 200  # JIT'd code accumulates; restart after this many
    rpc: tuple[str, ...] = ()  # HOST:PORT of `tir rpc serve` servers (autotune/rpc_runner.py)
    rpc_token: str = ""
    adb: str = ""  # serial of an Android device measured through adb (autotune/adb_runner.py)
    adb_path: str = ""  # the adb program ("": $TIR_ADB, else adb)


@dataclasses.dataclass
class MeasureResult:
    config: dict
    costs: list[float] = dataclasses.field(default_factory=list)  # seconds per call
    error: str | None = None
    build_s: float = 0.0
    features: np.ndarray | None = None
    lost: bool = False  # its worker was restarted before it ran: not measured, not an error

    @property
    def cost(self) -> float:
        """Median seconds per call (inf when the candidate failed)."""
        return float(np.median(self.costs)) if self.costs and self.error is None else math.inf

    @property
    def spread(self) -> float:
        """Relative spread of the timings: (max - min) / median."""
        if not self.costs or self.error is not None:
            return math.inf
        return (max(self.costs) - min(self.costs)) / max(self.cost, 1e-12)


OnResult = Callable[[MeasureResult], None]  # a final result, as soon as it is final


class MeasurerLike(Protocol):
    """What the tuner measures through: this module's process-pool `Measurer`, or
    autotune/ray_measure.py's `RayMeasurer` (builds as Ray tasks, runs on device actors).
    `measure` calls `on_result` with each result as soon as it is final (a failed build, a
    finished run; never a lost one), so the tuner commits it before the next one ends."""

    def measure(
        self, task: Task, configs: Sequence[dict], on_result: OnResult | None = None
    ) -> list[MeasureResult]: ...

    def features(self, task: Task, configs: Sequence[dict]) -> list[np.ndarray | None]: ...

    def __enter__(self) -> MeasurerLike: ...

    def __exit__(self, *exc: Any) -> None: ...


def candidate_features_of(task: Task, config: dict, target: Target | str, profile: Any = None) -> np.ndarray:
    """Cost-model features of one config: the unexpanded loop nest's features and the knob
    values (with the OpenCL device profile's when `profile` is given)."""
    from autotune.features import extract_features
    from autotune.gpu_features import gpu_features
    from autotune.knob_features import candidate_features

    nest, _ = task.build(config, target, passes=False)
    full = task.space(target).complete(config)
    gpu = gpu_features(nest, profile) if profile is not None else None
    return candidate_features(extract_features(nest), full, gpu)


def device_profile_of(target: Target | str) -> Any:
    """The OpenCL device profile of `target` (None for a CPU target): GPU features need it."""
    from tensorir.target import get_target

    t = get_target(target)
    return t.device_profile() if t.kind == "opencl" else None


# ---- the worker process ------------------------------------------------------------------
class _WorkerState:
    """A worker's task, inputs and reference, and its builder and runner (autotune/builders.py,
    autotune/runners.py: chosen by the target's kind)."""

    def __init__(self, options: MeasureOptions) -> None:
        from tensorir.target import get_target

        self.options = options
        target = get_target(options.target)
        self.profile = device_profile_of(options.target)
        self.builder = builder_for(target, options)
        self.runner = runner_for(target, options)
        self.task: Task | None = None
        self.built: dict[int, Built] = {}
        self.inputs: list[np.ndarray] = []
        self.reference: list[np.ndarray] = []

    def set_task(self, task: Task) -> None:
        self.task = task
        self.built.clear()
        self.inputs = task.random_inputs(seed=0)
        self.reference = task.reference(self.inputs) if self.options.check else []

    def build(self, ident: int, config: dict) -> tuple:
        t0 = time.perf_counter()
        self.built[ident] = self.builder.build(self.task, config)
        build_s = time.perf_counter() - t0
        return ("built", ident, build_s, self._features(config))

    def _features(self, config: dict) -> np.ndarray:
        return candidate_features_of(self.task, config, self.options.target, self.profile)

    def features(self, ident: int, configs: list[dict]) -> tuple:
        """Cost-model features of configs (the unexpanded loop nest and the knob values;
        None where it fails)."""
        out = []
        for cfg in configs:
            try:
                out.append(self._features(cfg))
            except Exception:  # an illegal candidate just gets no features
                out.append(None)
        return ("features", ident, out)

    def run(self, ident: int) -> tuple:
        built = self.built.pop(ident)
        try:
            costs = self.runner.run(built, self.inputs, self.reference, self.options)
        except WrongResult as e:
            return ("error", ident, str(e))
        return ("ran", ident, costs)


def _worker_main(conn: Connection, options: MeasureOptions) -> None:
    os.environ.setdefault("TIR_DEBUG", "0")
    state = _WorkerState(options)
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        kind = msg[0]
        try:
            if kind == "task":
                state.set_task(msg[1])
                reply: tuple = ("ok",)
            elif kind == "build":
                reply = state.build(msg[1], msg[2])
            elif kind == "run":
                reply = state.run(msg[1])
            elif kind == "features":
                reply = state.features(msg[1], msg[2])
            else:
                return
        except Exception as e:  # every failure is a measured result
            ident = msg[1] if len(msg) > 1 and isinstance(msg[1], int) else -1
            reply = ("error", ident, _reason(e))
        conn.send(reply)


def _reason(e: BaseException) -> str:
    if os.environ.get("TIR_DEBUG", "0") not in ("", "0"):
        return "".join(traceback.format_exception(e)).strip()
    return f"{type(e).__name__}: {e}".splitlines()[0][:500]


# ---- the parent side ---------------------------------------------------------------------
class _Worker:
    def __init__(self, ctx: Any, options: MeasureOptions) -> None:
        self.options = options
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, options), daemon=True)
        self.proc.start()
        child.close()
        self.task_key: str | None = None
        self.builds = 0

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)
        self.conn.close()

    def exit_code(self) -> int | None:
        """The exit code of a worker whose pipe broke (it may not be reaped yet: wait a bit)."""
        self.proc.join(2)
        return self.proc.exitcode

    def request(self, msg: tuple, timeout: float) -> tuple:
        self.conn.send(msg)
        return self.answer(timeout)

    def answer(self, timeout: float) -> tuple:
        if not self.conn.poll(timeout):
            raise TimeoutError
        return self.conn.recv()


class Measurer:
    """Parallel builds, serial timed runs, in restartable worker processes."""

    def __init__(self, options: MeasureOptions | None = None) -> None:
        self.options = options or MeasureOptions()
        self.ctx = mp.get_context("spawn")
        self.workers = [_Worker(self.ctx, self.options) for _ in range(max(1, self.options.workers))]

    def __enter__(self) -> Measurer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        for w in self.workers:
            with contextlib.suppress(OSError, ValueError):
                w.conn.send(("quit",))
            w.kill()
        self.workers = []

    def _restart(self, k: int) -> None:
        self.workers[k].kill()
        self.workers[k] = _Worker(self.ctx, self.options)

    def _ensure_task(self, k: int, task: Task) -> None:
        w = self.workers[k]
        if w.builds >= self.options.max_builds_per_worker:
            self._restart(k)
            w = self.workers[k]
        if w.task_key != task.key:
            w.request(("task", task), self.options.build_timeout_s)
            w.task_key = task.key

    def measure(
        self, task: Task, configs: Sequence[dict], on_result: OnResult | None = None
    ) -> list[MeasureResult]:
        results = [MeasureResult(dict(c)) for c in configs]
        owner = self._build_all(task, results)
        report = on_result or (lambda r: None)
        for i, r in enumerate(results):
            if i not in owner:  # its build failed: an error, final
                report(r)
        for i, worker in sorted(owner.items(), key=lambda kv: kv[0]):
            if worker not in self.workers:  # restarted since it built this one
                results[i].lost = True
                continue
            self._run_one(task, i, self.workers.index(worker), results[i])
            report(results[i])
        return results

    def features(self, task: Task, configs: Sequence[dict]) -> list[np.ndarray | None]:
        """Features of many configs, computed in the workers in parallel (a timed-out or
        crashed worker's share comes back as None)."""
        chunks = [list(range(k, len(configs), len(self.workers))) for k in range(len(self.workers))]
        out: list[np.ndarray | None] = [None] * len(configs)
        sent = []
        for k, idx in enumerate(chunks):
            if not idx:
                continue
            try:
                self._ensure_task(k, task)
                self.workers[k].conn.send(("features", k, [configs[i] for i in idx]))
                sent.append(k)
            except (TimeoutError, OSError, EOFError):
                self._restart(k)
        for k in sent:
            try:
                reply = self.workers[k].answer(self.options.build_timeout_s)
            except (TimeoutError, EOFError, OSError):
                self._restart(k)
                continue
            if reply[0] == "features":
                for i, f in zip(chunks[k], reply[2], strict=True):
                    out[i] = f
        return out

    def _build_all(self, task: Task, results: list[MeasureResult]) -> dict[int, _Worker]:
        """Build every config (parallel over the workers); returns {result index: worker}."""
        pending = list(range(len(results)))
        busy: dict[int, tuple[int, float]] = {}  # worker -> (result index, start time)
        owner: dict[int, _Worker] = {}
        while pending or busy:
            for k in range(len(self.workers)):
                if k not in busy and pending:
                    i = pending.pop(0)
                    if self._start_build(k, task, i, results[i]):
                        busy[k] = (i, time.monotonic())
            if not busy:
                continue
            conns = {self.workers[k].conn: k for k in busy}
            deadline = min(t for _, t in busy.values()) + self.options.build_timeout_s
            ready = wait(list(conns), timeout=max(0.0, deadline - time.monotonic()))
            for conn in ready:
                k = conns[conn]
                i, _ = busy.pop(k)
                self._finish_build(k, i, results[i], owner)
            for k, (i, t0) in list(busy.items()):
                if time.monotonic() - t0 > self.options.build_timeout_s:
                    busy.pop(k)
                    results[i].error = f"build timed out after {self.options.build_timeout_s:.0f} s"
                    self._restart(k)
        return owner

    def _start_build(self, k: int, task: Task, i: int, res: MeasureResult) -> bool:
        try:
            self._ensure_task(k, task)
            self.workers[k].conn.send(("build", i, res.config))
            self.workers[k].builds += 1
            return True
        except (TimeoutError, OSError, EOFError) as e:
            res.error = f"worker failed to start the task: {type(e).__name__}"
            self._restart(k)
            return False

    def _finish_build(self, k: int, i: int, res: MeasureResult, owner: dict[int, _Worker]) -> None:
        try:
            reply = self.workers[k].conn.recv()
        except (EOFError, OSError):
            res.error = f"build crashed the worker (exit code {self.workers[k].exit_code()})"
            self._restart(k)
            return
        if reply[0] == "built":
            res.build_s, res.features = reply[2], reply[3]
            owner[i] = self.workers[k]
        else:
            res.error = f"build failed: {reply[2]}"

    def _run_one(self, task: Task, i: int, k: int, res: MeasureResult) -> None:
        w = self.workers[k]
        try:
            reply = w.request(("run", i), self.options.run_timeout_s)
        except TimeoutError:
            res.error = f"run timed out after {self.options.run_timeout_s:.0f} s"
            self._restart(k)
            return
        except (EOFError, OSError):
            res.error = f"run crashed the worker (exit code {w.exit_code()})"
            self._restart(k)
            return
        if reply[0] == "ran":
            res.costs = list(reply[2])
        else:
            res.error = reply[2]
