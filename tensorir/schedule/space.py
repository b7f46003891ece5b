"""Schedule templates with explicit knobs: the tuning space of a kernel.

A template is an ordinary compute + schedule whose decisions (tile sizes, loop order,
unroll, algorithm...) are read through `knob`:

    ow_tile = knob("ow_tile", [1, 2, 4, 6, 8, 12], default=heuristic_value)

Outside any configuration `knob` returns the default, so the untuned build is the
heuristic one. Inside `with use_config(cfg)` it returns cfg's value (a value outside the
choices is a `ScheduleError`). Inside `with collect_space() as space` it returns the
default and records the knob, so running a template once discovers its space (the
approach of AutoTVM's ConfigSpace: the template is the single description of its space).

A `Space` is per algorithm: the `algorithm` knob, when a template has one, selects a
branch whose other knobs are collected with that algorithm fixed (`discover_space`).
Configs are plain JSON dicts {knob name: value}; missing knobs take their defaults.
"""

from __future__ import annotations

import contextlib
import json
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from tensorir.schedule.schedule import ScheduleError

Config = dict[str, Any]


@dataclass(frozen=True)
class Knob:
    name: str
    choices: tuple[Any, ...]
    default: Any

    def __str__(self) -> str:
        return f"{self.name} in {list(self.choices)} (default {self.default!r})"


@dataclass
class _Collector:
    knobs: dict[str, Knob] = field(default_factory=dict)
    fixed: Config = field(default_factory=dict)


_CONFIG: ContextVar[Config | None] = ContextVar("tir_config", default=None)
_COLLECT: ContextVar[_Collector | None] = ContextVar("tir_collect", default=None)
_PINNED: ContextVar[Config | None] = ContextVar("tir_pinned", default=None)


def knob(name: str, choices: Sequence[Any], default: Any) -> Any:
    """The value of knob `name` for the kernel being built (see the module docstring)."""
    options = tuple(dict.fromkeys(choices))  # ordered, unique
    if default not in options:
        options = (*options, default)
    col = _COLLECT.get()
    pinned = _PINNED.get()
    if pinned and name in pinned:
        if col is not None:
            col.knobs.setdefault(name, Knob(name, options, default))
        return pinned[name]
    if col is not None:
        col.knobs.setdefault(name, Knob(name, options, default))
        return col.fixed.get(name, default)
    cfg = _CONFIG.get()
    if not cfg or name not in cfg:
        return default
    value = cfg[name]
    if value not in options:
        raise ScheduleError(f"knob '{name}' = {value!r} is not one of {list(options)}")
    return value


@contextlib.contextmanager
def use_config(cfg: Mapping[str, Any] | None) -> Iterator[None]:
    """Build kernels with these knob values (None or {}: the defaults)."""
    token = _CONFIG.set(dict(cfg) if cfg else None)
    try:
        yield
    finally:
        _CONFIG.reset(token)


def pinned(name: str) -> Any | None:
    """The value `pin` set for `name` here, else None: a decision that is not a knob (not in
    the space, so the tuner never samples it) but that tests may still force."""
    return (_PINNED.get() or {}).get(name)


@contextlib.contextmanager
def pin(name: str, value: Any) -> Iterator[None]:
    """Within this block `knob(name, ...)` returns `value` whatever the mode: a decision made
    once (the conv algorithm, from the target) that later reads must not recompute."""
    token = _PINNED.set({**(_PINNED.get() or {}), name: value})
    try:
        yield
    finally:
        _PINNED.reset(token)


@contextlib.contextmanager
def collect_knobs(fixed: Mapping[str, Any] | None = None) -> Iterator[dict[str, Knob]]:
    """Record every knob read while building (values: `fixed`'s, else the defaults)."""
    col = _Collector(fixed=dict(fixed or {}))
    token = _COLLECT.set(col)
    try:
        yield col.knobs
    finally:
        _COLLECT.reset(token)


@dataclass(frozen=True)
class Space:
    """Knobs per algorithm ("" when the template has a single algorithm)."""

    branches: Mapping[str, tuple[Knob, ...]]
    default_algorithm: str = ""

    @property
    def algorithms(self) -> list[str]:
        return list(self.branches)

    def knobs(self, algorithm: str | None = None) -> tuple[Knob, ...]:
        return self.branches[self.default_algorithm if algorithm is None else algorithm]

    def size(self) -> int:
        total = 0
        for knobs in self.branches.values():
            n = 1
            for k in knobs:
                n *= len(k.choices)
            total += n
        return total

    def default(self) -> Config:
        cfg = {k.name: k.default for k in self.knobs()}
        if self.default_algorithm:
            cfg["algorithm"] = self.default_algorithm
        return cfg

    def complete(self, cfg: Mapping[str, Any]) -> Config:
        """cfg with every knob of its branch filled (defaults where missing)."""
        algo = cfg.get("algorithm", self.default_algorithm) or ""
        if algo not in self.branches:
            raise ScheduleError(f"algorithm {algo!r} is not one of {self.algorithms}")
        out = {k.name: cfg.get(k.name, k.default) for k in self.branches[algo]}
        if algo:
            out["algorithm"] = algo
        return out

    def sample(self, rng: random.Random) -> Config:
        algo = rng.choice(self.algorithms)
        cfg = {k.name: rng.choice(k.choices) for k in self.branches[algo]}
        if algo:
            cfg["algorithm"] = algo
        return cfg

    def mutate(self, cfg: Mapping[str, Any], rng: random.Random) -> Config:
        """A neighbour: one knob changed, the algorithm counting as one more knob. A switch
        of algorithm keeps the values of same-named knobs the new branch allows (winograd2
        -> winograd4 keeps its tile knobs) and samples the others."""
        out = self.complete(cfg)
        algo = out.get("algorithm", "")
        knobs = [k for k in self.knobs(algo) if len(k.choices) > 1]
        others = [a for a in self.algorithms if a != algo]
        if others and rng.randrange(len(knobs) + 1) == len(knobs):
            new = rng.choice(others)
            switched = {
                k.name: out[k.name] if out.get(k.name) in k.choices else rng.choice(k.choices)
                for k in self.branches[new]
            }
            return {**switched, "algorithm": new}
        if not knobs:
            return out
        k = rng.choice(knobs)
        out[k.name] = rng.choice([c for c in k.choices if c != out[k.name]])
        return out

    def __str__(self) -> str:
        lines = []
        for algo, knobs in self.branches.items():
            head = f"algorithm {algo}" + (" (default)" if algo == self.default_algorithm else "")
            lines.append(head if algo else "knobs")
            lines += [f"  {k}" for k in knobs]
        return "\n".join(lines)


def discover_space(build: Callable[[], Any]) -> Space:
    """Run `build` (compute + schedule of one kernel) under `collect_knobs` once per
    algorithm and return the space it reads."""
    with collect_knobs() as first:
        build()
    algo = first.get("algorithm")
    if algo is None:
        return Space({"": tuple(first.values())})
    branches = {}
    for choice in algo.choices:
        with collect_knobs({"algorithm": choice}) as knobs:
            build()
        branches[choice] = tuple(k for k in knobs.values() if k.name != "algorithm")
    return Space(branches, default_algorithm=algo.default)


def config_key(cfg: Mapping[str, Any]) -> str:
    return json.dumps(dict(cfg), sort_keys=True, separators=(",", ":"))
