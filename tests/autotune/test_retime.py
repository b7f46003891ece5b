"""The tuner's closing re-timing (autotune/tuner.py, `Tuner.retime`): a run ends by timing each
task's default and its fastest configs again, back to back, so that configs measured in earlier
sessions compare with this one's; the records take those costs, and a failed re-timing keeps
the old record. A measurer with a table of costs per session stands in for the machine."""

from __future__ import annotations

import math
import time
import zlib

import pytest

from autotune.cli_tune import _report
from autotune.database import Database
from autotune.measure import MeasureResult
from autotune.task import Task
from autotune.tuner import TuneOptions, Tuner
from tensorir.graph.types import TensorType
from tensorir.ops.workload import workload_key
from tensorir.schedule.space import config_key


def _task() -> Task:
    ins = (TensorType((16, 32)), TensorType((32, 24)))
    key = workload_key("matmul", ins, {})
    return Task(key=key, op="matmul", in_types=ins, attrs={}, flops=2 * 16 * 32 * 24)


class Session:
    """A measurer whose cost for a config is `cost(key)` (key: config_key of the completed
    config); `fail` keys come back as errors. Records every config it was asked to time."""

    def __init__(self, task: Task, cost, fail: frozenset[str] = frozenset()):
        self.space, self.cost, self.fail = task.space(), cost, fail
        self.timed: list[str] = []

    def key(self, config: dict) -> str:
        return config_key(self.space.complete(config))

    def measure(self, task, configs, on_result=None):
        out = []
        for c in configs:
            k = self.key(c)
            self.timed.append(k)
            failed = k in self.fail
            r = MeasureResult(dict(c), error="timeout") if failed else MeasureResult(dict(c), [self.cost(k)])
            (on_result or (lambda r: None))(r)
            out.append(r)
        return out

    def features(self, task, configs):
        return [None] * len(configs)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


def _options(**kw) -> TuneOptions:
    return TuneOptions(search="random", batch_size=4, progress=False, seed=0, **kw)


def _base(key: str) -> float:
    """A stable cost per config: 1-2 ms."""
    return 1e-3 * (1 + (zlib.crc32(key.encode()) % 1000) / 1000)


def _tune(db: Database, session: Session, **kw):
    task = _task()
    tuner = Tuner([task], db, _options(**kw), measurer=lambda options: session)
    return tuner, tuner.run()


def test_the_run_ends_timing_the_default_and_the_fastest_again_together(tmp_path):
    """An earlier session's timings each held 0.5 ms that today's do not (an older runner's
    pool wake-up): today's run searches 4 new configs, then times the default and the 3
    fastest again, back to back. Its default and best then both carry today's costs, so
    "x the default" compares one session's timings; those records hold today's costs, the
    others are untouched; neither the trial count nor the number of records changes (a
    re-timing replaces its record: the same id)."""
    task = _task()
    db = Database(tmp_path / "r.db")
    _tune(db, Session(task, lambda k: _base(k) + 5e-4), trials=12, retime=0)
    assert len(db) == 12
    old = {config_key(r["config"]): r for r in db.records()}

    today = Session(task, _base)
    started = time.time()
    _, summary = _tune(db, today, trials=16, retime=3)
    st = summary.tasks[0]
    assert summary.trials == 16 and len(db) == 16  # 4 new trials; the re-timings are not trials
    search, retimed = today.timed[:4], today.timed[4:]
    assert not set(search) & set(old)
    default = today.key(task.space().default())
    assert retimed[0] == default and default in old  # the default first, then the 3 fastest
    stored = {**{k: r["mean_cost"] for k, r in old.items()}, **{k: _base(k) for k in search}}
    first = list(dict.fromkeys([default, *sorted(stored, key=stored.get)[:3]]))
    assert retimed[: len(first)] == first
    best = config_key(task.space().complete(st.search.best_config))
    assert best in set(retimed) | set(search) and not st.stale_best  # timed today
    assert st.retimed == len(set(retimed))
    assert st.default_cost == pytest.approx(_base(default))
    assert st.best == pytest.approx(_base(best))
    for r in db.records():
        k = config_key(r["config"])
        if k in retimed:
            assert r["mean_cost"] == pytest.approx(_base(k)) and r["timestamp"] >= started
        elif k in old:
            assert r["mean_cost"] == pytest.approx(old[k]["mean_cost"])  # untouched
    assert 0 <= summary.retime_s <= summary.seconds
    text = _report(summary)
    assert "earlier run's" not in text
    assert "timed again at the end, back to back: the default and the fastest configs of 1 of 1 tasks" in text
    assert "so each 'x the default' compares timings of this run" in text


def test_stale_bests_are_timed_again_twice_at_most_then_said_so(tmp_path):
    """Today every config runs 3x slower than an earlier session said. After the default and
    the 3 fastest are timed again, the configs whose stored costs still beat theirs are timed
    too, 3 at a time, fastest stored cost first, in two more passes at most; a best still
    stale after them is flagged for the report."""
    task = _task()
    db = Database(tmp_path / "s.db")
    _tune(db, Session(task, lambda k: _base(k) / 3), trials=16, retime=0)
    ranking = [config_key(r["config"]) for r in sorted(db.records(), key=lambda r: r["mean_cost"])]
    today = Session(task, _base)
    _, summary = _tune(db, today, trials=16, retime=3)  # no trials left: only the re-timing
    default = today.key(task.space().default())
    first = list(dict.fromkeys([default, *ranking[:3]]))
    assert today.timed[: len(first)] == first
    rest = [k for k in ranking if k not in first]
    assert today.timed[len(first) :] == rest[:6]  # two passes of 3
    st = summary.tasks[0]
    assert st.retimed == len(first) + 6 and st.stale_best  # 16 - that many keep the 3x-fast costs
    text = _report(summary)
    assert "the best's time is an earlier run's (timed again, it was slower)" in text.splitlines()[1]
    assert f"of 1 of 1 tasks ({st.retimed} configs, " in text


def test_a_best_timed_again_and_still_fastest_is_not_stale(tmp_path):
    """The same machine as before: one pass of the default and the 3 fastest, nothing more."""
    task = _task()
    db = Database(tmp_path / "n.db")
    _tune(db, Session(task, _base), trials=12, retime=0)
    same = Session(task, _base)
    _, summary = _tune(db, same, trials=12, retime=3)
    assert len(same.timed) == len(set(same.timed)) <= 4 and not summary.tasks[0].stale_best


def test_a_failed_retiming_keeps_the_old_record(tmp_path):
    """A re-timing that fails (a timeout on a busy machine) is not committed: the record
    stays as it was, and the best stays a finite, measured config."""
    task = _task()
    db = Database(tmp_path / "f.db")
    _tune(db, Session(task, _base), trials=8, retime=0)
    best = db.best(task.key, "host")
    key = config_key(best["config"])
    failing = Session(task, lambda k: 2 * _base(k), fail=frozenset({key}))
    _, summary = _tune(db, failing, trials=8, retime=3)
    assert key in failing.timed  # it was tried
    after = {config_key(r["config"]): r for r in db.records()}[key]
    assert after["error"] is None and after["mean_cost"] == pytest.approx(best["mean_cost"])
    assert math.isfinite(summary.tasks[0].best)


def test_retime_zero_times_nothing_again(tmp_path):
    task = _task()
    db = Database(tmp_path / "z.db")
    _tune(db, Session(task, _base), trials=8, retime=0)
    quiet = Session(task, _base)
    _tune(db, quiet, trials=8, retime=0)
    assert quiet.timed == []
