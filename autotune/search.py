"""Model-guided search over one task's knob space.

Each round `TaskSearch.propose(n)` returns n configs not measured yet:

1. the first round starts with the default config (the untuned kernel is the baseline);
2. without a trained cost model: random samples;
3. with one: a short simulated-annealing-style walk — a pool of random samples plus
   mutations (one knob changed, `Space.mutate`) of the best measured configs, scored by the
   model; the best-scored ones are mutated again for `steps` generations (each generation's
   candidates are scored, the pool keeps the top); then the top (1 - epsilon) n by
   predicted score and epsilon n random configs (epsilon-greedy exploration: the model is
   only as good as what it has seen).

Scoring needs the candidates' loop-IR features: `featurize(configs)` (the Measurer's
workers lower the candidates in parallel). `random` search (`model=None`) is the baseline
the evidence benchmark compares against.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tensorir.schedule.space import Space, config_key

Featurize = Callable[[Sequence[dict]], list[np.ndarray | None]]


@dataclass
class TaskSearch:
    space: Space
    rng: random.Random
    epsilon: float = 0.1
    pool_random: int = 16
    pool_mutants: int = 2  # per top config
    top_k: int = 6
    steps: int = 1  # each candidate is lowered to score it (~0.1-0.5 s): keep the pool small
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
        if not self.measured:
            default = self.space.default()
            if self._fresh(default, taken):
                out.append(default)
        if model is None or featurize is None or getattr(model, "num_samples", 0) == 0:
            return out + self._random(n - len(out), taken)
        n_greedy = max(0, round((n - len(out)) * (1 - self.epsilon)))
        out += self._guided(n_greedy, model, featurize, taken)
        return out + self._random(n - len(out), taken)

    def _guided(self, n: int, model: Any, featurize: Featurize, taken: set[str]) -> list[dict]:
        if n <= 0:
            return []
        top = [c for c, cost in sorted(self.measured, key=lambda t: t[1]) if math.isfinite(cost)][
            : self.top_k
        ]
        scored: list[tuple[float, dict]] = []
        candidates = self._random(self.pool_random, taken) + self._mutants(top, self.pool_mutants, taken)
        for step in range(self.steps + 1):
            scored += _score(candidates, model, featurize)
            scored.sort(key=lambda t: -t[0])
            if step < self.steps:
                parents = [c for _, c in scored[: self.top_k]]
                candidates = self._mutants(parents, self.pool_mutants, taken)
        return [c for _, c in scored[:n]]


def _score(configs: list[dict], model: Any, featurize: Featurize) -> list[tuple[float, dict]]:
    if not configs:
        return []
    feats = featurize(configs)
    ok = [(f, c) for f, c in zip(feats, configs, strict=True) if f is not None]
    if not ok:
        return []
    pred = model.predict(np.stack([f for f, _ in ok]))
    return [(float(p), c) for p, (_, c) in zip(pred, ok, strict=True)]
