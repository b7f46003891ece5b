"""Outputs whose length depends on the data, as the runtime returns them.

A compiled model writes such an output at its upper-bound shape and its real length into a
companion output, an int64 scalar (frontend/lengths.py). The manifest marks both:

    {"name": "boxes", "shape": [300, 4], ..., "length": {"axis": 0, "output": 2}}
    {"name": "boxes__length", "shape": [], "dtype": "int64", "length_of": 0}

`trim` turns the buffers of one run into the model's outputs: each dynamic output cut to
its length, the companions dropped. The Python API returns those; the C API hands the
caller every buffer (model.h says which is which).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def model_outputs(specs: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The manifest's outputs without the length companions."""
    return [t for t in specs if "length_of" not in t]


def cut(a: np.ndarray, axis: int, n: int) -> np.ndarray:
    """The first n entries of `a` along `axis` (a view)."""
    return a[(slice(None),) * axis + (slice(0, max(0, min(int(n), a.shape[axis]))),)]


def trim(specs: Sequence[Mapping[str, Any]], arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Each output cut to its run-time length, companions dropped (model output order)."""
    out = []
    for t, a in zip(specs, arrays, strict=True):
        if "length_of" in t:
            continue
        if "length" in t:
            a = cut(a, t["length"]["axis"], arrays[t["length"]["output"]])
        out.append(a)
    return out


def output_specs(names: Sequence[str], lengths: Mapping[str, tuple[int, str]]) -> list[dict[str, Any]]:
    """The manifest's length keys for outputs `names` given a graph's `output_lengths`."""
    index = {n: k for k, n in enumerate(names)}
    of = {companion: index[name] for name, (_, companion) in lengths.items()}
    specs: list[dict[str, Any]] = []
    for n in names:
        spec: dict[str, Any] = {}
        if n in lengths:
            spec["length"] = {"axis": lengths[n][0], "output": index[lengths[n][1]]}
        if n in of:
            spec["length_of"] = of[n]
        specs.append(spec)
    return specs


def model_output_names(names: Sequence[str], lengths: Mapping[str, tuple[int, str]]) -> list[str]:
    """A graph's output names (graph order) without the length companions."""
    companions = {c for _, c in lengths.values()}
    return [n for n in names if n not in companions]


def trim_graph_outputs(
    names: Sequence[str], lengths: Mapping[str, tuple[int, str]], arrays: Sequence[np.ndarray]
) -> tuple[list[str], list[np.ndarray]]:
    """`trim` for a graph's outputs (names in graph order) and its `output_lengths`."""
    return model_output_names(names, lengths), trim(output_specs(names, lengths), arrays)
