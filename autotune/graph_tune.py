"""Model-level knobs, measured end to end: the packed layout's channel block and whether
depthwise convs merge into the 1x1 conv after them.

The layout pass packs activations NCHW -> NCHW[x]c with blocks up to x (default: the
target's float32 vector lanes). A different x changes every conv's kernel and the transforms
between them, so it is tuned on the whole model (as TVM's graph tuner and MNN's NC4HW4 choice
do at their level). `fuse_dwpw` (passes/fuse_dwpw.py) trades the depthwise output's round trip
through memory for a kernel that reads the 1x1 weights once per row chunk, which only the
whole model can judge; so does "block", the 1x1 expand merged in front of it too (the
expand recomputed for the depthwise's halo rows, the expanded tensor never in memory). Each
combination is compiled and the model timed, interleaved; the
result is recorded under the model's key (`tensorir.compiler.model_key`) with config
{"layout_block": x, "fuse_dwpw": bool or "block"} ("fuse_dwpw" only for models that have a block to
merge). Where the best of those merges, the merge is then chosen block by block
(`refine_merge_plan`: per depthwise conv, apart / with the 1x1 after it / the whole block, each
level kept only where the whole model ran faster with it), and the plan found ("fuse_dwpw":
"BBTT...N") is measured in a last round with the others. Before the merge, the layout block
is chosen per layout segment the same way (`refine_layout_caps`: "layout_block" becomes a list
of caps, one per segment of tensorir/passes/layout_segments.py; the caps come from in-model
kernel profiles of the model built with each block, autotune/segment_caps.py, and are kept only
where the whole model runs faster with them). `tir compile` then reads it like
any record (pipeline.model_choices), and the kernel tasks are extracted from the graph with
the chosen knobs.

`deadline` (a time.monotonic() instant; `tir tune --time-budget` gives this search half the
budget) bounds the per-segment searches: past it, no further segment or conv is tried, the
plan found so far must still win its three timings, and the merge search's place is recorded
("merge_from": the next conv) so that the next `tir tune` goes on from there.

At more than one thread, each round and each of the three final timings runs between two
probes of autotune/idle.py, and again while one finds a core busy: a round a core stayed busy
through is not recorded (the rules' choices stand, and the next `tir tune` measures it), and
such a final timing is never a win.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np

from autotune.database import Database
from autotune.idle import probe, retry_while_busy
from autotune.interleaved import time_interleaved


def layout_choices(target: str) -> list[int]:
    from tensorir.target import get_target

    lanes = get_target(target).vector_lanes("float32")
    return sorted({max(1, lanes // 2), lanes, lanes * 2})


def model_configs(model: str | os.PathLike, target: str, input_shapes: Mapping[str, Sequence[int]] | None):
    """Every model-level config to measure: each layout block, with and without the
    depthwise + 1x1 merge where the model has such a pair, and with the whole block (the
    expand merged too: "block") where it has one."""
    from autotune.task import load_graph
    from tensorir.ops.dwpw import is_dwpw

    g = load_graph(model, target, input_shapes, fuse_dwpw="block")
    bodies = [g.node(n).attr.get("body") for n in g.op_nodes() if g.node(n).op == "fused"]
    merged = [str(b).count("conv2d_nchwc") for b in bodies if is_dwpw(b)]
    fuse = (["block"] if 3 in merged else []) + [True, False] if merged else [None]
    return [
        {"layout_block": b, **({} if f is None else {"fuse_dwpw": f})}
        for b in layout_choices(target)
        for f in fuse
    ]


def _same(a: Mapping, b: Mapping) -> bool:
    """Whether two model configs build the same model (an old record without "fuse_dwpw" was
    measured without the merge)."""
    from tensorir.pipeline import merge_choice

    same_merge = merge_choice(a.get("fuse_dwpw")) == merge_choice(b.get("fuse_dwpw"))
    return a.get("layout_block") == b.get("layout_block") and same_merge


def tune_model_level(
    model: str | os.PathLike,
    db: Database,
    device: str = "host",
    target: str = "host",
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    runs: int = 20,
    log=print,
    threads: int | None = None,
    per_block: bool = True,
    deadline: float | None = None,
) -> dict | None:
    """Measure the model with every model-level config (all together, interleaved) unless
    each has a record; the best config (None when the model has nothing to choose). A new
    round (a config without a record: new code offers a new choice) replaces the model's
    records: the old round's timings came from other code, so they cannot rank with it (they
    had MobileNetV2-224 keep an old unmerged record over the faster new whole-block merge).

    `per_block`: then choose the best config's layout block per layout segment
    (refine_layout_caps) and, where it merges depthwise convs, the merge block by block
    (refine_merge_plan), and measure the config found in a last round with the others. A
    recorded search that `deadline` cut short ("merge_from") goes on from where it stopped."""
    from tensorir.compiler import model_key
    from tensorir.frontend import model_bytes

    key = model_key(model_bytes(model), input_shapes)
    recorded = db.workload_records(key, device, target)  # a config that did not build: inf
    done = [{**r, "mean_cost": math.inf if r.get("error") else r["mean_cost"]} for r in recorded]
    configs = model_configs(model, target, input_shapes)
    refined = [r["config"] for r in done if _is_refined(r["config"])]
    round_s = None
    if not all(any(_same(c, r["config"]) for r in done) for c in configs):
        began = time.monotonic()
        done = _measure_round(model, db, key, device, target, input_shapes, configs, runs, log, threads)
        round_s, refined = time.monotonic() - began, []
    best = _best(done, configs + refined)
    unfinished = [c for c in refined if "merge_from" in c]
    if not per_block or best is None or (refined and not unfinished):
        return best
    if deadline is not None:  # the search stops in time for the last round and the plan's checks
        if round_s is None:
            cost = min(r["mean_cost"] for r in done if _same(r["config"], best))
            round_s = _round_estimate(model, target, input_shapes, best, threads, len(configs), runs, cost)
        deadline -= 2 * round_s
    if _past(deadline):
        log("  the per-segment search: no time left (--time-budget); the next tir tune does it")
        return best
    new = refine_per_segment(
        model, target, input_shapes, (unfinished or [best])[0], runs, threads, log, deadline
    )
    # (the rules' own choices when nothing won: recorded, so no later run searches again)
    log(f"  {config_label(new)}: measured with the model-level configs")
    configs = [*configs, new]
    last = _measure_round(model, db, key, device, target, input_shapes, configs, runs, log, threads)
    return _best(last, configs) if last else best  # (busy: the first round's best stands)


def _round_estimate(model, target, input_shapes, config, threads, n: int, runs: int, cost: float) -> float:
    """Seconds a round of n + 1 configs takes: one build timed, and the runs at `cost` each."""
    began = time.monotonic()
    _compile(model, target, input_shapes, config, threads)
    return (n + 1) * (time.monotonic() - began + runs * cost)


def _past(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() > deadline


def _is_refined(config: Mapping) -> bool:
    """A config from the per-segment search: its layout block is a list of caps."""
    return isinstance(config.get("layout_block"), list)


def refine_per_segment(
    model: str | os.PathLike,
    target: str,
    input_shapes: Mapping[str, Sequence[int]] | None,
    best: Mapping,
    runs: int = 20,
    threads: int | None = None,
    log=print,
    deadline: float | None = None,
) -> dict:
    """`best` with its layout block chosen per layout segment (refine_layout_caps) and then,
    where it merges depthwise convs, its merge chosen per block (refine_merge_plan). A `best`
    with "merge_from" (a search cut short) keeps its caps and plan and goes on from that conv;
    the result has "merge_from" where `deadline` cut this search short."""
    base = {k: v for k, v in best.items() if k != "merge_from"}
    caps = refine_layout_caps(model, target, input_shapes, base, runs, threads, log, deadline=deadline)
    new = {**base, "layout_block": caps}
    if "fuse_dwpw" not in base:
        return new
    if _past(deadline):  # the caps took the time: the merge search is the next run's
        log("  merge plan per block: no time left (--time-budget); the next tir tune does it")
        return {**new, "merge_from": 0}
    found = refine_merge_plan(
        model,
        target,
        input_shapes,
        new,
        runs,
        threads,
        log,
        first=best.get("merge_from", 0),
        deadline=deadline,
    )
    if found is None:
        return new
    new["fuse_dwpw"] = found.plan
    return new if found.resume_at is None else {**new, "merge_from": found.resume_at}


def refine_layout_caps(
    model: str | os.PathLike,
    target: str,
    input_shapes: Mapping[str, Sequence[int]] | None,
    base: Mapping,
    runs: int = 20,
    threads: int | None = None,
    log=print,
    margin: float = 0.02,
    keep: float = 0.005,
    deadline: float | None = None,
) -> list[int]:
    """A channel-block cap per layout segment (autotune/segment_caps.py). The model is built
    with each cap of layout_choices and its kernels profiled in place and charged to the
    segments they write; each segment that ran faster with another cap is a candidate. From
    `base`'s one cap everywhere, the candidates are tried one at a time, largest guessed
    saving first, on a real build: kept where the model's kernels, all profiled, took `keep`
    less time in all. The caps found must then beat `base`'s one cap by `margin` of the
    whole model in three timings on fresh builds, else every segment keeps it. Past
    `deadline` no further candidate is tried."""
    from autotune.segment_caps import candidates, kernel_times, segment_of_names, segment_times
    from tensorir.frontend import load_graph_any
    from tensorir.passes.layout_segments import segment_count
    from tensorir.pipeline import optimize

    cap = base["layout_block"]
    if not isinstance(cap, int):
        return list(cap)
    g = optimize(load_graph_any(os.fspath(model), input_shapes), target=target, fuse=False, layout=False)
    n = segment_count(g)
    same = [cap] * n
    choices = layout_choices(target)
    if n == 0 or cap not in choices or len(choices) < 2:
        return same

    def build(caps_: list[int] | int):
        return _compile(model, target, input_shapes, {**base, "layout_block": caps_}, threads)

    mods = [build(c) for c in choices]
    profiles = segment_times(mods, segment_of_names(g), n)
    found = candidates(dict(zip(choices, profiles, strict=True)), cap)
    log(f"  layout block per segment ({n} segments, from {cap}): {len(found)} candidates")
    caps, mod = same, mods[choices.index(cap)]  # one cap everywhere builds what `cap` built
    for k, (gain, s, c) in enumerate(found):
        if _past(deadline):
            log(f"    stopped after {k} of {len(found)} candidates: the time budget's share ran out")
            break
        trial = [*caps[:s], c, *caps[s + 1 :]]
        new_mod, error = _try_build(build, trial)
        if error:
            log(f"    segment {s} -> {c}: {error}")
            continue
        now, then = (float(t.sum()) * 1e3 for t in kernel_times([mod, new_mod]))
        verdict = "kept" if then < now * (1 - keep) else "no gain"
        log(f"    segment {s} -> {c} (guess {gain * 1e3:.3f} ms less): {now:.3f} -> {then:.3f} ms, {verdict}")
        if verdict == "kept":
            caps, mod = trial, new_mod
    if caps != same and not _wins_thrice(build, same, caps, runs, margin, threads):
        log(f"  {_caps(caps)} did not beat layout block {cap} by {margin:.0%} in each of 3 timings: it stays")
        caps = same
    return caps


def _caps(caps: int | Sequence[int]) -> str:
    """Caps run-length coded: "16x12 32x3 16x5"."""
    if isinstance(caps, int):
        return str(caps)
    runs: list[list[int]] = []
    for c in caps:
        if runs and runs[-1][0] == c:
            runs[-1][1] += 1
        else:
            runs.append([c, 1])
    return " ".join(f"{c}x{k}" for c, k in runs) or "-"


def _measure_round(model, db, key, device, target, input_shapes, configs, runs, log, threads) -> list[dict]:
    """Compile the model with each config, time them interleaved, replace the model's records
    by these; the records as {"config", "mean_cost"}."""
    built = [_try_build(lambda c: _compile(model, target, input_shapes, c, threads), c) for c in configs]
    mods = [m for m, error in built if not error]
    # all together (the machine drifts), and between idle probes (autotune/idle.py)
    timed, busy = retry_while_busy(lambda: time_interleaved(mods, runs) if mods else [], probe(threads))
    if busy:  # a busy core slows builds by different amounts: the rules' choices stand
        log("  a core was busy through every try: the round is not recorded; the next tir tune measures it")
        return []
    timings = iter(timed)
    db.forget(key, device)
    done = []
    for config, (_, error) in zip(configs, built, strict=True):
        rec = {"workload_key": key, "device": device, "target": target, "config": config}
        if error:  # recorded as failed, so the next run does not measure the round again
            db.add({**rec, "error": error})
            done.append({"config": config, "mean_cost": math.inf})
            log(f"  {config_label(config)}: {error}")
            continue
        costs = next(timings)
        db.add({**rec, "costs": costs})
        done.append({"config": config, "mean_cost": float(np.mean(costs))})
        log(f"  {config_label(config)}: {np.mean(costs) * 1e3:.3f} ms per run")
    return done


def _best(done: list[dict], configs: list[dict]) -> dict | None:
    finite = [
        r for r in done if math.isfinite(r["mean_cost"]) and any(_same(c, r["config"]) for c in configs)
    ]
    return dict(min(finite, key=lambda r: r["mean_cost"])["config"]) if finite else None


def _compile(model, target: str, input_shapes, config: Mapping, threads: int | None):
    import tensorir as tir

    mod = tir.compile(
        os.fspath(model),
        target,
        input_shapes,
        layout_block=config["layout_block"],
        fuse_dwpw=config.get("fuse_dwpw"),
    )
    if threads:
        mod.set_num_threads(threads)
    return mod


def refine_merge_plan(
    model: str | os.PathLike,
    target: str,
    input_shapes: Mapping[str, Sequence[int]] | None,
    base: Mapping,
    runs: int = 20,
    threads: int | None = None,
    log=print,
    margin: float = 0.02,
    first: int = 0,
    deadline: float | None = None,
) -> PlanFound | None:
    """The merge plan (passes/fuse_dwpw.py: per depthwise conv N, T or B) that `base`'s
    layout block runs fastest with, found block by block: from the plan `base`'s merge rule
    gives, each depthwise conv in turn tries its other levels, the whole model timed with each
    (interleaved with the current plan), and a level is kept only where the model ran more
    than `margin` faster, twice: the second time on fresh builds of both; at the end the plan
    found must beat the rules' plan in three more timings (else the rules' plan stays; it is
    recorded all the same, so the next `tir tune` does not search again).
    None when the model has no depthwise conv. The search starts at conv `first` (a search
    cut short goes on, from `base`'s plan); past `deadline` it stops, and `resume_at` says
    at which conv the next one starts (None: every conv was tried)."""
    from autotune.task import load_graph
    from tensorir.passes import copy_graph
    from tensorir.passes.fuse_dwpw import PLAN_LEVELS, apply_plan, plan_of
    from tensorir.pipeline import merge_choice

    block = base["layout_block"]
    unmerged = load_graph(model, target, input_shapes, block, fuse_dwpw=False)
    start = plan_of(load_graph(model, target, input_shapes, block, merge_choice(base.get("fuse_dwpw"))))
    if not start:
        return None

    def effective(plan: str) -> str:  # the plan as it applies (a level that cannot merge: less)
        g = copy_graph(unmerged)
        apply_plan(g, plan)
        return plan_of(g)

    def build(plan: str):
        return _compile(model, target, input_shapes, {"layout_block": block, "fuse_dwpw": plan}, threads)

    plan, mod, seen, resume_at = start, build(start), {start}, None
    log(
        f"  merge plan per block, from {start}"
        + (f" at conv {first}" if first else "")
        + f" (layout block {_caps(block)}):"
    )
    for k in range(first, len(plan)):
        if _past(deadline):
            resume_at = k
            log(f"    stopped before conv {k} of {len(plan)}: the time budget's share ran out")
            break
        alts = []
        for level in PLAN_LEVELS:
            alt = effective(plan[:k] + level + plan[k + 1 :])
            if alt not in seen:
                seen.add(alt)
                alts.append(alt)
        ok = []
        for a in alts:
            m, error = _try_build(build, a)
            if error:
                log(f"    conv {k}: {a[k]} {error}")
            else:
                ok.append((a, m))
        if not ok:
            continue
        alts, mods = [a for a, _ in ok], [mod, *(m for _, m in ok)]
        costs = _medians(mods, runs)
        k_best = int(np.argmin(costs))
        verdict = "no gain"
        if k_best and costs[k_best] < costs[0] * (1 - margin):
            # confirmed on fresh builds of both: two builds of one graph differ by up to 2-3%
            # in one timing here (MobileNetV2-224), as much as a block's merge changes
            again = _medians([build(plan), build(alts[k_best - 1])], runs)
            verdict = "kept" if again[1] < again[0] * (1 - margin) else "not confirmed"
        tried = " ".join(f"{a[k]} {c * 1e3:.3f}" for a, c in zip([plan, *alts], costs, strict=True))
        log(f"    conv {k}: {tried} ms: {verdict}")
        if verdict == "kept":
            plan, mod = alts[k_best - 1], mods[k_best]
    if plan != start and not _wins_thrice(build, start, plan, runs, margin, threads):
        which = "the earlier" if first else "the rules'"
        log(f"  {plan} did not beat {start} by {margin:.0%} in each of 3 timings: {which} plan stays")
        plan = start
    return PlanFound(plan, resume_at)


def _try_build(build, choice) -> tuple[object, str | None]:
    """(build(choice), None), or (None, why) where the compiler refuses the choice (a config,
    caps or plan): a search goes on without it."""
    from tensorir.errors import TirError

    try:
        return build(choice), None
    except TirError as e:
        return None, f"does not build: {e}"


class PlanFound(NamedTuple):
    """refine_merge_plan's answer: the plan, and the conv a cut-short search goes on from."""

    plan: str
    resume_at: int | None


def _wins_thrice(build, start: str, plan: str, runs: int, margin: float, threads: int | None) -> bool:
    """Whether `plan` beats `start` by `margin` in each of three timings on fresh builds: a
    level that noise let through both of its timings (PicoDet, 2 threads: 1 in 37) seldom
    survives three more of the whole plan. A timing a core was busy through is never a win."""
    idle = probe(threads)
    for _ in range(3):
        (base, new), busy = retry_while_busy(lambda: _medians([build(start), build(plan)], runs), idle)
        if busy or not new < base * (1 - margin):
            return False
    return True


def _medians(mods: list, runs: int) -> list[float]:
    return [float(np.median(c)) for c in time_interleaved(mods, 2 * runs, rounds=8)]


def config_label(config: Mapping) -> str:
    merge = config.get("fuse_dwpw")
    where = config.get("merge_from")
    return (
        f"layout block {_caps(config['layout_block'])}"
        + ("" if merge is None else f", depthwise + 1x1 merged {merge}")
        + ("" if where is None else f" (merge search to go on at conv {where})")
    )
