"""The end of every tuning run: the tuned kernels checked inside the model, per task.

Kernels are tuned alone; a model runs them among their neighbours, where a kernel's weights
come from memory and its input is whatever its producer left in the cache. A record that
wins alone can lose there. So a tuning run ends by compiling the model twice with the same
layout block, once with the kernel records and once without, and timing every kernel in
place (`Module.profile`: the kernels in model order, over the model's own memory), the two
modules taking turns round by round. Per tuned workload it stores two records timed in the
model (``timing`` "model"): the tuned config and the defaults (config ``{}``), each at its
in-model time per call. The tuned config is the workload's best record timed alone, whatever
an earlier check chose (`_Candidates`), so a later run's better pick is checked too. In-model
records outrank records timed alone (autotune/database.py), those of a workload's newest
check only (its defaults, written first, date it: record_format.BASELINES), so `tir compile`
then keeps a record only where it made the model faster in the newest check, and uses the
defaults elsewhere. Last comes the
whole-model figure: the model compiled without any records and with the checked ones, timed
interleaved. Both go in as in-model records of the model's own key (configs
{"kernel_records": False} and the layout config with "kernel_records": True), so where the
records together made the whole model slower, `tir compile` of that model ignores them all
(tensorir/pipeline.py: model_choices). At more than one thread that A/B is taken between two
probes of whether the cores are idle (autotune/idle.py) and again while one is busy, or while
the build with the records runs SLOWED_RATIO slower than the quickest whole-model run of this
tuning run (the whole machine slowed by another tenant); if it stays busy only the timing
without records is stored, so a busy machine can keep the defaults but never make the records
win.

    check = check_in_model("model.onnx", db, device, target)
    print(check.report())
"""

from __future__ import annotations

import dataclasses
import math
import os
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

import autotune.idle
from autotune.database import Database
from autotune.interleaved import (
    SETTLE_S,
    WHOLE_ROUNDS,
    feeds_of,
    profile_interleaved,
    time_interleaved,
    whole_turns,
)

ROUNDS, WHOLE_RUNS = 15, 30  # the check's defaults: profile rounds, whole-model runs per copy
# the records are used only where they time the whole model this much faster: a gain inside
# the A/B's noise is none (MobileNetV2-224 at 2 threads, AMD EPYC znver1: records checked at
# 1.002x ran the model 1.025x slower in benchmarks.build_ab, 30 runs); graph_tune's margin
MIN_GAIN = 0.02
# the whole-model A/B counts as taken on a busy machine where the build with the records ran
# this much slower than the quickest whole-model run of this tuning run (the model-level
# search's rounds, the probe of the build the records go into): another tenant slowing both
# cores alike, which the idle probe cannot see (MobileNetV2-224 at 2 threads, AMD EPYC Zen 4:
# 3.6 ms in the model-level rounds, 5.7 in the A/B, where the records won 1.06x; 1.01x on a
# quiet machine). The tuned side, not the untuned: it has the model-level config those rounds
# chose, while the untuned build takes the rules' layout block, and one model's blocks differ up
# to 1.38x (ResNet-50 on Zen 3: block 4 131.9 ms, block 8 95.8) and 1.23x (ResNet-18, Zen 4)
SLOWED_RATIO = 1.3


@dataclasses.dataclass
class WorkloadCheck:
    key: str
    label: str
    count: int  # kernels of this workload in the model
    default_s: float  # seconds per call in the model, defaults
    tuned_s: float  # seconds per call in the model, with the record
    alone_s: float  # the record's own cost (timed alone)

    @property
    def kept(self) -> bool:
        return self.tuned_s < self.default_s


@dataclasses.dataclass
class ModelCheck:
    workloads: list[WorkloadCheck]
    plain_s: float = float("nan")  # the whole model without records
    tuned_s: float = float("nan")  # the whole model with the checked records
    rounds: int = ROUNDS  # profile rounds per workload verdict
    whole_runs: int = WHOLE_RUNS  # whole-model runs per copy of each build
    busy: bool = False  # a core was busy (or the machine slowed) through every try of the A/B
    quiet_s: float = float("nan")  # the quickest whole-model run recorded before the A/B

    @property
    def records_win(self) -> bool:
        """Whether the whole model ran at least MIN_GAIN faster with the records, on idle cores."""
        return not self.busy and self.tuned_s * (1 + MIN_GAIN) <= self.plain_s

    def report(self, top: int = 12) -> str:
        rows = sorted(self.workloads, key=lambda w: -w.count * max(w.default_s, w.tuned_s))
        lines = ["in the model (ms per call: alone -> in the model, defaults vs record):"]
        for w in rows[:top]:
            verdict = "kept" if w.kept else "DROPPED (defaults faster in the model)"
            lines.append(
                f"  {w.label} x{w.count}: alone {w.alone_s * 1e3:.3f}, "
                f"model {w.default_s * 1e3:.3f} vs {w.tuned_s * 1e3:.3f}: {verdict}"
            )
        if len(rows) > top:
            lines.append(f"  ... {len(rows) - top} more")
        dropped = sum(not w.kept for w in self.workloads)
        lines.append(
            f"records kept: {len(self.workloads) - dropped} of {len(self.workloads)} "
            f"({self.rounds} rounds in the model)"
        )
        if np.isfinite(self.plain_s) and self.busy:
            why = (
                f"the machine ran the tuned model {self.tuned_s / self.quiet_s:.2f}x slower than its "
                f"quickest run in this tuning run ({self.quiet_s * 1e3:.3f} ms)"
                if slowed(self.tuned_s, self.quiet_s)
                else "a core was busy"
            )
            lines.append(
                f"whole model: {self.plain_s * 1e3:.3f} ms untuned, {self.tuned_s * 1e3:.3f} ms with the "
                f"records, but {why} through every try: only the untuned timing is recorded "
                "(tir compile keeps the defaults unless an earlier check found the records faster); "
                "run tir tune again on an idle machine"
            )
        elif np.isfinite(self.plain_s):
            if self.records_win:
                sign = "faster"
            elif self.tuned_s < self.plain_s:
                sign = f"a gain under {MIN_GAIN:.0%}: tir compile will not use them"
            else:
                sign = "SLOWER: tir compile will not use them"
            lines.append(
                f"whole model: {self.plain_s * 1e3:.3f} ms untuned, {self.tuned_s * 1e3:.3f} ms with the "
                f"records ({self.plain_s / self.tuned_s:.2f}x, {sign}; timed interleaved)"
            )
        return "\n".join(lines)


# the least the check is cut to where a time budget is short (fit_check)
MIN_ROUNDS, MIN_WHOLE_RUNS = 3, 5
BUILDS = 3  # the check's compiles besides the probe's: with the records, with none, the checked ones
# a check's build against the probe's: the probe finds its kernels in the caches (the model-level
# search built them), the check's builds mostly do not (LLVM builds their objects anew).
# MobileNetV2-96: 3.9-4.6 s against 1.2-2.2; PicoDet at 800 x 608: 14 s against 3.8
COLD_BUILD = 3.5


@dataclasses.dataclass(frozen=True)
class ModelTiming:
    """What check_seconds sizes the check from: a build of the model, a run, a profile call
    of one pass (Module.profile: a run, then every kernel timed apart, each with its ctypes
    set-up: two runs' time on PicoDet at 800 x 608) and a fresh copy of a build (exported
    and loaded, as `placements` makes them)."""

    compile_s: float
    run_s: float
    pass_s: float
    copy_s: float = 0.0


def model_runs(rounds: int, whole_runs: int, run_s: float) -> tuple[float, int]:
    """(runs, profile calls) check_in_model makes: per module (two builds, COPIES copies
    each) profile_rounds' warm-up call of two passes (one more run) and per turn a settle and
    a call of one pass, then time_interleaved's three warm-up runs and per turn a settle and
    its timed runs. A settle is SETTLE_S of runs, one at least."""
    n = 2 * COPIES
    settle = max(1.0, SETTLE_S / max(run_s, 1e-9))
    profile_turns = len(whole_turns(rounds, n)) * n
    per_turn = max(1, whole_runs * COPIES // WHOLE_ROUNDS)
    whole = n * 3 + len(whole_turns(WHOLE_ROUNDS, n)) * n * (settle + per_turn)
    return n + profile_turns * settle + whole, n + profile_turns


def check_seconds(
    timing: ModelTiming, rounds: int = ROUNDS, whole_runs: int = WHOLE_RUNS, builds: int = BUILDS
) -> float:
    """What check_in_model takes: `builds` compiles, COPIES fresh copies of each of its four
    builds, its model runs and its profile calls."""
    runs, calls = model_runs(rounds, whole_runs, timing.run_s)
    copies = 4 * COPIES * timing.copy_s
    return builds * timing.compile_s + copies + runs * timing.run_s + calls * timing.pass_s


def fit_check(
    seconds: float, timing: ModelTiming, builds: int = BUILDS, most: tuple[int, int] = (ROUNDS, WHOLE_RUNS)
) -> tuple[int, int]:
    """(rounds, whole_runs): `most`, or as many fewer as fit in `seconds` (both cut in step,
    MIN_ROUNDS and MIN_WHOLE_RUNS at least, whatever that takes)."""
    for share in (1.0, 0.8, 0.6, 0.4, 0.2, 0.0):
        rounds = min(most[0], max(MIN_ROUNDS, round(most[0] * share)))
        whole_runs = min(most[1], max(MIN_WHOLE_RUNS, round(most[1] * share)))
        if check_seconds(timing, rounds, whole_runs, builds) <= seconds:
            break
    return rounds, whole_runs


@dataclasses.dataclass
class CheckProbe:
    """The model compiled as the check compiles it without kernel records, and its timing,
    taken before the kernel tuner starts: what the time set aside for the check is estimated
    from (`seconds`); the module is the check's first build."""

    module: Any
    timing: ModelTiming

    def seconds(self) -> float:
        return check_seconds(dataclasses.replace(self.timing, compile_s=COLD_BUILD * self.timing.compile_s))


def probe_check(
    model: str | os.PathLike,
    db: Database,
    device: str,
    target: str,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    threads: int | None = None,
) -> CheckProbe:
    """Build the model as check_in_model builds it without kernel records, and time it."""
    started = time.perf_counter()
    plain = _compile(model, target, input_shapes, _layout(_records(model, db, device, input_shapes)), threads)
    return CheckProbe(plain, time_model(plain, time.perf_counter() - started))


def time_model(mod: Any, compile_s: float, runs: int = 5) -> ModelTiming:
    """`mod`'s median run (after warm-up runs), median profile call of one pass, and the
    time of one fresh copy."""
    feeds = feeds_of(mod)
    passes = []
    for _ in range(3):
        t0 = time.perf_counter()
        mod.profile(feeds, repeat=1)
        passes.append(time.perf_counter() - t0)
    run_s = time_interleaved([mod], runs, rounds=1)[0][0]
    copy_s = 0.0
    if hasattr(mod, "export"):
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            _copy(mod, Path(tmp) / "copy", None)
            copy_s = time.perf_counter() - t0
    return ModelTiming(compile_s, run_s, float(np.median(passes)), copy_s)


def _layout(records: _Candidates) -> dict:
    """The model's own model-level record (layout block, merge plan), no kernel records."""
    best = records.best(records.mkey)
    return {records.mkey: best} if best else {}


def _records(model: Any, db: Database, device: str, input_shapes: Any) -> _Candidates:
    """What the check's tuned build compiles with (_Candidates)."""
    from autotune.records import Records
    from tensorir.compiler import model_key
    from tensorir.frontend import model_bytes

    mkey = model_key(model_bytes(model), input_shapes)
    alone = Records.open(db.path, False, device=device, timed_alone=True)
    return _Candidates(_NoVerdict(Records.open(db.path, False, device=device), mkey, alone), alone)


def check_in_model(
    model: str | os.PathLike,
    db: Database,
    device: str,
    target: str,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    threads: int | None = None,
    rounds: int = ROUNDS,
    whole_runs: int = WHOLE_RUNS,
    probe: CheckProbe | None = None,
    deadline: float | None = None,
    idle: Callable[[], bool] | None = None,
    since: float | None = None,
) -> ModelCheck:
    """Time each tuned workload in the model with and without its record, store both as
    in-model records, then time the whole model without records and with the checked ones.
    `probe`: the model already compiled without kernel records, and timed (probe_check).
    `deadline` (time.monotonic()): after its first build the check cuts `rounds` and
    `whole_runs` to what fits before it (fit_check, from that build's time and the probe's
    timing of a run, a profile call and a copy). The whole-model A/B is taken again while the
    build with the records runs SLOWED_RATIO slower than the model's quickest run (the
    model-level records timed since `since`, the probe's run), and at more
    than one thread between two probes of whether the cores are idle (`idle`, default
    autotune.idle.cores_idle) and again while a core is busy; if it stays busy only the timing
    without records is stored, so a busy machine can keep the defaults but never make the
    records win. So too where the records won by less than MIN_GAIN."""
    from autotune.records import Records

    records = _records(model, db, device, input_shapes)
    mkey = records.mkey
    plain = probe.module if probe else _compile(model, target, input_shapes, _layout(records), threads)
    started = time.monotonic()
    tuned = _compile(model, target, input_shapes, records, threads)
    if deadline is not None:
        compile_s = time.monotonic() - started
        timing = (
            dataclasses.replace(probe.timing, compile_s=compile_s) if probe else time_model(plain, compile_s)
        )
        rounds, whole_runs = fit_check(deadline - time.monotonic(), timing, BUILDS - 1, (rounds, whole_runs))
    with tempfile.TemporaryDirectory() as tmp:
        plains, tuneds = _placed([plain, tuned], Path(tmp), threads)
        timed = profile_interleaved([*plains, *tuneds], rounds)
    timed = [_mean_rounds(timed[: len(plains)]), _mean_rounds(timed[len(plains) :])]
    checks = []
    for kernel in _tuned_kernels(tuned):
        key = kernel["workload"]
        count = sum(k["workload"] == key for k in tuned.manifest["kernels"])
        per_call = [[r[key] / count for r in rows] for rows in timed]
        for config, costs in (({}, per_call[0]), (kernel["config"], per_call[1])):
            db.add({**_record(key, device, target, config), "costs": costs, "timing": "model"})
        default_s, tuned_s = (float(np.mean(c)) for c in per_call)  # as the records rank them
        checks.append(WorkloadCheck(key, _label(kernel), count, default_s, tuned_s, records.best_cost(key)))
    check = ModelCheck(checks, rounds=rounds, whole_runs=whole_runs)
    if whole_runs:
        checked = _NoVerdict(Records.open(db.path, False, device=device), mkey, records.alone)
        mods = [_compile(model, target, input_shapes, r, threads) for r in (None, checked)]
        check.quiet_s = min(
            quickest_model_s(db, mkey, device, target, since), probe.timing.run_s if probe else math.inf
        )
        with tempfile.TemporaryDirectory() as tmp:
            copies = _placed(mods, Path(tmp), threads)
            n, runs = len(copies[0]), whole_runs * len(copies[0])
            timed_whole, check.busy = autotune.idle.retry_while_busy(
                lambda: time_interleaved([*copies[0], *copies[1]], runs),
                idle or autotune.idle.probe(threads),
                lambda timed: slowed(float(np.mean(timed[n:])), check.quiet_s),
            )
        costs = [list(np.mean(timed_whole[:n], axis=0)), list(np.mean(timed_whole[n:], axis=0))]
        check.plain_s, check.tuned_s = (float(np.mean(c)) for c in costs)  # as the records rank them
        with_records = {**(records.best(mkey) or {}), "kernel_records": True}
        verdicts = [({"kernel_records": False}, costs[0]), (with_records, costs[1])]
        for config, c in verdicts if check.records_win else verdicts[:1]:
            db.add({**_record(mkey, device, target, config), "costs": c, "timing": "model"})
    return check


def slowed(tuned_s: float, quiet_s: float) -> bool:
    """Whether the whole-model A/B ran on a slowed machine: the build with the records this
    much slower than the model's quickest run in the tuning run (SLOWED_RATIO)."""
    return tuned_s > SLOWED_RATIO * quiet_s


def quickest_model_s(db: Database, key: str, device: str, target: str, since: float | None = None) -> float:
    """The quickest whole-model run the database holds for the model on `device` (its
    model-level records: the layout search's rounds, the checks), the machine's quiet speed
    for it; inf where there is none. `since` (time.time()): only records timed since
    then, on this machine (a log merged from another machine of the device key may be faster)."""
    fresh = [r for r in db.workload_records(key, device, target) if since is None or r["timestamp"] >= since]
    return min((min(r["costs"]) for r in fresh if not r.get("error") and r.get("costs")), default=math.inf)


class _Candidates:
    """The records the check times, as its tuned build reads them: per workload the best
    record timed alone (the tuner's pick; an earlier check's in-model verdict would outrank
    it, and a record found by a later `tir tune` of the database would never be timed in the
    model, nor used), and the model's own model-level record without its verdict."""

    def __init__(self, model_level: _NoVerdict, alone: Any) -> None:
        self.model_level, self.alone, self.mkey = model_level, alone, model_level.mkey

    def best(self, key: str) -> dict | None:
        return self.model_level.best(key) if key == self.mkey else self.alone.best(key)

    def best_cost(self, key: str) -> float:
        return self.alone.best_cost(key)


class _NoVerdict:
    """Records as a compile reads them, but for the model's own key the model-level search's
    best config (layout block, merge plan) without any whole-model verdict ("kernel_records"):
    the check times the records themselves. An earlier check's verdict outranks the search's
    records in `records` and a {"kernel_records": False} one holds no layout config, so the
    search's pick comes from `alone` (records timed alone: the search's, no verdicts); reading
    it from the verdict had a second check of MobileNetV2-224 time the rules' build where
    the kernels were tuned for the search's whole-block merge."""

    def __init__(self, records: Any, mkey: str, alone: Any) -> None:
        self.records, self.mkey, self.alone = records, mkey, alone

    def best(self, key: str) -> dict | None:
        return (self.alone if key == self.mkey else self.records).best(key)

    def best_cost(self, key: str) -> float:
        return self.records.best_cost(key)


# fresh file copies each build is timed from: the embedded weights are mapped from the library
# file, and two byte-identical files time up to 3-4% apart, steadily, while loads of one file
# agree within 0.6% (benchmarks/build_ab.py) -- one copy per build would put that offset on
# every kernel of the build and on the whole-model verdict
COPIES = 3


def placements(mod: Any, n: int, into: Path, tag: str, threads: int | None = None) -> list[Any]:
    """`mod` loaded from `n` fresh copies of its folder (itself where it cannot be exported)."""
    if n <= 1 or not hasattr(mod, "export"):
        return [mod]
    return [_copy(mod, into / f"{tag}{k}", threads) for k in range(n)]


def _copy(mod: Any, path: Path, threads: int | None) -> Any:
    import tensorir as tir

    copy = tir.load(mod.export(path))
    if threads:
        copy.set_num_threads(threads)
    return copy


def _placed(mods: Sequence[Any], into: Path, threads: int | None) -> list[list[Any]]:
    return [placements(m, COPIES, into, f"m{i}", threads) for i, m in enumerate(mods)]


def _mean_rounds(per_module: Sequence[list[dict[str, float]]]) -> list[dict[str, float]]:
    """Per round, each workload's seconds averaged over the copies of one build."""
    return [
        {key: float(np.mean([rows[r][key] for rows in per_module])) for key in per_module[0][r]}
        for r in range(len(per_module[0]))
    ]


def _compile(model: Any, target: str, shapes: Any, records: Any, threads: int | None) -> Any:
    import tensorir as tir

    mod = tir.compile(os.fspath(model), target, shapes, records=records)
    if threads:
        mod.set_num_threads(threads)
    return mod


def _tuned_kernels(mod: Any) -> list[dict]:
    """One manifest entry per workload that has a tuning config in `mod`."""
    seen: dict[str, dict] = {}
    for k in mod.manifest["kernels"]:
        if k.get("config") is not None:
            seen.setdefault(k["workload"], k)
    return list(seen.values())


def _record(key: str, device: str, target: str, config: dict) -> dict:
    return {"workload_key": key, "device": device, "target": target, "config": config}


def _label(kernel: dict) -> str:
    """The workload key's readable head (op and input types) and the algorithm."""
    algorithm = kernel.get("algorithm")
    return kernel["workload"].split(" #")[0] + (f" ({algorithm})" if algorithm else "")
