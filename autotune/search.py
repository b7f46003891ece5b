"""Model-guided search over one task's knob space.

Each round `TaskSearch.propose(n)` returns n configs not measured yet:

1. the first round starts with the default config (the untuned kernel is the baseline), also
   when resumed from records that do not hold it (older code's default differed);
2. without a trained cost model: random samples;
3. with one, a two-stage walk:
   * a wide pool -- `pool_random` random samples plus `pool_mutants` one-knob mutations
     (`Space.mutate`) of each of the `top_k` best measured configs -- is scored by a
     knob-only model (the cost model's training data restricted to the knob features of
     autotune/knob_features.py, retrained each round: a fraction of a second, and scoring
     needs no lowering); for `steps` generations the best-scored are mutated again and
     scored (a simulated-annealing-style walk);
   * the `prescreen` best of that walk are lowered (`featurize`: the Measurer's workers,
     ~0.1-0.4 s a candidate) and scored by the full model (loop-IR + knob features);
   * the top (1 - epsilon) n by that score, and epsilon n random configs (epsilon-greedy
     exploration: the model is only as good as what it has seen).

   Why two stages: good configs are a few percent of a space, so a pool of a few dozen
   random samples rarely holds one; lowering hundreds per round would cost more than
   measuring. The knob-only model ranks held-out configs nearly as well (0.78 vs 0.81
   pairwise accuracy in benchmarks/tune_eval.py), so it can pick which ones to lower.

`random` search (`model=None`) is the baseline the evidence benchmark compares against.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autotune.knob_features import KNOB_OFFSET, NUM_CANDIDATE_FEATURES, knob_features
from tensorir.schedule.space import Space, config_key

Featurize = Callable[[Sequence[dict]], list[np.ndarray | None]]


@dataclass
class TaskSearch:
    space: Space
    rng: random.Random
    epsilon: float = 0.1
    pool_random: int = 256
    pool_mutants: int = 4  # per top config
    top_k: int = 8
    steps: int = 2  # generations of the knob-only walk
    prescreen: int = 32  # candidates lowered and scored by the full model per round
    seen: set[str] = field(default_factory=set)
    measured: list[tuple[dict, float]] = field(default_factory=list)
    best_cost: float = math.inf
    best_config: dict | None = None

    def record(self, config: dict, cost: float) -> bool:
        """Note a measurement; True when it is a new best."""
        self.seen.add(config_key(self.space.complete(config)))
        self.measured.append((config, cost))
        if cost < self.best_cost:
            self.best_cost, self.best_config = cost, config
            return True
        return False

    def retime(self, timings: Sequence[tuple[dict, float]]) -> None:
        """New costs for configs measured before (timed again together, so that they compare
        within one session): every config keeps its latest cost, and the best is the fastest
        by those."""
        latest: dict[str, tuple[dict, float]] = {}
        for config, cost in [*self.measured, *timings]:
            latest[config_key(self.space.complete(config))] = (config, cost)
        self.seen.update(latest)
        self.measured = list(latest.values())
        self.best_config, self.best_cost = min(self.measured, key=lambda m: m[1], default=(None, math.inf))
        if not math.isfinite(self.best_cost):
            self.best_config = None

    def ranked(self, n: int) -> list[dict]:
        """The `n` fastest configs measured (by their latest cost; failures left out)."""
        latest = {config_key(self.space.complete(c)): (c, cost) for c, cost in self.measured}
        fast = sorted((m for m in latest.values() if math.isfinite(m[1])), key=lambda m: m[1])
        return [c for c, _ in fast[:n]]

    def _fresh(self, cfg: dict, taken: set[str]) -> bool:
        key = config_key(self.space.complete(cfg))
        if key in self.seen or key in taken:
            return False
        taken.add(key)
        return True

    def _random(self, n: int, taken: set[str], tries: int = 20) -> list[dict]:
        out: list[dict] = []
        for _ in range(n * tries):
            if len(out) >= n:
                break
            cfg = self.space.sample(self.rng)
            if self._fresh(cfg, taken):
                out.append(cfg)
        return out

    def _mutants(self, parents: Sequence[dict], per: int, taken: set[str]) -> list[dict]:
        """Up to `per` fresh one-knob mutations of each parent."""
        out = []
        for p in parents:
            mine = 0
            for _ in range(per * 3):
                cfg = self.space.mutate(p, self.rng)
                if self._fresh(cfg, taken):
                    out.append(cfg)
                    mine += 1
                    if mine == per:
                        break
        return out

    def propose(self, n: int, model: Any = None, featurize: Featurize | None = None) -> list[dict]:
        taken: set[str] = set()
        out: list[dict] = []
        default = self.space.default()
        if self._fresh(default, taken):  # also after records of older code
            out.append(default)
        if model is None or featurize is None or getattr(model, "num_samples", 0) == 0:
            return out + self._random(n - len(out), taken)
        n_greedy = max(0, round((n - len(out)) * (1 - self.epsilon)))
        out += self._guided(n_greedy, model, featurize, taken)
        return out + self._random(n - len(out), taken)

    def _guided(self, n: int, model: Any, featurize: Featurize, taken: set[str]) -> list[dict]:
        if n <= 0:
            return []
        measured = sorted(self.measured, key=lambda t: t[1])
        top = [c for c, cost in measured if math.isfinite(cost)][: self.top_k]
        candidates = self._random(self.pool_random, taken) + self._mutants(top, self.pool_mutants, taken)
        knob_model = _knob_model(model)
        if knob_model is not None:
            candidates = self._walk(candidates, knob_model, taken)
        scored = _score(candidates, model, featurize)
        scored.sort(key=lambda t: -t[0])
        return [c for _, c in scored[:n]]

    def _walk(self, candidates: list[dict], knob_model: Any, taken: set[str]) -> list[dict]:
        """The `prescreen` best of the pool and `steps` generations of its mutants, by the
        knob-only model."""

        def knob_score(cfgs: list[dict]) -> list[tuple[float, dict]]:
            if not cfgs:
                return []
            x = np.stack([knob_features(self.space.complete(c)) for c in cfgs])
            return [(float(p), c) for p, c in zip(knob_model.predict(x), cfgs, strict=True)]

        scored = knob_score(candidates)
        for _ in range(self.steps):
            scored.sort(key=lambda t: -t[0])
            parents = [c for _, c in scored[: self.top_k]]
            scored += knob_score(self._mutants(parents, self.pool_mutants, taken))
        scored.sort(key=lambda t: -t[0])
        return [c for _, c in scored[: self.prescreen]]


def _knob_model(model: Any) -> Any:
    """A model of the knob features alone, trained on `model`'s data; None when that data
    has no knob columns (a model of other features) or is empty."""
    from autotune.cost_model import CostModel

    if not hasattr(model, "training_data"):
        return None
    x, costs, groups = model.training_data()
    if len(costs) == 0 or x.shape[1] != NUM_CANDIDATE_FEATURES:
        return None
    knob_model = CostModel(model.objective, seed=model.seed, num_rounds=50)
    knob_model.update(x[:, KNOB_OFFSET:], costs, groups)
    return knob_model


def _score(configs: list[dict], model: Any, featurize: Featurize) -> list[tuple[float, dict]]:
    if not configs:
        return []
    feats = featurize(configs)
    ok = [(f, c) for f, c in zip(feats, configs, strict=True) if f is not None]
    if not ok:
        return []
    pred = model.predict(np.stack([f for f, _ in ok]))
    return [(float(p), c) for p, (_, c) in zip(pred, ok, strict=True)]
