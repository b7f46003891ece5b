"""The tuning loop: schedule tasks, propose, measure, record, learn — resumable.

    tuner = Tuner(tasks, Database(path), TuneOptions(trials=400, time_budget_s=1200))
    summary = tuner.run()

Every round the task scheduler picks the task where more trials promise the largest
end-to-end gain (all tasks get a first batch, heaviest first; then the one maximizing
count x best cost x (recent relative improvement + 0.05): time spent where the model spends
time and where search still pays), its `TaskSearch` proposes a batch, the measurer
(autotune/measure.py's process pool, or Ray's tasks and device actors:
autotune/ray_measure.py) builds and times it, and each result is committed to the database
at once (a killed tuner keeps every finished measurement). The cost model (one for all
tasks, groups = tasks) is retrained and saved beside the database after each batch, so a
later run — on this model or another — starts from it (transfer). On start, the database's
records of each task are replayed into its search: a restarted run skips what was measured
and goes on from the best so far.
A task stops after `early_stopping` trials without improvement or when its space is used up.

The run ends by timing each task's default config and its `retime` fastest configs again, back
to back (`Tuner.retime`), and the records take those costs: configs measured in earlier runs (on
a day with another clock, or by an older runner: before the pool wake-up left the timed calls,
their 2-thread costs held a futex wake each) then compare with this run's, so both the record
`tir compile` picks and the summary's "x the default" rest on timings of one session. The search
stops early enough to leave time for it (`_reserve`). A failed re-timing keeps the old record.
"""

from __future__ import annotations

import dataclasses
import math
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from autotune.cost_model import CostModel
from autotune.database import Database
from autotune.knob_features import NUM_CANDIDATE_FEATURES
from autotune.measure import MeasureOptions, Measurer, MeasureResult, MeasurerLike
from autotune.runners import timing_of
from autotune.search import TaskSearch
from autotune.task import Task
from tensorir.schedule.space import config_key


@dataclasses.dataclass(frozen=True)
class TuneOptions:
    device: str = "host"
    target: str = "host"
    trials: int = 200  # total measurements across tasks (resumed ones count)
    time_budget_s: float | None = None
    batch_size: int = 8
    early_stopping: int | None = 48  # per task
    epsilon: float = 0.1
    search: str = "model"  # "model" (cost-model guided) or "random"
    objective: str = "reg"  # held-out ranking: reg 0.81 vs rank 0.80 (benchmarks/tune_eval.py)
    seed: int = 0
    model_path: str | Path | None = None  # default: beside the database
    progress: bool = True
    retime: int = 3  # at the end: the default and this many fastest configs per task timed again


@dataclasses.dataclass
class TaskState:
    task: Task
    search: TaskSearch
    trials: int = 0
    resumed: int = 0  # of `trials`: records of earlier runs, replayed
    since_best: int = 0
    default_cost: float = math.inf
    history: list[tuple[int, float]] = dataclasses.field(default_factory=list)  # (global trial, best)
    last_gain: float = 1.0
    done: bool = False
    retimed: int = 0  # configs timed again together at the end of the run (Tuner.retime)
    stale_best: bool = False  # the best's cost is still another session's (Tuner.retime)

    @property
    def best(self) -> float:
        return self.search.best_cost

    def gflops(self) -> float:
        """The task's direct-algorithm FLOPs per second of the best config (for Winograd or
        Strassen an effective figure: they do fewer multiplications, see `effective`)."""
        return self.task.flops / self.best / 1e9 if math.isfinite(self.best) else 0.0

    @property
    def effective(self) -> bool:
        """The best config runs a fast algorithm, so gflops() may exceed the machine's peak."""
        algorithm = str((self.search.best_config or {}).get("algorithm", ""))
        return algorithm.startswith(("winograd", "strassen"))


@dataclasses.dataclass
class TuneSummary:
    trials: int
    seconds: float
    tasks: list[TaskState]
    # why the run ended: "time budget", "trial budget" or "every task stopped" (each went
    # early_stopping trials without a better config, replayed ones included, or used its space up)
    stopped: str = ""
    retime_s: float = 0.0  # seconds of the closing re-timing

    def paired_latency(self) -> tuple[float, float, int]:
        """(tuned, default, tasks): sums of count x cost over the tasks whose default config
        has a measurement, so the two figures cover the same kernels (a database from older
        code may hold no record of today's default for some tasks)."""
        both = [s for s in self.tasks if math.isfinite(s.best) and math.isfinite(s.default_cost)]
        tuned = sum(s.task.count * s.best for s in both)
        return tuned, sum(s.task.count * s.default_cost for s in both), len(both)


class Tuner:
    def __init__(
        self,
        tasks: list[Task],
        db: Database,
        options: TuneOptions | None = None,
        measure: MeasureOptions | None = None,
        on_batch: Callable[[TaskState, list[MeasureResult]], None] | None = None,
        measurer: Callable[[MeasureOptions], MeasurerLike] = Measurer,
    ) -> None:
        self.options = options or TuneOptions()
        self.make_measurer = measurer  # the process-pool Measurer, or ray_measure.RayMeasurer's
        self.db = db
        self.measure_options = measure or MeasureOptions(target=self.options.target)
        self.rng = random.Random(self.options.seed)
        self.states = [
            TaskState(t, TaskSearch(t.space(self.options.target), self.rng, self.options.epsilon))
            for t in tasks
        ]
        default_model = f"costmodel-{self.options.device}.json"  # beside a database file
        self.model_path = Path(self.options.model_path or db.path.with_name(default_model))
        self.model = self._load_model()
        self.on_batch = on_batch
        self.trials = 0
        self._batch_s, self._timed = 0.0, 0  # this run's measuring: seconds, configs timed
        self._resume()

    # ---- state ----------------------------------------------------------------------
    def _load_model(self) -> CostModel | None:
        if self.options.search != "model":
            return None
        if self.model_path.exists():
            try:
                model = CostModel.load(self.model_path)
                if model.num_features in (None, NUM_CANDIDATE_FEATURES):
                    return model
            except Exception:  # a corrupt or foreign model file: start a fresh one
                pass
            # another feature set (an older tensorir): its data cannot train this model
        return CostModel(self.options.objective, seed=self.options.seed)

    def _resume(self) -> None:
        for st in self.states:
            for rec in self.db.workload_records(st.task.key, self.options.device, self.options.target):
                if rec.get("timing") == "model":  # timed inside a model: not a candidate's own time
                    continue
                self._note(st, rec["config"], rec["mean_cost"] if rec.get("error") is None else math.inf)
            st.resumed = st.trials

    def _note(self, st: TaskState, config: dict, cost: float) -> None:
        self.trials += 1
        st.trials += 1
        space = st.search.space
        if space.complete(config) == space.complete(space.default()):
            st.default_cost = cost
        if st.search.record(config, cost):
            st.since_best = 0
        else:
            st.since_best += 1
        st.history.append((self.trials, st.best))

    # ---- scheduling -------------------------------------------------------------------
    def _active(self) -> list[TaskState]:
        es = self.options.early_stopping
        for st in self.states:
            if es is not None and st.trials >= es and st.since_best >= es:
                st.done = True
        return [s for s in self.states if not s.done]

    def pick(self) -> TaskState | None:
        active = self._active()
        if not active:
            return None
        fresh = [s for s in active if s.trials == 0]
        if fresh:
            return max(fresh, key=lambda s: s.task.weight)

        def gain(s: TaskState) -> float:
            best = s.best if math.isfinite(s.best) else s.task.flops / 1e9
            return s.task.count * best * (s.last_gain + 0.05)

        return max(active, key=gain)

    # ---- the loop ---------------------------------------------------------------------
    def run(self) -> TuneSummary:
        opt = self.options
        start = time.monotonic()
        deadline = None if opt.time_budget_s is None else start + opt.time_budget_s
        stopped = "time budget"
        with self.make_measurer(self.measure_options) as measurer:  # may refuse: before the bar
            bar = _progress(opt.trials, self.trials, opt.progress)
            try:
                while deadline is None or time.monotonic() <= deadline - self._reserve():
                    if not self.step(measurer, bar):
                        stopped = "trial budget" if self.trials >= opt.trials else "every task stopped"
                        break
            finally:
                bar.close()
            searched = time.monotonic()
            self.retime(measurer, deadline)
        end = time.monotonic()
        return TuneSummary(self.trials, end - start, self.states, stopped, end - searched)

    # ---- the closing re-timing --------------------------------------------------------
    def _reserve(self) -> float:
        """Seconds the closing re-timing should take: this run's seconds per timed config so
        far, times the configs it will time (none known yet: nothing set aside)."""
        if not self.options.retime or not self._timed:
            return 0.0
        planned = sum(min(len(s.search.measured), self.options.retime) + 1 for s in self.states)
        return self._batch_s / self._timed * planned

    def retime(self, measurer: MeasurerLike, deadline: float | None = None) -> None:
        """Time each task's default and its `retime` fastest configs again, back to back,
        heaviest task first (until `deadline`); then, twice at most, the configs whose stored
        cost, from another session, still beats every one timed now (`retime` at a time)."""
        if not self.options.retime:
            return
        for st in sorted(self.states, key=lambda s: -s.task.weight):
            if deadline is not None and time.monotonic() > deadline:
                return
            if math.isfinite(st.best):
                self._retime_task(st, measurer)

    def _retime_task(self, st: TaskState, measurer: MeasurerLike) -> None:
        space, n = st.search.space, self.options.retime
        key = lambda c: config_key(space.complete(c))  # noqa: E731
        timed: set[str] = set()
        todo = [space.default(), *st.search.ranked(n)]
        for _ in range(3):
            todo = list({key(c): c for c in todo if key(c) not in timed}.values())
            if not todo:
                break
            results = measurer.measure(st.task, todo, on_result=lambda r: self._commit_retimed(st.task, r))
            good = [r for r in results if not r.lost and r.error is None]
            timed |= {key(r.config) for r in good}
            st.search.retime([(r.config, r.cost) for r in good])
            ahead = st.search.ranked(len(st.search.measured))
            todo = ahead[: next((i for i, c in enumerate(ahead) if key(c) in timed), 0)][:n]
        st.retimed = len(timed)
        st.stale_best = st.search.best_config is not None and key(st.search.best_config) not in timed
        default = key(space.default())
        st.default_cost = next((cost for c, cost in st.search.measured if key(c) == default), st.default_cost)

    def _commit_retimed(self, task: Task, r: MeasureResult) -> None:
        if r.error is None:  # a failed re-timing (a timeout on a busy machine) keeps the old record
            self.db.add(self._record(task, r))

    def step(self, measurer: MeasurerLike, bar: Any = None) -> bool:
        """Measure one batch of the task the scheduler picks; False when there is nothing
        left to do (trial budget spent, every task stopped). `run` is a loop over this; a
        caller that interleaves two tuners (benchmarks/tune_eval.py) steps them in turn."""
        if self.trials >= self.options.trials:
            return False
        st = self.pick()
        if st is None:
            return False
        n = min(self.options.batch_size, self.options.trials - self.trials)
        self._batch(st, n, measurer, bar if bar is not None else _NoBar())
        return True

    def _batch(self, st: TaskState, n: int, measurer: MeasurerLike, bar: Any) -> None:
        def featurize(cfgs):
            return measurer.features(st.task, cfgs)

        configs = st.search.propose(n, self.model, featurize)
        if not configs:
            st.done = True  # the space is used up
            return
        before = st.best
        began = time.monotonic()
        # each result committed as soon as it is final: a tuner killed mid-batch keeps it
        results = measurer.measure(
            st.task, configs, on_result=lambda r: self.db.add(self._record(st.task, r))
        )
        done = [r for r in results if not r.lost]
        self._batch_s += time.monotonic() - began
        self._timed += len(done)
        for r in done:
            self._note(st, r.config, r.cost)
            bar.update(1)
        st.last_gain = (before - st.best) / before if math.isfinite(before) and before > 0 else 1.0
        self._learn(st, done)
        bar.set_postfix_str(self._status(st), refresh=True)
        if self.on_batch is not None:
            self.on_batch(st, done)

    def _record(self, task: Task, r: MeasureResult) -> dict:
        return {
            "workload_key": task.key,
            "device": self.options.device,
            "target": self.options.target,
            "config": task.space(self.options.target).complete(r.config),  # equal kernels, one id
            "costs": r.costs if r.error is None else [],
            "error": r.error,
            "timing": timing_of(self.measure_options),
        }

    def _learn(self, st: TaskState, results: list[MeasureResult]) -> None:
        if self.model is None:
            return
        rows = [(r.features, r.cost) for r in results if r.features is not None]
        if not rows:
            return
        x = np.stack([f for f, _ in rows])
        costs = np.array([c for _, c in rows])
        self.model.update(x, costs, np.array([st.task.key] * len(rows)))
        self.model_path.parent.mkdir(parents=True, exist_ok=True)
        self.model.save(self.model_path)

    def _status(self, st: TaskState) -> str:
        k = self.states.index(st) + 1
        best = f"{st.gflops():.1f} GFLOP/s" if math.isfinite(st.best) else "no valid kernel yet"
        est = sum(s.task.count * s.best for s in self.states if math.isfinite(s.best))
        label = f"task {k}/{len(self.states)} {st.task.label}"
        return f"{label}: {st.trials} trials, best {best}; tuned kernels {est * 1e3:.2f} ms"


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, s: str, refresh: bool = True) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(total: int, initial: int, enabled: bool) -> Any:
    if not enabled:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(total=total, initial=min(initial, total), unit="trial", file=sys.stderr, dynamic_ncols=True)
