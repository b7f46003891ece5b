"""Timing compiled modules side by side on a shared machine: the modules take turns round
by round, in orders that put every module in every slot (turn_orders), each turn run untimed
past the last module's spinning pool first (settle). Whole runs (time_interleaved) or each
kernel in place (profile_rounds, profile_interleaved); the tuning run's in-model check
(autotune/model_check.py), the model-level search (graph_tune.py) and the benchmarks use them."""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from typing import Any

import numpy as np


def feeds_of(mod: Any) -> dict[str, np.ndarray]:
    """Seeded inputs for a compiled module (uniform(-1, 1) floats, zero integers)."""
    rng = np.random.default_rng(0)
    return {
        t["name"]: rng.uniform(-1, 1, t["shape"]).astype(t["dtype"])
        if "float" in t["dtype"]
        else np.zeros(t["shape"], t["dtype"])
        for t in mod.inputs
    }


SETTLE_S = 0.002  # untimed runs at each turn: the last module's pool workers stop spinning


def settle(call: Any, seconds: float = SETTLE_S) -> None:
    """Run `call` untimed for `seconds` (once at least). Each compiled library has its own
    thread pool, whose workers spin for about half a millisecond after a run before they sleep;
    at a turn from one module to the next, the last one's spinning workers share the cores
    with the next one's first runs, so each turn first runs past that spin. On 2 cores, two
    builds of MobileNetV2-96 in time_interleaved (20 runs, 5 rounds; six repeats): 0.397-0.440
    ms and up to 8% apart without it, 0.354-0.394 ms and mostly within 1% of each other with it."""
    end = time.perf_counter() + seconds
    call()
    while time.perf_counter() < end:
        call()


def turn_orders(n: int) -> list[tuple[int, ...]]:
    """The orders in which `n` builds take their turns, round after round, so that every build
    sits in every slot as often over a whole number of turns: every permutation (n <= 3), else
    every rotation. A fixed order favours some slots: on the Zen 3 VM, 2 threads, one module
    timed twice per round ran 0.714 ms in the first slot and 0.605 ms in the second."""
    if n <= 3:
        return list(itertools.permutations(range(n)))
    return [tuple((k + r) % n for k in range(n)) for r in range(n)]


def whole_turns(rounds: int, n: int) -> list[tuple[int, ...]]:
    """The order of each round: `rounds` raised to a whole number of turns of turn_orders(n)."""
    orders = turn_orders(n)
    return [orders[r % len(orders)] for r in range(-(-rounds // len(orders)) * len(orders))]


WHOLE_ROUNDS = 5  # time_interleaved's rounds (the check's whole-model A/B)


def time_interleaved(mods: Sequence[Any], runs: int, rounds: int = WHOLE_ROUNDS) -> list[list[float]]:
    """Per module one cost per round, each the median of runs / rounds timed runs; the modules
    take turns round by round (whole_turns: `rounds` is raised to a whole number of turns), so
    a slower stretch of a shared machine hits all of them and no module keeps one slot."""
    calls = [m.bind(feeds_of(m)) for m in mods]
    for call in calls:
        for _ in range(3):
            call()
    costs: list[list[float]] = [[] for _ in mods]
    for order in whole_turns(rounds, len(mods)):
        for k in order:
            settle(calls[k])
            times = []
            for _ in range(max(1, runs // rounds)):
                t0 = time.perf_counter()
                calls[k]()
                times.append(time.perf_counter() - t0)
            costs[k].append(float(np.median(times)))
    return costs


def profile_rounds(mods: Sequence[Any], rounds: int, repeat: int = 1) -> list[list[list[float]]]:
    """Per module, per round: each kernel's in-model seconds (Module.profile, the median of
    `repeat` passes); the modules take turns round by round in whole_turns order, each turn
    settled first."""
    feeds = [feeds_of(m) for m in mods]
    for m, f in zip(mods, feeds, strict=True):
        m.profile(f, repeat=2)  # warm-up: first-touch pages, thread pool, program caches
    calls = [m.bind(f) for m, f in zip(mods, feeds, strict=True)]
    out: list[list[list[float]]] = [[] for _ in mods]
    for order in whole_turns(rounds, len(mods)):
        for k in order:
            settle(calls[k])
            out[k].append([row["seconds"] for row in mods[k].profile(feeds[k], repeat=repeat)])
    return out


def profile_interleaved(mods: Sequence[Any], rounds: int) -> list[list[dict[str, float]]]:
    """Per module, per round: {workload key: in-model seconds of all its kernels}."""
    out: list[list[dict[str, float]]] = []
    for m, per_round in zip(mods, profile_rounds(mods, rounds), strict=True):
        out.append([])
        for seconds in per_round:
            per: dict[str, float] = {}
            for kernel, t in zip(m.manifest["kernels"], seconds, strict=True):
                per[kernel["workload"]] = per.get(kernel["workload"], 0.0) + t
            out[-1].append(per)
    return out
