"""Tuner: records every trial, resumes without re-measuring, survives kill -9; `tir tune`
input errors; the search proposes fresh configs (default first).

(Concurrent writers to one database: tests/autotune/test_database.py.)"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from autotune.cost_model import CostModel
from autotune.database import Database
from autotune.device_keys import cpu_key
from autotune.measure import MeasureOptions
from autotune.search import TaskSearch
from autotune.task import Task
from autotune.tuner import TuneOptions, Tuner
from tensorir.graph.types import TensorType
from tensorir.ops.kernel import scratch_arrays
from tensorir.ops.workload import workload_key
from tensorir.runtime.jit import compile_host
from tensorir.schedule.space import config_key
from tensorir.target import host_target

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "examples" / "tiny_cnn.onnx"
FAST = MeasureOptions(workers=1, repeat=2, min_repeat_s=0.001)


def _matmul(m=16, k=32, n=24) -> Task:
    ins = (TensorType((m, k)), TensorType((k, n)))
    return Task(key=workload_key("matmul", ins, {}), op="matmul", in_types=ins, attrs={}, flops=2 * m * k * n)


def _pairs(db: Database) -> list[tuple[str, str]]:
    return [(r["workload_key"], config_key(r["config"])) for r in _measured(db)]


def _check_record(r: dict, keys: set[str], device: str = "host", target: str = "host") -> None:
    assert r["workload_key"] in keys
    assert r["device"] == device and r["target"] == target
    assert isinstance(r["config"], dict) and r["config"]
    if r["error"] is None:
        assert r["costs"] and all(math.isfinite(c) and c > 0 for c in r["costs"])
        assert math.isfinite(r["mean_cost"])
    else:
        assert isinstance(r["error"], str) and r["error"] and r["mean_cost"] == math.inf


def _run_config(task: Task, config: dict) -> None:
    """Build `config` in this process and compare its output with numpy's matmul."""
    func, spec = task.build(config)
    kernel = compile_host(func)
    a, b = task.random_inputs(seed=1)
    args = [a, b]
    for k, fn in spec.transforms.items():
        args[k] = np.ascontiguousarray(fn(args[k]))
    out = np.zeros((a.shape[0], b.shape[1]), np.float32)
    kernel.bind(*args, out, *scratch_arrays(func))()
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)


def test_short_tune_records_every_trial(tmp_path):
    tasks = [_matmul(), _matmul(8, 16, 8)]
    keys = {t.key for t in tasks}
    db = Database(tmp_path / "t.db")
    batches = []
    tuner = Tuner(
        tasks,
        db,
        TuneOptions(trials=12, batch_size=4, progress=False),
        FAST,
        on_batch=lambda st, res: batches.append((st.task.key, len(res))),
    )
    summary = tuner.run()
    assert summary.trials == 12 and sum(n for _, n in batches) == 12
    assert summary.stopped == "trial budget"
    assert {k for k, _ in batches} == keys  # every task got a first batch
    records = db.records()
    assert len(records) == 12
    for r in records:
        _check_record(r, keys)
    assert len(set(_pairs(db))) == 12
    assert {r["timing"] for r in records} == {"cold"}  # the default: caches flushed per timed call
    assert (tmp_path / "costmodel-host.json").exists()  # the model is saved beside the database
    for task in tasks:
        best = db.best(task.key, "host")
        assert best is not None
        st = next(s for s in summary.tasks if s.task is task)
        assert math.isfinite(st.best) and math.isfinite(st.default_cost)
        _run_config(task, best["config"])


def test_resume_measures_only_new_configs(tmp_path):
    task = _matmul()
    path = tmp_path / "r.db"
    opts = dict(batch_size=4, progress=False, seed=0)
    first = Tuner([task], Database(path), TuneOptions(trials=8, **opts), FAST).run()
    assert first.trials == 8 and len(Database(path)) == 8
    before = set(_pairs(Database(path)))

    measured: list[dict] = []
    tuner = Tuner(
        [task],
        Database(path),
        TuneOptions(trials=12, **opts),  # the same seed: replay must keep it off the old configs
        FAST,
        on_batch=lambda st, res: measured.extend(r.config for r in res),
    )
    assert tuner.trials == 8  # the replayed records count
    assert math.isfinite(tuner.states[0].best)
    summary = tuner.run()
    assert summary.trials == 12 and len(measured) == 4
    space = task.space()
    new = {config_key(space.complete(c)) for c in measured}
    assert len(new) == 4 and not new & {c for _, c in before}
    db = Database(path)
    assert len(db) == 12 and len({r["id"] for r in db.records()}) == 12
    assert len(set(_pairs(db))) == 12
    # a third run with the same total has nothing left to do
    assert Tuner([task], db, TuneOptions(trials=12, **opts), FAST).run().trials == 12
    assert len(db) == 12
    # records timed in a model are not candidates' own times: a resume does not replay them
    best = db.best(task.key, "host")
    db.add({**best, "costs": [1.0], "timing": "model"})
    assert Tuner([task], db, TuneOptions(trials=12, **opts), FAST).trials == 12
    # warm timings (--warm) are said so in the records (the closing re-timing off: it would
    # time older configs warm as well, tests/autotune/test_retime.py)
    warm = dataclasses.replace(FAST, cold=False)
    Tuner([task], db, TuneOptions(trials=14, retime=0, **opts), warm).run()
    assert sorted(r["timing"] for r in db.records()).count("warm") == 2


def _tune_cmd(db: Path, trials: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "tensorir.cli",
        "tune",
        str(MODEL),
        "--trials",
        str(trials),
        "--db",
        str(db),
        "--batch",
        "2",
        "--workers",
        "1",
        "--search",
        "random",  # the guided search's featurizing takes ~30 s per fresh conv task here
    ]


def _kernel_records(db: Database) -> list[dict]:
    """The Tuner's trials: `tir tune` may also record model-level layout measurements
    (config {"layout_block": x}, autotune/graph_tune.py) and the in-model check's records
    (timing "model", autotune/model_check.py), which are not counted in --trials."""
    return [r for r in _measured(db) if "layout_block" not in r["config"]]


def _measured(db: Database) -> list[dict]:
    """Records of measurements (trials and layout blocks), not of the in-model check."""
    return [r for r in db.records() if r["timing"] != "model"]


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


@pytest.mark.skipif(not hasattr(os, "killpg"), reason="needs process groups and SIGKILL")
def test_kill_9_mid_tune_then_resume(tmp_path):
    """`tir tune` killed with SIGKILL keeps every finished record; the same command with a
    larger --trials resumes it. Bounded: at most 90 s to the kill, 180 s for the resume
    (normally about 30 s in all)."""
    path, log = tmp_path / "k.db", tmp_path / "tune.log"
    with open(log, "wb") as out:  # a file, not a pipe: nobody reads the progress bar meanwhile
        proc = subprocess.Popen(
            _tune_cmd(path, 400), cwd=REPO, env=_env(), stdout=out, stderr=out, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 90
        n = 0
        while time.monotonic() < deadline and proc.poll() is None:
            if path.exists():
                try:
                    with Database(path) as db:
                        n = len(_kernel_records(db))
                except Exception:  # the tuner may still be creating the file
                    n = 0
                if n >= 3:
                    break
            time.sleep(0.2)
        assert proc.poll() is None, log.read_text(errors="replace")[-2000:]
        assert n >= 3, "the tuner recorded fewer than 3 trials in 90 s"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    assert proc.returncode == -signal.SIGKILL

    db = Database(path)
    records = _measured(db)
    for r in records:  # `tir tune` keeps them under this CPU's device key
        _check_record(r, {r["workload_key"]}, device=cpu_key(host_target()))
    assert len(set(_pairs(db))) == len(records)
    n, extra = len(_kernel_records(db)), len(records) - len(_kernel_records(db))
    assert n >= 3
    db.close()

    done = subprocess.run(
        _tune_cmd(path, n + 4), cwd=REPO, env=_env(), capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"{n + 4} trials in" in done.stdout
    db = Database(path)
    records = _measured(db)
    assert len(_kernel_records(db)) == n + 4
    assert len(records) == n + 4 + extra  # the layout measurements were not repeated either
    for r in records:
        _check_record(r, {r["workload_key"]}, device=cpu_key(host_target()))
    pairs = _pairs(db)
    assert len(set(pairs)) == len(pairs)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--device", "nope"], ["--device 'nope'", "unknown device"]),
        (["--time-budget", "abc"], ["--time-budget 'abc'", "duration"]),
        (["--trials", "0"], ["--trials 0"]),
        (["--retime", "-1"], ["--retime -1", "0 (skip) or more"]),
    ],
)
def test_cli_tune_bad_options(argv, words, capsys, tmp_path):
    from tensorir.cli import main

    assert main(["tune", str(MODEL), "--db", str(tmp_path / "x.db"), *argv]) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tir tune: error:"), err
    for w in words:
        assert w in lines[0], (w, lines[0])
    assert not (tmp_path / "x.db").exists()  # nothing was started


def test_cli_tune_missing_model(capsys, tmp_path):
    from tensorir.cli import main

    missing = tmp_path / "nope.onnx"
    assert main(["tune", str(missing), "--db", str(tmp_path / "x.db")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(missing) in err[0] and "no such file" in err[0]


def _search(task: Task, seed: int = 0) -> TaskSearch:
    return TaskSearch(task.space(), random.Random(seed))


def _fake_features(configs):
    """Cheap features from the knob values (None for pack_b: 'could not lower')."""
    out = []
    for c in configs:
        if c["gemm_pack_b"]:
            out.append(None)
            continue
        tiles = 0 if c["gemm_row_chunk_tiles"] == "auto" else c["gemm_row_chunk_tiles"]
        out.append(np.array([c["gemm_rows"], c["gemm_col_vectors"], tiles, 1.0], np.float32))
    return out


def test_search_default_first_and_fresh():
    task = _matmul()
    space = task.space()
    s = _search(task)
    first = s.propose(6)
    assert first[0] == space.default()
    keys = [config_key(space.complete(c)) for c in first]
    assert len(set(keys)) == 6
    for k, c in enumerate(first):
        s.record(c, 1e-3 * (k + 1))
    assert s.best_config == first[0]
    seen = set(keys)
    for _ in range(5):
        more = s.propose(8)
        assert len(more) == 8 and space.default() not in more
        mk = {config_key(space.complete(c)) for c in more}
        assert len(mk) == 8 and not mk & seen
        seen |= mk
        for c in more:
            s.record(c, 2e-3)
    # an untrained model is ignored (random proposals)
    assert len(s.propose(4, CostModel("rank"), _fake_features)) == 4


def test_search_measures_the_default_when_resumed_records_lack_it():
    """Records of older code (another default) resumed: today's default is still measured
    first, so the untuned kernel stays the baseline the search has to beat."""
    task = _matmul()
    space = task.space()
    s = _search(task)
    others = s.propose(4)[1:]
    s2 = _search(task, seed=1)
    for c in others:
        s2.record(c, 1e-3)
    first = s2.propose(3)
    assert first[0] == space.default()
    s2.record(first[0], 2e-3)
    assert space.default() not in s2.propose(3)


def test_search_with_trained_model_proposes_fresh_configs():
    task = _matmul()
    space = task.space()
    s = _search(task, seed=1)
    rng = random.Random(2)
    configs = [space.default()] + [space.sample(rng) for _ in range(40)]
    configs = list({config_key(space.complete(c)): c for c in configs}.values())
    feats = _fake_features(configs)
    rows = [(c, f) for c, f in zip(configs, feats, strict=True) if f is not None]
    costs = np.array([1e-3 * (1 + abs(f[0] - 6)) for _, f in rows])  # best near gemm_rows == 6
    model = CostModel("rank", seed=0, num_rounds=20)
    model.update(np.stack([f for _, f in rows]), costs, np.zeros(len(rows)))
    assert model.num_samples == len(rows)
    for (c, _), cost in zip(rows, costs, strict=True):
        s.record(c, float(cost))
    for c in configs:
        if c not in [r for r, _ in rows]:
            s.record(c, math.inf)
    calls = []

    def featurize(cfgs):
        calls.append(len(cfgs))
        return _fake_features(cfgs)

    seen = {config_key(space.complete(c)) for c in configs}
    for _ in range(3):
        out = s.propose(8, model, featurize)
        keys = {config_key(space.complete(c)) for c in out}
        assert len(out) == 8 and len(keys) == 8 and not keys & seen
        seen |= keys
        for c in out:
            s.record(c, 5e-3)
    assert calls  # the model did score candidates
    # the greedy part comes from the model: mostly configs it rates well (not pack_b)
    out = s.propose(10, model, featurize)
    assert len(out) == 10 and sum(not c["gemm_pack_b"] for c in out) >= 8


def test_search_prescreens_a_wide_pool_with_the_knob_only_model():
    """With a model of loop-IR + knob features, only the `prescreen` best of the wide pool
    (by a model of the knob columns) are lowered, and the proposals follow the model."""
    from autotune.features import NUM_FEATURES
    from autotune.knob_features import candidate_features

    task = _matmul()
    space = task.space()
    s = _search(task, seed=3)
    rng = random.Random(4)

    def featurize(cfgs):
        calls.append(len(cfgs))
        return [candidate_features(np.zeros(NUM_FEATURES), space.complete(c)) for c in cfgs]

    def cost(c):
        return 1e-3 * (1 + abs(space.complete(c)["gemm_rows"] - 6))  # best at gemm_rows == 6

    calls: list[int] = []
    samples = (space.sample(rng) for _ in range(60))
    configs = list({config_key(space.complete(c)): c for c in samples}.values())
    model = CostModel("reg", seed=0, num_rounds=30)
    model.update(np.stack(featurize(configs)), np.array([cost(c) for c in configs]), np.zeros(len(configs)))
    for c in configs:
        s.record(c, cost(c))
    calls.clear()
    out = s.propose(8, model, featurize)
    assert len(out) == 8 and calls and max(calls) <= s.prescreen
    rows = [space.complete(c)["gemm_rows"] for c in out]
    assert sum(abs(r - 6) <= 1 for r in rows) >= 5, rows


def test_the_summary_says_which_tasks_were_not_reached_and_what_came_from_earlier_runs():
    """A task the budget never reached is "not reached (budget)", not a failure; trial
    counts say how many were replayed from earlier runs; a Winograd best is labelled
    effective GFLOP/s (its FLOPs are the direct algorithm's)."""
    from autotune.cli_tune import _report
    from autotune.tuner import TaskState, TuneSummary

    rng = random.Random(0)
    tasks = (_matmul(), _matmul(8, 16, 8), _matmul(4))
    states = [TaskState(t, TaskSearch(t.space(), rng, 0.1)) for t in tasks]
    ran, failed, _ = states
    ran.search.record(ran.search.space.default(), 1e-5)
    ran.search.best_config = {**ran.search.best_config, "algorithm": "winograd4"}
    ran.trials, ran.resumed, ran.default_cost = 12, 8, 2e-5
    failed.search.record(failed.search.space.default(), math.inf)
    failed.trials = 3
    text = _report(TuneSummary(trials=15, seconds=1.0, tasks=states))
    lines = text.splitlines()
    assert "effective GFLOP/s, 2.00x the default) after 12 trials, 8 of them from earlier runs" in lines[1]
    assert lines[2].endswith("no valid measurement") and lines[3].endswith("not reached (budget)")
    assert lines[-2] == "tuned kernels: 0.01 ms, defaults 0.02 ms (1 of 3 tasks: those with a timed default)"
    assert lines[-1].startswith("effective GFLOP/s: the direct algorithm's FLOPs")


def test_the_summary_says_why_the_run_ended_before_its_time_budget(tmp_path):
    """Every task early-stopped (records replayed from earlier runs count): the run ends long
    before --time-budget, and the report's first line says so and how to search on."""
    from autotune.cli_tune import _report

    opts = TuneOptions(trials=1000, batch_size=2, early_stopping=2, time_budget_s=600, progress=False, seed=0)
    summary = Tuner([_matmul()], Database(tmp_path / "e.db"), opts, FAST).run()
    assert summary.stopped == "every task stopped" and summary.trials < 1000
    first = _report(summary).splitlines()[0]
    assert first.startswith(f"{summary.trials} trials in ") and "every task stopped early" in first
    assert "--early-stopping" in first


def test_each_result_is_committed_as_soon_as_it_is_final(tmp_path):
    """A tuner that dies in the middle of a batch keeps the batch's finished results: the
    measurer hands each one over as it ends, and the tuner commits it then."""
    from autotune.measure import Measurer

    class DiesAfterTwo(Measurer):
        def measure(self, task, configs, on_result=None):
            seen = []

            def report(r):
                on_result(r)
                seen.append(r)
                if len(seen) == 2:
                    raise KeyboardInterrupt  # killed while the batch's other runs were pending

            return super().measure(task, configs, on_result=report)

    db = Database(tmp_path / "t.db")
    tuner = Tuner(
        [_matmul()], db, TuneOptions(trials=8, batch_size=8, progress=False), FAST, measurer=DiesAfterTwo
    )
    with pytest.raises(KeyboardInterrupt):
        tuner.run()
    assert len(db.records()) == 2


def test_the_time_budget_bounds_the_whole_run_model_level_search_included(tmp_path):
    """`--time-budget` covers the model-level search too (it once ran 14 minutes into a 15
    minute budget before the first kernel): on MobileNetV2-96, whose per-block merge search
    alone takes minutes here, the run ends within the budget and a little (start-up, the
    last trials' batch: half the budget on a CI machine busy with other tests; the old code
    took 166 s with a 60 s budget), and the kernels got what the model-level search left of
    it, less what the in-model check after them was estimated to take (from a build and a run
    of the model). 90 s: on a fresh cache the first round of model-level configs takes its
    whole half, and the check's estimate about 15 s (the check's own builds), so a 60 s
    budget left the kernels 8-15 s."""
    from benchmarks.zoo import save

    model = tmp_path / "mv2.onnx"
    save("mobilenet_v2_96", model)
    budget = 150  # 90 s left the kernels nothing on a 40 GFLOP/s core (AMD EPYC znver1)
    argv = ["tune", str(model), "--threads", "1", "--trials", "100000", "--time-budget", f"{budget}s"]
    began = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "tensorir.cli", *argv, "--db", str(tmp_path / "t.db")],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=10 * budget,
    )
    took = time.monotonic() - began
    assert out.returncode == 0, out.stderr[-2000:]
    assert "model-level config" in out.stdout and "best: layout block" in out.stdout
    assert f"(at most {budget // 2} s of --time-budget {budget}s)" in out.stdout
    assert re.search(
        r"; the kernels get \d+ s of the time budget, the check after them \d+ s \(from a build of "
        r"[\d.]+ s, a copy of \d+ ms, a run of [\d.]+ ms and a profile of [\d.]+ ms\)$",
        out.stdout,
        re.M,
    )
    assert "records kept:" in out.stdout  # the in-model check ran, within the budget too
    trials, seconds = map(
        int, re.search(r"^(\d+) trials in (\d+) s \(the time budget", out.stdout, re.M).groups()
    )
    # the kernels' search runs for the share it was given (what the model-level search and the
    # check's estimate leave; with a 90 s budget, 5 s on a 40 GFLOP/s core), not less
    share = int(re.search(r"the kernels get (\d+) s of the time budget", out.stdout).group(1))
    assert trials > 0 and share > 0 and seconds >= 0.8 * share, out.stdout[-3000:]
    assert took < 1.5 * budget, f"{took:.0f} s for a {budget} s budget"
