"""The layout block per segment, from in-model kernel profiles.

A layout segment (tensorir/passes/layout_segments.py) is a part of the graph whose packed
tensors share one channel-block cap; dense convs join segments and read and write any block,
so each segment may take its own cap. The model is compiled once per cap (every segment
capped alike), every kernel is timed in place in model order (Module.profile, rounds
interleaved across the builds), and each kernel's time is charged to the segment of the value
it writes (its node name, which the kernel keeps from the model's node: passes.inherit_name).
A segment whose kernels ran fastest with another cap is a candidate. The guess is rough: a
conv between two segments is charged to the one it writes and was timed with both sides
capped alike, and in PaddleDetection's PicoDet a conv reading a block-32 segment and writing
a block-16 one ran 33% slower than with 16 on both sides and 17% slower than with 32. So
graph_tune.refine_layout_caps
tries the candidates one at a time on real builds (all kernels profiled, kept where the
model's kernels took less time in all), and keeps the caps found only where the whole model,
timed on fresh builds, runs faster with them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from autotune.interleaved import profile_rounds


def segment_of_names(g: Any) -> dict[str, int]:
    """{node name: segment of the values it writes} on the graph before layout, for the names
    whose values lie in one segment."""
    from tensorir.graph.graph import Value
    from tensorir.passes.layout_segments import layout_segments

    segments = layout_segments(g)
    seen: dict[str, set[int]] = {}
    for nid in g.op_nodes():
        name = g.node(nid).name
        outs = [segments[v] for i in range(len(g.node(nid).outputs)) if (v := Value(nid, i)) in segments]
        if name and outs:
            seen.setdefault(name, set()).update(outs)
    return {name: next(iter(s)) for name, s in seen.items() if len(s) == 1}


def kernel_times(mods: Sequence[Any], rounds: int = 5) -> list[np.ndarray]:
    """Per module, each kernel's in-model seconds: the median over `rounds` (the modules
    profiled in turn, round by round) of Module.profile's medians of 3 passes."""
    return [np.median(np.array(rows), axis=0) for rows in profile_rounds(mods, rounds, repeat=3)]


def segment_times(mods: Sequence[Any], names: Mapping[str, int], n: int, rounds: int = 5) -> list[np.ndarray]:
    """Per module: seconds per segment (kernel_times summed by the segment each kernel's
    node writes; unnamed kernels count for none)."""
    out = []
    for m, med in zip(mods, kernel_times(mods, rounds), strict=True):
        seg = np.zeros(n)
        for kernel, t in zip(m.manifest["kernels"], med, strict=True):
            s = names.get(kernel.get("node", ""))
            if s is not None:
                seg[s] += t
        out.append(seg)
    return out


def candidates(
    times: Mapping[int, np.ndarray], base: int, margin: float = 0.05, floor: float = 0.002
) -> list[tuple[float, int, int]]:
    """(seconds saved, segment, cap) for each segment whose kernels ran fastest with another
    cap than `base`, by `margin` of the segment's time and `floor` of the model's; largest
    saving first. Only a guess: a conv reading the segment is charged to the one it writes,
    and with its input in another block than its output it may run slower than either."""
    total = float(times[base].sum())
    out = []
    for s in range(len(times[base])):
        t_base = times[base][s]
        cap = min(times, key=lambda c: times[c][s])
        gain = t_base - times[cap][s]
        if cap != base and gain > margin * t_base and gain > floor * total:
            out.append((float(gain), s, cap))
    return sorted(out, reverse=True)
